// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Reading a model description from JSON (data/models/<name>.json or a user's file) into a
/// `model_spec`, with exact integer arithmetic and no third-party JSON library.
///
/// Two forms are accepted. The *config* form lists the published fields and, optionally, the
/// derived sizes; derived sizes that disagree with the fields are an error:
/// @code{.json}
/// {"name": "qwen3-30b-a3b", "source": "Qwen/Qwen3-30B-A3B config.json", "block_tokens": 16,
///  "config": {"moe_layers": 48, "attention_layers": 48, "experts": 128, "top_k": 8,
///             "shared_experts": 0, "hidden_size": 2048, "moe_intermediate_size": 768,
///             "expert_matrices": 3, "attention": "gqa", "num_key_value_heads": 4,
///             "head_dim": 128, "dtype_bytes": 2},
///  "derived": {"expert_bytes": 9437184, "kv_bytes_per_token": 98304}}
/// @endcode
/// The *direct* form gives the spec itself: `{"name": "...", "layers": L, "experts": E, "top_k": k,
/// "expert_bytes": B, "kv_bytes_per_token": T, "block_tokens": 16}` (block_tokens optional).
///
/// **Quantised experts** (config form): the experts are stored in `dtype_bytes` per weight unless
/// the config says otherwise, with either
/// - `"expert_bytes": B`, one expert's bytes as stored, for any layout (GGUF k-quants, ...), or
/// - `"weight_bits": b` (bits per weight, 1..32), optionally with `"group_size": g` (weights per
///   block scale) and `"scale_bytes": s` (bytes of each block's scale and zero point, default 2):
///   each of the `expert_matrices` matrices of `hidden_size x moe_intermediate_size` weights
///   takes `ceil(weights * b / 8) + ceil(weights / g) * s` bytes.
/// `dtype_bytes` still sizes the KV cache. See docs/formats.md#model-files for the whole schema.
#pragma once

