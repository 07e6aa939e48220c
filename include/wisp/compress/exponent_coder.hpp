// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief What an exponent coder is (`exponent_coder`), the coder ids stored in compressed tensors,
/// the `raw_coder` every container falls back to, and the owning type-erased `any_coder` /
/// `coder_set` with which a program picks coders by label or id at run time.
///
/// A coder turns a stream of exponent bytes into bytes and back. It knows nothing of BF16: the
/// container (`compressed_bf16.hpp`) splits the tensor, cuts the exponents into E-chunks and asks
/// a coder for each. Decoding is told the exact symbol count, so a coder never has to store it.
/// @code
/// static_assert(wisp::exponent_coder<wisp::huffman_coder>);
/// wisp::coder_set coders = wisp::core_coders();        // raw + huffman
/// coders.add(wisp::zstd_coder{});                      // optional, from <wisp/compress/zstd.hpp>
/// const wisp::any_coder& c = coders.by_label("zstd");
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// @brief Identifies the coder of one E-chunk inside a compressed tensor; part of the format, so
/// values are never reused. Several encoders may share one id when their outputs decode alike
/// (lz4 and lz4hc both write LZ4 blocks).
enum class coder_id : std::uint8_t {
  raw = 0,      ///< exponent bytes stored as they are
  huffman = 1,  ///< canonical Huffman, table-driven, decodable on host and device
  zstd = 2,     ///< a Zstandard frame (wisp::zstd)
  lz4 = 3,      ///< an LZ4 block, from LZ4 or LZ4HC (wisp::lz4)
};

/// The format's names of the coder ids: "raw", "huffman", "zstd", "lz4" (`to_string`,
/// `from_string`; an id read from a file that is none of these prints as "unknown").
template <>
struct enum_names<coder_id> {
  static constexpr std::array<enum_name<coder_id>, 4> values{{{coder_id::raw, "raw"},
                                                              {coder_id::huffman, "huffman"},
                                                              {coder_id::zstd, "zstd"},
                                                              {coder_id::lz4, "lz4"}}};
};

/// @deprecated The format's name of a coder id: `to_string(id)`.
[[deprecated("use wisp::to_string(coder_id)")]] [[nodiscard]] constexpr std::string_view
coder_id_name(coder_id id) noexcept {
  return to_string(id);
}

/// @brief A lossless coder of exponent byte streams.
///
/// - `C::name`: the coder's family, a `static constexpr std::string_view` ("huffman", "zstd",
///   "lz4": the name of the format it writes);
/// - `c.id()`: the `coder_id` written beside its output;
/// - `c.label()`: this coder with its settings, for people and command lines: its `name`, plus
///   the setting where it is not the default ("huffman-b7", "zstd-19", "lz4hc");
/// - `c.encode(symbols, sink)`: appends the encoding of `symbols` to `sink`;
/// - `c.decode(encoded, out)`: writes exactly `out.size()` symbols decoded from all of `encoded`,
///   or throws `wisp::format_error` (never reads or writes out of bounds, whatever the input).
///
/// `any_coder`, which wraps any of them at run time, has a `label()` but no static `name`.
template <class C>
concept exponent_coder = std::copy_constructible<C> &&
    requires(const C& c, std::span<const std::uint8_t> in, std::vector<std::uint8_t>& sink,
             std::span<std::uint8_t> out) {
  { c.id() } -> std::same_as<coder_id>;
  { c.label() } -> std::convertible_to<std::string>;
  { c.encode(in, sink) } -> std::same_as<void>;
  { c.decode(in, out) } -> std::same_as<void>;
};

/// @brief Stores exponent bytes unchanged. The container uses it for any E-chunk that another
/// coder would not make smaller, so a compressed tensor is never much larger than the raw one.
struct raw_coder {
  static constexpr std::string_view name = "raw";
  [[nodiscard]] coder_id id() const noexcept { return coder_id::raw; }
  [[nodiscard]] std::string label() const { return std::string(name); }
  /// Appends `symbols`. O(n).
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    sink.insert(sink.end(), symbols.begin(), symbols.end());
  }
  /// Copies `encoded` to `out`. @throws wisp::format_error if the sizes differ.
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    if (encoded.size() != out.size()) {
      throw format_error("raw E-chunk holds " + std::to_string(encoded.size()) + " bytes for " +
                         std::to_string(out.size()) + " exponents");
    }
    if (!out.empty()) {
      std::memcpy(out.data(), encoded.data(), out.size());
    }
  }
};
static_assert(exponent_coder<raw_coder>);

/// @brief A coder that can adapt itself to a whole stream before encoding it in chunks
/// (`huffman_coder` fits one code to a tensor). Optional: the container uses it when present.
template <class C>
concept fittable_coder = exponent_coder<C> &&
    requires(const C& c, std::span<const std::uint8_t> s) {
  { c.fitted(s) } -> exponent_coder;
};

