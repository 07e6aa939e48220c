// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Strong types for byte sizes and for ids where two kinds of id sit side by side.
///
/// **One type per quantity.** Layer, expert and slot ids, the expert-side counts (layers, experts,
/// top-k) and capacities are plain `std::int32_t` everywhere (the pager, the caches, traces,
/// kernels, the allocator's caps), so a top-k buffer from a router goes through without
/// conversion; KV token and block counts are `std::uint64_t`; budgets and bytes summed across
/// components are `byte_size`, bytes in plain records, statistics and hot structures are
/// `std::uint64_t` fields named `*_bytes` (docs/conventions.md); reuse distances are the reuse
/// area's `distance_type`.
/// `expert_id` and `layer_id` wrap an id only where a call takes two kinds of id next to each
/// other and a swap would compile silently: `adapter_layout::row(adapter, expert_id)`,
/// `routing_trace::expert(step, layer_id, j)`. They are trivially copyable, with no overhead.
/// @code
/// using namespace wisp::literals;
/// wisp::expert_id e{17};
/// wisp::byte_size budget = 80_GiB;
/// auto slots = budget / (3 * 768 * 2048 * 2_B);   // how many 9 MiB experts fit
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>

namespace wisp {

/// @brief An integer id made distinct by its `Tag`. Explicit construction, no arithmetic, total
/// order. Trivially copyable, usable in device code.
template <class Tag, class Rep = std::int32_t>
class strong_id {
 public:
  using rep = Rep;

  constexpr strong_id() = default;
  WISP_HOST_DEVICE constexpr explicit strong_id(Rep value) noexcept : value_(value) {}

  /// The underlying integer.
  [[nodiscard]] WISP_HOST_DEVICE constexpr Rep value() const noexcept { return value_; }

  friend constexpr bool operator==(strong_id, strong_id) = default;
  friend constexpr auto operator<=>(strong_id, strong_id) = default;

  friend std::ostream& operator<<(std::ostream& out, strong_id id) {
    return out << Tag::prefix << id.value_;
  }

 private:
  Rep value_{};
};

namespace detail {
struct expert_tag {
  static constexpr const char* prefix = "expert ";
};
struct layer_tag {
  static constexpr const char* prefix = "layer ";
};
}  // namespace detail

/// Index of an expert within one MoE layer, in `[0, experts)`.
using expert_id = strong_id<detail::expert_tag>;
/// Index of a MoE layer, 0-based over the MoE layers only (dense layers are not counted).
using layer_id = strong_id<detail::layer_tag>;

/// @brief A number of bytes. Arithmetic is checked: a result that would wrap around throws
/// `wisp::logic_error` naming both operands, because a wrapped byte count silently corrupts every
/// budget computed from it.
class byte_size {
 public:
  constexpr byte_size() = default;
  constexpr explicit byte_size(std::uint64_t bytes) noexcept : bytes_(bytes) {}

  /// The number of bytes.
  [[nodiscard]] constexpr std::uint64_t count() const noexcept { return bytes_; }

  friend constexpr bool operator==(byte_size, byte_size) = default;
  friend constexpr auto operator<=>(byte_size, byte_size) = default;

  /// @throws wisp::logic_error if the sum exceeds 2^64 - 1.
  friend constexpr byte_size operator+(byte_size a, byte_size b) {
    WISP_EXPECTS(a.bytes_ <= max_count - b.bytes_, "byte_size overflow: ", a.bytes_, " + ",
                 b.bytes_);
    return byte_size{a.bytes_ + b.bytes_};
  }
  /// @throws wisp::logic_error if `b > a`.
  friend constexpr byte_size operator-(byte_size a, byte_size b) {
    WISP_EXPECTS(b.bytes_ <= a.bytes_, "byte_size underflow: ", a.bytes_, " - ", b.bytes_);
    return byte_size{a.bytes_ - b.bytes_};
  }
  /// @throws wisp::logic_error if the product exceeds 2^64 - 1.
  friend constexpr byte_size operator*(byte_size a, std::uint64_t n) {
    WISP_EXPECTS(n == 0 || a.bytes_ <= max_count / n, "byte_size overflow: ", a.bytes_, " * ", n);
    return byte_size{a.bytes_ * n};
  }
  friend constexpr byte_size operator*(std::uint64_t n, byte_size a) { return a * n; }
  /// How many whole `b` fit in `a`. @throws wisp::logic_error if `b` is zero.
  friend constexpr std::uint64_t operator/(byte_size a, byte_size b) {
    WISP_EXPECTS(b.bytes_ != 0, "division of ", a.bytes_, " bytes by a zero byte_size");
    return a.bytes_ / b.bytes_;
  }
  /// What is left of `a` after taking out whole `b`. @throws wisp::logic_error if `b` is zero.
  friend constexpr byte_size operator%(byte_size a, byte_size b) {
    WISP_EXPECTS(b.bytes_ != 0, "remainder of ", a.bytes_, " bytes by a zero byte_size");
    return byte_size{a.bytes_ % b.bytes_};
  }
  constexpr byte_size& operator+=(byte_size b) { return *this = *this + b; }
  constexpr byte_size& operator-=(byte_size b) { return *this = *this - b; }

  /// The smallest multiple of `granule` that is >= this size.
  /// @throws wisp::logic_error if `granule` is zero or the result overflows.
  [[nodiscard]] constexpr byte_size round_up(byte_size granule) const {
    const byte_size rest = *this % granule;
    return rest.bytes_ == 0 ? *this : *this + (granule - rest);
  }

  friend std::ostream& operator<<(std::ostream& out, byte_size size) {
    return out << size.bytes_ << " B";
  }

 private:
  static constexpr std::uint64_t max_count = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t bytes_{};
};

/// User-defined literals for byte sizes: `512_B`, `64_KiB`, `2_MiB`, `80_GiB`.
namespace literals {
constexpr byte_size operator""_B(unsigned long long n) {
  return byte_size{n};
}
constexpr byte_size operator""_KiB(unsigned long long n) {
  return byte_size{n} * 1024u;
}
constexpr byte_size operator""_MiB(unsigned long long n) {
  return byte_size{n} * (1024u * 1024u);
}
constexpr byte_size operator""_GiB(unsigned long long n) {
  return byte_size{n} * (1024u * 1024u * 1024u);
}
}  // namespace literals

}  // namespace wisp

template <class Tag, class Rep>
struct std::hash<wisp::strong_id<Tag, Rep>> {
  [[nodiscard]] std::size_t operator()(wisp::strong_id<Tag, Rep> id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};

template <>
struct std::hash<wisp::byte_size> {
  [[nodiscard]] std::size_t operator()(wisp::byte_size size) const noexcept {
    return std::hash<std::uint64_t>{}(size.count());
  }
};
