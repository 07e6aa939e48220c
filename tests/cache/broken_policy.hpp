// SPDX-License-Identifier: Apache-2.0
// Test support: a whole-call policy that breaks its contract on purpose, shared by the cache and
// pager tests of how a bad victim is reported.
#pragma once

#include <wisp/cache/lru.hpp>

#include <string_view>

namespace wisp::test {

enum class bad_victim { repeated, protected_key, not_resident, out_of_range, missing };

/// `lru` whose on_call, when its call needs at least two victims, corrupts the second one.
template <bad_victim Mode>
class corrupt_on_call : public lru {
 public:
  static constexpr std::string_view name = "corrupt_on_call";
  void reset(const key_layout& layout) {
    lru::reset(layout);
    key_space_ = layout.size();
  }
  void on_call(const call_events& call) noexcept {
    lru::on_call(call);
    if (call.victims.size() < 2) {
      return;
    }
    cache_key& v = call.victims[1];
    switch (Mode) {
      case bad_victim::repeated:
        v = call.victims[0];
        break;
      case bad_victim::protected_key:
        v = call.keys[0];
        break;
      case bad_victim::not_resident:
        v = key_space_ - 1;
        break;  // never accessed below
      case bad_victim::out_of_range:
        v = key_space_;
        break;
      case bad_victim::missing:
        v = no_key;
        break;
    }
  }

 private:
  cache_key key_space_ = 0;
};
static_assert(call_eviction_policy<corrupt_on_call<bad_victim::missing>>);

}  // namespace wisp::test
