// SPDX-License-Identifier: Apache-2.0
// Implementation of wisp::reuse_distance_counter (included by reuse_distance.hpp).
#pragma once

namespace wisp {

namespace detail {
inline constexpr std::size_t max_key_space = std::size_t{1} << 30;
inline constexpr std::size_t min_slots = 128;

[[nodiscard]] constexpr std::size_t round_up_64(std::size_t n) noexcept {
  return (n + 63) / 64 * 64;
}
}  // namespace detail

inline reuse_distance_counter::reuse_distance_counter(std::size_t key_space,
                                                      std::size_t distinct_hint) {
  WISP_EXPECTS(key_space > 0, "reuse_distance_counter needs a non-empty key space");
  WISP_EXPECTS(key_space <= detail::max_key_space, "key space ", key_space,
               " exceeds the supported maximum ", detail::max_key_space);
  const std::size_t hint = distinct_hint == 0 ? key_space : std::min(distinct_hint, key_space);
  const std::size_t slots = detail::round_up_64(std::max(2 * hint, detail::min_slots));
  last_.assign(key_space, no_slot);
  slot_key_.assign(slots, 0);
  bits_.assign(slots / 64, 0);
  tree_.assign(slots / 64 + 1, 0);
}

inline void reuse_distance_counter::reset() noexcept {
  std::fill(last_.begin(), last_.end(), no_slot);
  std::fill(bits_.begin(), bits_.end(), std::uint64_t{0});
  std::fill(tree_.begin(), tree_.end(), 0u);
  now_ = live_ = sealed_ = 0;
  accesses_ = 0;
}

inline std::uint32_t reuse_distance_counter::prefix_words(std::uint32_t words) const noexcept {
  std::uint32_t sum = 0;
  for (std::uint32_t i = words; i != 0; i &= i - 1) {
    sum += tree_[i];
  }
  return sum;
}

inline void reuse_distance_counter::tree_add(std::uint32_t word, std::uint32_t delta) noexcept {
  // Unsigned wrap-around makes `delta = ~0u` a decrement.
  const auto size = static_cast<std::uint32_t>(tree_.size());
  for (std::uint32_t i = word + 1; i < size; i += i & (~i + 1)) {
    tree_[i] += delta;
  }
}

inline void reuse_distance_counter::seal_word(std::uint32_t word) noexcept {
  const auto marks = static_cast<std::uint32_t>(std::popcount(bits_[word]));
  if (marks != 0) {
    tree_add(word, marks);
    sealed_ += marks;
  }
}

inline reuse_distance_counter::distance_type reuse_distance_counter::peek(
    key_type key) const noexcept {
  const std::uint32_t slot = last_[key];
  if (slot == no_slot) {
    return cold;
  }
  const std::uint32_t word = slot >> 6;
  const std::uint64_t bit = std::uint64_t{1} << (slot & 63);
  const auto below_in_word = static_cast<std::uint32_t>(std::popcount(bits_[word] & (bit - 1)));
  const std::uint32_t before = below_in_word + (word == (now_ >> 6) ? sealed_ : prefix_words(word));
  return live_ - before;
}

inline reuse_distance_counter::distance_type reuse_distance_counter::distance_of(
    key_type key) const {
  WISP_EXPECTS(key < last_.size(), "key ", key, " is outside the key space [0, ", last_.size(),
               ")");
  return peek(key);
}

inline reuse_distance_counter::distance_type reuse_distance_counter::access(key_type key) {
  WISP_EXPECTS(key < last_.size(), "key ", key, " is outside the key space [0, ", last_.size(),
               ")");
  ++accesses_;
  const std::uint32_t current = now_ >> 6;
  const distance_type distance = peek(key);
  if (const std::uint32_t slot = last_[key]; slot != no_slot) {
    const std::uint32_t word = slot >> 6;
    bits_[word] &= ~(std::uint64_t{1} << (slot & 63));
    if (word != current) {
      tree_add(word, ~0u);
      --sealed_;
    }
    --live_;
  }
  bits_[current] |= std::uint64_t{1} << (now_ & 63);
  slot_key_[now_] = key;
  last_[key] = now_;
  ++live_;
  ++now_;
  if ((now_ & 63) == 0) {
    seal_word(current);
    if (now_ == slot_key_.size()) {
      compact();
    }
  }
  return distance;
}

inline void reuse_distance_counter::access_call(std::span<const key_type> keys,
                                                std::span<distance_type> out) {
  WISP_EXPECTS(out.size() >= keys.size(), "access_call: ", keys.size(), " keys but room for ",
               out.size(), " distances");
  for (const key_type key : keys) {
    WISP_EXPECTS(key < last_.size(), "key ", key, " is outside the key space [0, ", last_.size(),
                 ")");
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    out[i] = peek(keys[i]);
  }
  // The call's keys touched so far are the `touched` most recent ones, so a key's access distance
  // is at most `touched` exactly when it repeats within this call.
  std::uint32_t touched = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const distance_type now = access(keys[i]);
    if (now != cold && now <= touched) {
      out[i] = 1;
    } else {
      ++touched;
    }
  }
}

inline void reuse_distance_counter::compact() {
  // Renumber the live marks 0..live_-1 in timestamp order (in place: the write index never passes
  // the read index).
  std::uint32_t next = 0;
  for (std::size_t word = 0; word < bits_.size(); ++word) {
    for (std::uint64_t marks = bits_[word]; marks != 0; marks &= marks - 1) {
      const auto slot = static_cast<std::uint32_t>(word * 64 + std::countr_zero(marks));
      const std::uint32_t key = slot_key_[slot];
      slot_key_[next] = key;
      last_[key] = next;
      ++next;
    }
  }
  // Keep at least half of the slots free so that the next compaction is as far away as this one
  // took: amortised O(1) per access.
  if (std::size_t{live_} * 2 > slot_key_.size()) {
    const std::size_t slots = slot_key_.size() * 2;
    slot_key_.resize(slots);
    bits_.resize(slots / 64);
    tree_.resize(slots / 64 + 1);
  }
  std::fill(bits_.begin(), bits_.end(), std::uint64_t{0});
  const std::uint32_t full_words = live_ / 64;
  std::fill_n(bits_.begin(), full_words, ~std::uint64_t{0});
  if (live_ % 64 != 0) {
    bits_[full_words] = (std::uint64_t{1} << (live_ % 64)) - 1;
  }
  now_ = live_;
  sealed_ = full_words * 64;
  rebuild_tree();
}

inline void reuse_distance_counter::rebuild_tree() noexcept {
  // Linear-time Fenwick construction over the sealed words (those below now_ / 64).
  std::fill(tree_.begin(), tree_.end(), 0u);
  const std::uint32_t sealed_words = now_ >> 6;
  const auto size = static_cast<std::uint32_t>(tree_.size());
  for (std::uint32_t i = 1; i < size; ++i) {
    if (i <= sealed_words) {
      tree_[i] += static_cast<std::uint32_t>(std::popcount(bits_[i - 1]));
    }
    const std::uint32_t parent = i + (i & (~i + 1));
    if (parent < size) {
      tree_[parent] += tree_[i];
    }
  }
}

}  // namespace wisp