/// @brief Any exponent coder behind one copyable value, for choices made at run time (a command
/// line, a file's coder id). Thread safety: const calls may run concurrently if the wrapped
/// coder's may (every wisp coder's can).
class any_coder {
 public:
  /// Wraps a copy of `coder`. @throws std::bad_alloc.
  // The any_coder test comes first: it stops the concept check recursing into us.
  template <class C>
  requires(!std::same_as<std::remove_cvref_t<C>, any_coder> && exponent_coder<C>)
      any_coder(C coder)  // NOLINT(google-explicit-constructor): a coder is-an any_coder
      : self_(std::make_shared<model<C>>(std::move(coder))) {}

  [[nodiscard]] coder_id id() const noexcept { return self_->id(); }
  [[nodiscard]] std::string label() const { return self_->label(); }
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    self_->encode(symbols, sink);
  }
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    self_->decode(encoded, out);
  }
  /// The wrapped coder fitted to `symbols` if it is a `fittable_coder`, else a copy of this.
  [[nodiscard]] any_coder fitted(std::span<const std::uint8_t> symbols) const {
    return self_->fitted(*this, symbols);
  }

 private:
  struct base {
    virtual ~base() = default;
    [[nodiscard]] virtual coder_id id() const noexcept = 0;
    [[nodiscard]] virtual std::string label() const = 0;
    virtual void encode(std::span<const std::uint8_t>, std::vector<std::uint8_t>&) const = 0;
    virtual void decode(std::span<const std::uint8_t>, std::span<std::uint8_t>) const = 0;
    [[nodiscard]] virtual any_coder fitted(const any_coder& self,
                                           std::span<const std::uint8_t>) const = 0;
  };
  template <class C>
  struct model final : base {
    explicit model(C c) : coder(std::move(c)) {}
    [[nodiscard]] coder_id id() const noexcept override { return coder.id(); }
    [[nodiscard]] std::string label() const override { return coder.label(); }
    void encode(std::span<const std::uint8_t> in, std::vector<std::uint8_t>& sink) const override {
      coder.encode(in, sink);
    }
    void decode(std::span<const std::uint8_t> in, std::span<std::uint8_t> out) const override {
      coder.decode(in, out);
    }
    [[nodiscard]] any_coder fitted(const any_coder& self,
                                   std::span<const std::uint8_t> symbols) const override {
      if constexpr (fittable_coder<C>) {
        return any_coder(coder.fitted(symbols));
      } else {
        return self;
      }
    }
    C coder;
  };
  std::shared_ptr<const base> self_;  // immutable, so copies may share it
};
static_assert(exponent_coder<any_coder>);

/// @brief The coders a program has: picks an encoder by label and the decoder of a stored id.
/// Decoding only needs one coder per id (lz4 decodes lz4hc's output).
/// Lookups are O(coders); thread safety: const calls may run concurrently.
class coder_set {
 public:
  coder_set() = default;

  /// Adds `coder`; a coder with the same label is replaced. @returns *this.
  coder_set& add(any_coder coder) {
    for (any_coder& c : coders_) {
      if (c.label() == coder.label()) {
        c = std::move(coder);
        return *this;
      }
    }
    coders_.push_back(std::move(coder));
    return *this;
  }

  /// The coder labelled `label`. @throws wisp::logic_error listing the labels there are.
  [[nodiscard]] const any_coder& by_label(std::string_view label) const {
    for (const any_coder& c : coders_) {
      if (c.label() == label) {
        return c;
      }
    }
    WISP_FAIL(logic_error, "no exponent coder called '", label, "'; available: ", labels());
  }
  /// @deprecated `by_label`.
  [[deprecated("use by_label")]] [[nodiscard]] const any_coder& by_name(
      std::string_view label) const {
    return by_label(label);
  }

  /// A coder that decodes `id`, or nullptr.
  [[nodiscard]] const any_coder* find(coder_id id) const noexcept {
    for (const any_coder& c : coders_) {
      if (c.id() == id) {
        return &c;
      }
    }
    return nullptr;
  }

  /// The coders, in the order they were added.
  [[nodiscard]] std::span<const any_coder> coders() const noexcept { return coders_; }

  /// Comma-separated labels.
  [[nodiscard]] std::string labels() const {
    std::string out;
    for (const any_coder& c : coders_) {
      out += (out.empty() ? "" : ", ") + c.label();
    }
    return out;
  }
  /// @deprecated `labels`.
  [[deprecated("use labels")]] [[nodiscard]] std::string names() const { return labels(); }

 private:
  std::vector<any_coder> coders_;
};

}  // namespace wisp
