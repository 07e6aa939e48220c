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
#pragma once

#include <wisp/alloc/model_spec.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/detail/json.hpp>

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

namespace wisp::alloc {

/// @brief What a model file holds: the spec, and for the config form the fields and the derived
/// sizes as written.
struct model_file {
  model_spec spec;
  std::string source;  ///< "source" member, empty when absent.
  /// Config fields (config form only; `name` and `source` views are left empty: see the members
  /// above). `std::nullopt` for the direct form.
  std::optional<model_config> config;
  std::optional<std::uint64_t> written_expert_bytes;        ///< "derived" as written, if present.
  std::optional<std::uint64_t> written_kv_bytes_per_token;  ///< "derived" as written, if present.
};

namespace detail {

using trace::detail::json_value;

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

[[nodiscard]] inline const json_value& json_member(const json_value& object, std::string_view key) {
  const json_value* v = object.find(key);
  if (v == nullptr) {
    throw format_error("model file: missing \"" + std::string(key) + "\"");
  }
  return *v;
}

[[nodiscard]] inline std::uint32_t json_u32(const json_value& object, std::string_view key) {
  return static_cast<std::uint32_t>(
      json_unsigned(json_member(object, key), key, std::numeric_limits<std::uint32_t>::max()));
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

}  // namespace detail

/// @brief Parses a model description (either form, see the file comment).
/// @param fallback_name used when the document has no "name".
/// @throws wisp::format_error on malformed JSON, a missing or non-integer field, or derived sizes
/// that disagree with the config fields; wisp::logic_error if the resulting spec is invalid.
[[nodiscard]] inline model_file parse_model_json(std::string_view text,
                                                 std::string_view fallback_name = "model") {
  using detail::json_u32;
  using detail::json_u32_or;
  const auto doc = trace::detail::json_parser(text, 0).parse_document();
  if (doc.type != trace::detail::json_value::kind::object) {
    throw format_error("model file: the document must be a JSON object");
  }
  model_file out;
  out.spec.name = detail::json_string_or(doc, "name", std::string(fallback_name));
  out.source = detail::json_string_or(doc, "source", "");
  const std::uint32_t block_tokens = json_u32_or(doc, "block_tokens", 16);
  if (const auto* cfg = doc.find("config"); cfg != nullptr) {
    if (cfg->type != trace::detail::json_value::kind::object) {
      throw format_error("model file: \"config\" must be an object");
    }
    model_config c;
    c.moe_layers = json_u32(*cfg, "moe_layers");
    c.attention_layers = json_u32(*cfg, "attention_layers");
    c.experts = json_u32(*cfg, "experts");
    c.top_k = json_u32(*cfg, "top_k");
    c.shared_experts = json_u32_or(*cfg, "shared_experts", 0);
    c.hidden_size = json_u32(*cfg, "hidden_size");
    c.moe_intermediate_size = json_u32(*cfg, "moe_intermediate_size");
    c.expert_matrices = json_u32_or(*cfg, "expert_matrices", 3);
    c.dtype_bytes = json_u32_or(*cfg, "dtype_bytes", 2);
    c.block_tokens = block_tokens;
    const std::string kind = detail::json_string_or(*cfg, "attention", "gqa");
    if (kind == "gqa") {
      c.attention = attention_kind::gqa;
      c.num_key_value_heads = json_u32(*cfg, "num_key_value_heads");
      c.head_dim = json_u32(*cfg, "head_dim");
    } else if (kind == "mla") {
      c.attention = attention_kind::mla;
      c.kv_lora_rank = json_u32(*cfg, "kv_lora_rank");
      c.qk_rope_head_dim = json_u32(*cfg, "qk_rope_head_dim");
    } else {
      throw format_error("model file: \"attention\" must be \"gqa\" or \"mla\", got \"" + kind +
                         "\"");
    }
    // Products of 32-bit fields: at most four factors below 2^32 could overflow 64 bits.
    byte_size expert = byte_size{c.expert_matrices} * c.hidden_size * c.moe_intermediate_size;
    expert = expert * c.dtype_bytes;
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
    if (const auto* derived = doc.find("derived"); derived != nullptr) {
      if (const auto* e = derived->find("expert_bytes"); e != nullptr) {
        out.written_expert_bytes =
            detail::json_unsigned(*e, "expert_bytes", std::numeric_limits<std::uint64_t>::max());
        if (*out.written_expert_bytes != expert.count()) {
          throw format_error("model file '" + out.spec.name + "': derived expert_bytes " +
                             std::to_string(*out.written_expert_bytes) +
                             " disagrees with the config fields (" +
                             std::to_string(expert.count()) + ")");
        }
      }
      if (const auto* t = derived->find("kv_bytes_per_token"); t != nullptr) {
        out.written_kv_bytes_per_token = detail::json_unsigned(
            *t, "kv_bytes_per_token", std::numeric_limits<std::uint64_t>::max());
        if (*out.written_kv_bytes_per_token != kv.count()) {
          throw format_error("model file '" + out.spec.name + "': derived kv_bytes_per_token " +
                             std::to_string(*out.written_kv_bytes_per_token) +
                             " disagrees with the config fields (" + std::to_string(kv.count()) +
                             ")");
        }
      }
    }
    out.config = c;
  } else {
    out.spec.layers = json_u32(doc, "layers");
    out.spec.experts = json_u32(doc, "experts");
    out.spec.top_k = json_u32(doc, "top_k");
    out.spec.expert_bytes =
        byte_size{detail::json_unsigned(detail::json_member(doc, "expert_bytes"), "expert_bytes",
                                        std::numeric_limits<std::uint64_t>::max())};
    out.spec.kv_bytes_per_token = byte_size{
        detail::json_unsigned(detail::json_member(doc, "kv_bytes_per_token"), "kv_bytes_per_token",
                              std::numeric_limits<std::uint64_t>::max())};
    out.spec.block_tokens = block_tokens;
  }
  out.spec.validate();
  return out;
}

/// @brief Reads and parses a model file. The file's stem is the fallback name.
/// @throws wisp::format_error if the file cannot be read or is malformed (the path is named).
[[nodiscard]] inline model_file read_model_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw format_error("cannot open model file '" + path.string() + "'");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  try {
    return parse_model_json(buffer.str(), path.stem().string());
  } catch (const format_error& e) {
    throw e.in_file(path.string());
  }
}

}  // namespace wisp::alloc
