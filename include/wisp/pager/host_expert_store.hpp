// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `host_expert_store`: host stand-in for the copy engine, for tests and examples. It owns
/// host masters `[experts x bytes]` and a slot buffer `[slots x bytes]`, applies a pager's copy
/// plan with `memcpy`, and checks that a slot holds an expert's exact bytes.
/// @code
/// wisp::host_expert_store store(/*experts=*/64, /*slots=*/8, /*bytes=*/256);
/// store.fill_pattern(/*seed=*/1);                      // distinct bytes per expert
/// auto r = pager.prepare(0, ids, tokens, k);
/// store.apply(r.copy_plan);
/// for (std::int32_t e : r.experts) assert(store.slot_holds(r.expert_map[e], e));
/// @endcode
#pragma once

#include <wisp/cache/slot_cache.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace wisp {

/// @brief Host masters and host "device" slots of fixed-size experts. Not thread-safe.
class host_expert_store {
 public:
  /// Zero-filled masters and slots.
  /// @throws wisp::logic_error if a count is < 1 or `bytes_per_expert` is 0; std::bad_alloc.
  host_expert_store(std::int32_t experts, std::int32_t slots, std::size_t bytes_per_expert)
      : experts_(experts), slots_(slots), bytes_(bytes_per_expert) {
    WISP_EXPECTS(experts >= 1 && slots >= 1 && bytes_per_expert >= 1, "host_expert_store: experts ",
                 experts, ", slots ", slots, " and bytes per expert ", bytes_per_expert,
                 " must all be >= 1");
    masters_.assign(static_cast<std::size_t>(experts) * bytes_, std::byte{0});
    slot_bytes_.assign(static_cast<std::size_t>(slots) * bytes_, std::byte{0});
  }

  /// Fills every master with bytes hashed from (seed, expert, position); the low nibble of every
  /// byte is `expert mod 16`, so experts less than 16 apart differ at every byte, and any two
  /// experts differ with overwhelming probability for a few dozen bytes. O(experts x bytes).
  void fill_pattern(std::uint32_t seed = 0) noexcept {
    for (std::int32_t e = 0; e < experts_; ++e) {
      std::span<std::byte> m = master(e);
      for (std::size_t i = 0; i < bytes_; ++i) {
        std::uint32_t x = seed * 0x9e3779b9u ^ (static_cast<std::uint32_t>(e) * 0x85ebca6bu) ^
                          (static_cast<std::uint32_t>(i) * 0xc2b2ae35u);
        x ^= x >> 15;
        x *= 0x2c1b3c6du;
        x ^= x >> 12;
        m[i] = static_cast<std::byte>((x & 0xf0u) | (static_cast<std::uint32_t>(e) & 0x0fu));
      }
    }
  }

  /// Copies each plan entry's master into its slot, in order. All entries are validated first.
  /// O(plan.size() x bytes). @throws wisp::logic_error (nothing copied) on an expert or slot out of
  /// range.
  void apply(std::span<const copy_op> plan) {
    for (std::size_t i = 0; i < plan.size(); ++i) {
      WISP_EXPECTS(plan[i].expert >= 0 && plan[i].expert < experts_ && plan[i].slot >= 0 &&
                       plan[i].slot < slots_,
                   "host_expert_store::apply: plan[", i, "] = {expert ", plan[i].expert, ", slot ",
                   plan[i].slot, "} is outside experts [0, ", experts_, ") x slots [0, ", slots_,
                   ")");
    }
    for (const copy_op& op : plan) {
      std::memcpy(slot(op.slot).data(), master(op.expert).data(), bytes_);
    }
  }

  /// Applies the slot relocations a shrinking `resize` reported (`from` -> `to`), in order.
  /// @throws wisp::logic_error (nothing copied) on a slot out of range.
  void apply(std::span<const slot_move> moves) {
    for (std::size_t i = 0; i < moves.size(); ++i) {
      WISP_EXPECTS(
          moves[i].from >= 0 && moves[i].from < slots_ && moves[i].to >= 0 && moves[i].to < slots_,
          "host_expert_store::apply: move ", i, " {", moves[i].from, " -> ", moves[i].to,
          "} is outside slots [0, ", slots_, ")");
    }
    for (const slot_move& m : moves) {
      std::memmove(slot(m.to).data(), slot(m.from).data(), bytes_);
    }
  }

  /// True if `slot` holds exactly the bytes of master `expert`. O(bytes).
  /// @throws wisp::logic_error on an expert or slot out of range.
  [[nodiscard]] bool slot_holds(std::int32_t slot_index, std::int32_t expert) const {
    const std::span<const std::byte> s = slot(slot_index);
    const std::span<const std::byte> m = master(expert);
    return std::memcmp(s.data(), m.data(), bytes_) == 0;
  }

  /// Master bytes of `expert`. @throws wisp::logic_error if out of range.
  [[nodiscard]] std::span<std::byte> master(std::int32_t expert) {
    check_expert(expert);
    return {masters_.data() + static_cast<std::size_t>(expert) * bytes_, bytes_};
  }
  /// @copydoc master
  [[nodiscard]] std::span<const std::byte> master(std::int32_t expert) const {
    check_expert(expert);
    return {masters_.data() + static_cast<std::size_t>(expert) * bytes_, bytes_};
  }
  /// Bytes of slot `slot_index`. @throws wisp::logic_error if out of range.
  [[nodiscard]] std::span<std::byte> slot(std::int32_t slot_index) {
    check_slot(slot_index);
    return {slot_bytes_.data() + static_cast<std::size_t>(slot_index) * bytes_, bytes_};
  }
  /// @copydoc slot
  [[nodiscard]] std::span<const std::byte> slot(std::int32_t slot_index) const {
    check_slot(slot_index);
    return {slot_bytes_.data() + static_cast<std::size_t>(slot_index) * bytes_, bytes_};
  }

  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::int32_t slots() const noexcept { return slots_; }
  [[nodiscard]] std::size_t bytes_per_expert() const noexcept { return bytes_; }

 private:
  void check_expert(std::int32_t expert) const {
    WISP_EXPECTS(expert >= 0 && expert < experts_, "host_expert_store: expert ", expert,
                 " is outside [0, ", experts_, ")");
  }
  void check_slot(std::int32_t slot_index) const {
    WISP_EXPECTS(slot_index >= 0 && slot_index < slots_, "host_expert_store: slot ", slot_index,
                 " is outside [0, ", slots_, ")");
  }

  std::int32_t experts_;
  std::int32_t slots_;
  std::size_t bytes_;
  std::vector<std::byte> masters_;
  std::vector<std::byte> slot_bytes_;
};

}  // namespace wisp