#include <wisp/alloc/model_spec.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/detail/files.hpp>
#include <wisp/core/detail/json.hpp>
#include <wisp/core/error.hpp>

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace wisp {

/// @brief How a model file says its experts are stored, when not in `dtype_bytes` per weight.
struct expert_storage {
  std::uint64_t expert_bytes = 0;  ///< "expert_bytes": one expert as stored; 0 = from the bits
  std::uint32_t weight_bits = 0;   ///< "weight_bits": bits per weight
  std::uint32_t group_size = 0;    ///< "group_size": weights per block scale; 0 = no scales
  std::uint32_t scale_bytes = 2;   ///< "scale_bytes": bytes of each block's scale (+ zero point)

  /// @brief Bytes of one expert of `matrices` matrices of `weights` weights each.
  /// @throws wisp::logic_error on overflow.
  [[nodiscard]] byte_size bytes(std::uint32_t matrices, std::uint64_t weights) const {
    if (expert_bytes != 0) {
      return byte_size{expert_bytes};
    }
    const byte_size bits = byte_size{weights} * weight_bits;
    const byte_size packed{bits.count() / 8 + (bits.count() % 8 != 0 ? 1 : 0)};
    const std::uint64_t blocks =
        group_size == 0 ? 0 : weights / group_size + (weights % group_size != 0 ? 1 : 0);
    return (packed + byte_size{blocks} * scale_bytes) * matrices;
  }
  friend bool operator==(const expert_storage&, const expert_storage&) = default;
};

/// @brief What a model file holds: the spec, and for the config form the fields and the derived
/// sizes as written.
struct model_file {
  model_spec spec;
  std::string source;  ///< "source" member, empty when absent.
  /// Config fields (config form only; `name` and `source` views are left empty: see the members
  /// above). `std::nullopt` for the direct form.
  std::optional<model_config> config;
  /// Quantised experts (config form): how they are stored; `std::nullopt` = `dtype_bytes` each.
  std::optional<expert_storage> storage;
  std::optional<std::uint64_t> written_expert_bytes;        ///< "derived" as written, if present.
  std::optional<std::uint64_t> written_kv_bytes_per_token;  ///< "derived" as written, if present.
};

namespace detail {

[[nodiscard]] inline std::uint64_t json_unsigned(const json_value& v, std::string_view key,
                                                 std::uint64_t max) {
  if (v.type != json_value::kind::number) {
    throw format_error("model file: \"" + std::string(key) + "\" must be a number");
  }
  std::uint64_t out = 0;
  const char* first = v.text.data();
  const char* last = first + v.text.size();
  const auto [ptr, ec] = std::from_chars(first, last, out);
  if (ec != std::errc{} || ptr != last) {
    throw format_error("model file: \"" + std::string(key) +
                       "\" must be a non-negative integer, got " + v.text);
  }
  if (out > max) {
    throw format_error("model file: \"" + std::string(key) + "\" = " + v.text +
                       " is too large (at most " + std::to_string(max) + ")");
  }
  return out;
}

[[nodiscard]] inline const json_value& json_required_member(const json_value& object,
                                                            std::string_view key) {
  const json_value* v = object.find(key);
  if (v == nullptr) {
    throw format_error("model file: missing \"" + std::string(key) + "\"");
  }
  return *v;
}

[[nodiscard]] inline std::uint32_t json_u32(const json_value& object, std::string_view key) {
  return static_cast<std::uint32_t>(json_unsigned(json_required_member(object, key), key,
                                                  std::numeric_limits<std::uint32_t>::max()));
}

[[nodiscard]] inline std::uint32_t json_u32_or(const json_value& object, std::string_view key,
                                               std::uint32_t fallback) {
  return object.find(key) == nullptr ? fallback : json_u32(object, key);
}

[[nodiscard]] inline std::string json_string_or(const json_value& object, std::string_view key,
                                                std::string fallback) {
  const json_value* v = object.find(key);
  if (v == nullptr) {
    return fallback;
  }
  if (v->type != json_value::kind::string) {
    throw format_error("model file: \"" + std::string(key) + "\" must be a string");
  }
  return v->text;
}

/// The "config" fields of a model file, but for the expert storage.
[[nodiscard]] inline model_config parse_model_config(const json_value& cfg,
                                                     std::uint32_t block_tokens) {
  model_config c;
  c.moe_layers = json_u32(cfg, "moe_layers");
  c.attention_layers = json_u32(cfg, "attention_layers");
  c.experts = json_u32(cfg, "experts");
  c.top_k = json_u32(cfg, "top_k");
  c.shared_experts = json_u32_or(cfg, "shared_experts", 0);
  c.hidden_size = json_u32(cfg, "hidden_size");
  c.moe_intermediate_size = json_u32(cfg, "moe_intermediate_size");
  c.expert_matrices = json_u32_or(cfg, "expert_matrices", 3);
  c.dtype_bytes = json_u32_or(cfg, "dtype_bytes", 2);
  c.block_tokens = block_tokens;
  const std::string kind = json_string_or(cfg, "attention", "gqa");
  if (kind == "gqa") {
    c.attention = attention_kind::gqa;
    c.num_key_value_heads = json_u32(cfg, "num_key_value_heads");
    c.head_dim = json_u32(cfg, "head_dim");
  } else if (kind == "mla") {
    c.attention = attention_kind::mla;
    c.kv_lora_rank = json_u32(cfg, "kv_lora_rank");
    c.qk_rope_head_dim = json_u32(cfg, "qk_rope_head_dim");
  } else {
    throw format_error("model file: \"attention\" must be \"gqa\" or \"mla\", got \"" + kind +
                       "\"");
  }
  return c;
}

/// The expert storage "config" gives ("expert_bytes", or "weight_bits" with its "group_size"
/// and "scale_bytes"), or none for dense weights of dtype_bytes.
[[nodiscard]] inline std::optional<expert_storage> parse_expert_storage(const json_value& cfg) {
  const json_value* given_bytes = cfg.find("expert_bytes");
  const json_value* bits = cfg.find("weight_bits");
  if (given_bytes != nullptr && bits != nullptr) {
    throw format_error(
        "model file: give \"expert_bytes\" or \"weight_bits\" in \"config\", "
        "not both");
  }
  if (bits == nullptr &&
      (cfg.find("group_size") != nullptr || cfg.find("scale_bytes") != nullptr)) {
    throw format_error(
        "model file: \"group_size\" and \"scale_bytes\" describe quantised "
        "weights and need \"weight_bits\"");
  }
  if (given_bytes == nullptr && bits == nullptr) {
    return std::nullopt;
  }
  expert_storage q;
  if (given_bytes != nullptr) {
    q.expert_bytes =
        json_unsigned(*given_bytes, "expert_bytes", std::numeric_limits<std::uint64_t>::max());
    if (q.expert_bytes == 0) {
      throw format_error("model file: \"expert_bytes\" must be positive");
    }
    return q;
  }
  q.weight_bits = json_u32(cfg, "weight_bits");
  if (q.weight_bits == 0 || q.weight_bits > 32) {
    throw format_error("model file: \"weight_bits\" must be in [1, 32], got " +
                       std::to_string(q.weight_bits));
  }
  q.group_size = json_u32_or(cfg, "group_size", 0);
  q.scale_bytes = json_u32_or(cfg, "scale_bytes", 2);
  if (cfg.find("group_size") != nullptr && q.group_size == 0) {
    throw format_error(
        "model file: \"group_size\" must be positive (omit it for no "
        "block scales)");
  }
  return q;
}

/// Checks the sizes the document's "derived" object gives, if any, against those derived from
/// the config fields, and keeps them in `out`.
inline void check_derived_sizes(const json_value& doc, model_file& out) {
  const auto* derived = doc.find("derived");
  if (derived == nullptr) {
    return;
  }
  const byte_size expert = out.spec.expert_bytes;
  const byte_size kv = out.spec.kv_bytes_per_token;
  if (const auto* e = derived->find("expert_bytes"); e != nullptr) {
    out.written_expert_bytes =
        json_unsigned(*e, "expert_bytes", std::numeric_limits<std::uint64_t>::max());
    if (*out.written_expert_bytes != expert.count()) {
      throw format_error("model file '" + out.spec.name + "': derived expert_bytes " +
                         std::to_string(*out.written_expert_bytes) +
                         " disagrees with the config fields (" + std::to_string(expert.count()) +
                         ")");
    }
  }
  if (const auto* t = derived->find("kv_bytes_per_token"); t != nullptr) {
    out.written_kv_bytes_per_token =
        json_unsigned(*t, "kv_bytes_per_token", std::numeric_limits<std::uint64_t>::max());
    if (*out.written_kv_bytes_per_token != kv.count()) {
      throw format_error("model file '" + out.spec.name + "': derived kv_bytes_per_token " +
                         std::to_string(*out.written_kv_bytes_per_token) +
                         " disagrees with the config fields (" + std::to_string(kv.count()) + ")");
    }
  }
}

/// The spec of a document with a "config" object `cfg`: the sizes derived from its fields.
inline void parse_config_form(const json_value& doc, const json_value& cfg,
                              std::uint32_t block_tokens, model_file& out) {
  if (cfg.type != json_value::kind::object) {
    throw format_error("model file: \"config\" must be an object");
  }
  const model_config c = parse_model_config(cfg, block_tokens);
  // Products of 32-bit fields: at most four factors below 2^32 could overflow 64 bits.
  byte_size expert = byte_size{c.expert_matrices} * c.hidden_size * c.moe_intermediate_size;
  expert = expert * c.dtype_bytes;
  if (const std::optional<expert_storage> q = parse_expert_storage(cfg)) {
    expert =
        q->bytes(c.expert_matrices, (byte_size{c.hidden_size} * c.moe_intermediate_size).count());
    out.storage = q;
  }
  const byte_size kv_values{c.attention == attention_kind::gqa
                                ? (byte_size{2} * c.num_key_value_heads * c.head_dim).count()
                                : std::uint64_t{c.kv_lora_rank} + c.qk_rope_head_dim};
  const byte_size kv = kv_values * c.attention_layers * c.dtype_bytes;
  out.spec.layers = c.moe_layers;
  out.spec.experts = c.experts;
  out.spec.top_k = c.top_k;
  out.spec.expert_bytes = expert;
  out.spec.kv_bytes_per_token = kv;
  out.spec.block_tokens = block_tokens;
  check_derived_sizes(doc, out);
  out.config = c;
}

/// The spec of a document without "config": the sizes as written.
inline void parse_sizes_form(const json_value& doc, std::uint32_t block_tokens, model_file& out) {
  out.spec.layers = json_u32(doc, "layers");
  out.spec.experts = json_u32(doc, "experts");
  out.spec.top_k = json_u32(doc, "top_k");
  out.spec.expert_bytes =
      byte_size{json_unsigned(json_required_member(doc, "expert_bytes"), "expert_bytes",
                              std::numeric_limits<std::uint64_t>::max())};
  out.spec.kv_bytes_per_token =
      byte_size{json_unsigned(json_required_member(doc, "kv_bytes_per_token"), "kv_bytes_per_token",
                              std::numeric_limits<std::uint64_t>::max())};
  out.spec.block_tokens = block_tokens;
}

}  // namespace detail

/// @brief Parses a model description (either form, see the file comment).
/// @param fallback_name used when the document has no "name".
/// @throws wisp::format_error on malformed JSON, a missing or non-integer field, or derived sizes
/// that disagree with the config fields; wisp::logic_error if the resulting spec is invalid.
[[nodiscard]] inline model_file parse_model_json(std::string_view text,
                                                 std::string_view fallback_name = "model") {
  const auto doc = wisp::detail::json_parser(text, 0).parse_document();
  if (doc.type != wisp::detail::json_value::kind::object) {
    throw format_error("model file: the document must be a JSON object");
  }
  model_file out;
  out.spec.name = detail::json_string_or(doc, "name", std::string(fallback_name));
  out.source = detail::json_string_or(doc, "source", "");
  const std::uint32_t block_tokens = detail::json_u32_or(doc, "block_tokens", 16);
  if (const auto* cfg = doc.find("config"); cfg != nullptr) {
    detail::parse_config_form(doc, *cfg, block_tokens, out);
  } else {
    detail::parse_sizes_form(doc, block_tokens, out);
  }
  out.spec.validate();
  return out;
}

/// @brief Reads and parses a model file. The file's stem is the fallback name.
/// @throws wisp::error if the file cannot be opened (naming the operating system's reason);
/// wisp::format_error if it is malformed (the path is named).
[[nodiscard]] inline model_file read_model_json(const std::filesystem::path& path) {
  std::ifstream in = wisp::detail::open_for_reading(path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  try {
    return parse_model_json(buffer.str(), path.stem().string());
  } catch (const format_error& e) {
    throw e.in_file(path.string());
  }
}

}  // namespace wisp
