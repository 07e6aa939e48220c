// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `wisp::model_spec`: what wisp knows about a model (its `moe_shape`, bytes of one expert,
/// KV bytes per token, KV block size), the published-config fields they are derived from, and
/// the five built-in presets: the one preset table (the synthetic routers of
/// `synthetic_preset` take their shapes from it).
///
/// A split gives experts a per-layer cap `c` (c slots in every MoE layer, `c * layers *
/// expert_bytes` bytes) and the KV cache the rest of the budget in whole blocks of
/// `block_tokens * kv_bytes_per_token` bytes (see split.hpp).
///
/// The presets are embedded here (`model_presets()`) *and* shipped as data/models/<name>.json;
/// tests check that the two agree and that both equal a recomputation from the config fields.
/// @code
/// const wisp::model_spec qwen = wisp::model_preset("qwen3-30b-a3b");
/// // qwen.expert_bytes == 3 x 2048 x 768 x 2 B = 9 MiB; qwen.kv_bytes_per_token == 96 KiB
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>
#include <wisp/core/shape.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief What a split is made of: the sizes of one expert slot and one KV block.
///
/// Value type; `validate()` checks it. Thread-safety: the usual for values.
struct model_spec {
  std::string name;                ///< Preset name or a free label.
  std::int32_t layers = 0;         ///< MoE layers L (dense layers are not counted).
  std::int32_t experts = 0;        ///< Routed experts per layer E (shared experts are fixed costs).
  std::int32_t top_k = 0;          ///< Experts chosen per token and layer k.
  byte_size expert_bytes{};        ///< Bytes of one routed expert, all of its matrices.
  byte_size kv_bytes_per_token{};  ///< KV bytes of one token, summed over all attention layers.
  std::uint32_t block_tokens = 16;  ///< Tokens per KV block.

  /// @brief Throws `wisp::logic_error` naming the first invalid field: every count must be
  /// positive, `top_k <= experts`, and one cap unit (`layers * expert_bytes`) and one KV block
  /// must fit in 64 bits.
  void validate() const {
    WISP_EXPECTS(layers > 0, "model '", name, "' needs layers > 0, got ", layers);
    WISP_EXPECTS(experts > 0, "model '", name, "' needs experts > 0, got ", experts);
    WISP_EXPECTS(top_k > 0 && top_k <= experts, "model '", name, "' needs 0 < top_k <= experts (",
                 experts, "), got ", top_k);
    WISP_EXPECTS(expert_bytes.count() > 0, "model '", name, "' needs expert_bytes > 0");
    WISP_EXPECTS(kv_bytes_per_token.count() > 0, "model '", name, "' needs kv_bytes_per_token > 0");
    WISP_EXPECTS(block_tokens > 0, "model '", name, "' needs block_tokens > 0");
    (void)cap_unit_bytes();  // throws on overflow
    (void)kv_block_bytes();  // throws on overflow
    (void)(cap_unit_bytes() * experts);
  }

  /// @brief Bytes of one unit of the per-layer cap: one slot in every MoE layer,
  /// `layers * expert_bytes`. @throws wisp::logic_error on overflow.
  [[nodiscard]] byte_size cap_unit_bytes() const { return expert_bytes * layers; }
  /// @brief Bytes of one KV block: `block_tokens * kv_bytes_per_token`.
  /// @throws wisp::logic_error on overflow.
  [[nodiscard]] byte_size kv_block_bytes() const { return kv_bytes_per_token * block_tokens; }
  /// @brief Bytes of a per-layer cap of `cap` experts: `cap * layers * expert_bytes`.
  /// @throws wisp::logic_error on overflow.
  [[nodiscard]] byte_size expert_pool_bytes(std::int32_t cap) const {
    WISP_EXPECTS(cap >= 0, "expert cap must be >= 0, got ", cap);
    return cap_unit_bytes() * static_cast<std::uint64_t>(cap);
  }

  /// The routing shape `{layers, experts, top_k}`. O(1).
  [[nodiscard]] constexpr moe_shape shape() const noexcept { return {layers, experts, top_k}; }

  friend bool operator==(const model_spec&, const model_spec&) = default;

  friend std::ostream& operator<<(std::ostream& out, const model_spec& m) {
    return out << m.name << " (" << m.layers << " MoE layers x " << m.experts << " experts, top-"
               << m.top_k << ", " << m.expert_bytes.count() << " B per expert, "
               << m.kv_bytes_per_token.count() << " B KV per token, " << m.block_tokens
               << "-token blocks)";
  }
};

/// @brief How a model's attention stores KV: grouped-query (K and V per KV head) or multi-head
/// latent attention (one compressed latent plus a decoupled RoPE key per token).
enum class attention_kind : std::uint8_t { gqa, mla };
/// "gqa", "mla" (as model files spell them; `to_string`, `from_string`).
template <>
struct enum_names<attention_kind> {
  static constexpr std::array<enum_name<attention_kind>, 2> values{
      {{attention_kind::gqa, "gqa"}, {attention_kind::mla, "mla"}}};
};

/// @brief The published configuration fields a `model_spec` is derived from (names follow the
/// models' Hugging Face config.json). Literal type, so presets are compile-time constants.
struct model_config {
  std::string_view name;
  std::string_view source;             ///< Where the fields come from.
  std::uint32_t moe_layers = 0;        ///< Layers with routed experts.
  std::uint32_t attention_layers = 0;  ///< Layers holding KV (all decoder layers).
  std::uint32_t experts = 0;           ///< n_routed_experts / num_experts / num_local_experts.
  std::uint32_t top_k = 0;             ///< num_experts_per_tok.
  std::uint32_t shared_experts = 0;    ///< Always-resident shared experts (a fixed cost, not in B).
  std::uint32_t hidden_size = 0;
  std::uint32_t moe_intermediate_size = 0;  ///< Intermediate size of one routed expert.
  std::uint32_t expert_matrices = 3;        ///< gate, up, down.
  attention_kind attention = attention_kind::gqa;
  std::uint32_t num_key_value_heads = 0;  ///< GQA only.
  std::uint32_t head_dim = 0;             ///< GQA only.
  std::uint32_t kv_lora_rank = 0;         ///< MLA only: compressed KV latent width.
  std::uint32_t qk_rope_head_dim = 0;     ///< MLA only: decoupled RoPE key width.
  std::uint32_t dtype_bytes = 2;          ///< bf16.
  std::uint32_t block_tokens = 16;

  /// `expert_matrices * hidden_size * moe_intermediate_size * dtype_bytes`.
  [[nodiscard]] constexpr std::uint64_t expert_bytes() const noexcept {
    return std::uint64_t{expert_matrices} * hidden_size * moe_intermediate_size * dtype_bytes;
  }
  /// Cached values per token and attention layer: GQA `2 * kv_heads * head_dim` (K and V), MLA
  /// `kv_lora_rank + qk_rope_head_dim`.
  [[nodiscard]] constexpr std::uint64_t kv_values_per_token_per_layer() const noexcept {
    return attention == attention_kind::gqa ? std::uint64_t{2} * num_key_value_heads * head_dim
                                            : std::uint64_t{kv_lora_rank} + qk_rope_head_dim;
  }
  /// `attention_layers * kv_values_per_token_per_layer() * dtype_bytes`.
  [[nodiscard]] constexpr std::uint64_t kv_bytes_per_token() const noexcept {
    return std::uint64_t{attention_layers} * kv_values_per_token_per_layer() * dtype_bytes;
  }

  /// @brief The spec these fields give. @throws wisp::logic_error if it is invalid.
  [[nodiscard]] model_spec spec() const {
    const auto count = [](std::uint32_t v, const char* field) {
      WISP_EXPECTS(v <= std::uint32_t{std::numeric_limits<std::int32_t>::max()}, field, " = ", v,
                   " exceeds int32");
      return static_cast<std::int32_t>(v);
    };
    model_spec s{
        std::string(name),     count(moe_layers, "moe_layers"), count(experts, "experts"),
        count(top_k, "top_k"), byte_size{expert_bytes()},       byte_size{kv_bytes_per_token()},
        block_tokens};
    s.validate();
    return s;
  }
};

/// @brief A built-in preset: its config fields and the derived numbers as written in
/// data/models/<name>.json (checked against the fields at compile time below).
struct model_preset_entry {
  model_config config;
  std::uint64_t expert_bytes;        ///< As published in the JSON file.
  std::uint64_t kv_bytes_per_token;  ///< As published in the JSON file.
};

namespace detail {
// clang-format off
inline constexpr std::array<model_preset_entry, 5> presets{{
    {{"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B config.json",
      48, 48, 128, 8, 0, 2048, 768, 3, attention_kind::gqa, 4, 128, 0, 0, 2, 16},
     9437184, 98304},
    {{"olmoe-1b-7b", "allenai/OLMoE-1B-7B-0924 config.json",
      16, 16, 64, 8, 0, 2048, 1024, 3, attention_kind::gqa, 16, 128, 0, 0, 2, 16},
     12582912, 131072},
    {{"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1 config.json",
      32, 32, 8, 2, 0, 4096, 14336, 3, attention_kind::gqa, 8, 128, 0, 0, 2, 16},
     352321536, 131072},
    {{"deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite config.json (layer 0 dense)",
      26, 27, 64, 6, 2, 2048, 1408, 3, attention_kind::mla, 0, 0, 512, 64, 2, 16},
     17301504, 31104},
    {{"qwen1.5-moe-a2.7b", "Qwen/Qwen1.5-MoE-A2.7B config.json",
      24, 24, 60, 4, 1, 2048, 1408, 3, attention_kind::gqa, 16, 128, 0, 0, 2, 16},
     17301504, 196608},
}};
// clang-format on

[[nodiscard]] constexpr bool presets_consistent() noexcept {
  for (const auto& p : presets) {
    if (p.config.expert_bytes() != p.expert_bytes ||
        p.config.kv_bytes_per_token() != p.kv_bytes_per_token) {
      return false;
    }
  }
  return true;
}
static_assert(presets_consistent(), "a preset's derived sizes disagree with its config fields");
}  // namespace detail

/// @brief The built-in presets, in a fixed order. O(1).
[[nodiscard]] constexpr std::span<const model_preset_entry> model_presets() noexcept {
  return detail::presets;
}

/// @brief Names accepted by `model_preset`, comma-separated (for messages).
[[nodiscard]] inline std::string model_preset_names() {
  std::string out;
  for (const auto& p : detail::presets) {
    out += out.empty() ? "" : ", ";
    out += p.config.name;
  }
  return out;
}

/// @brief The preset called `name`, or nullptr.
[[nodiscard]] constexpr const model_preset_entry* find_model_preset(
    std::string_view name) noexcept {
  for (const auto& p : detail::presets) {
    if (p.config.name == name) {
      return &p;
    }
  }
  return nullptr;
}

/// @brief The spec of the preset called `name`.
/// @throws wisp::logic_error listing the valid names if `name` is unknown.
[[nodiscard]] inline model_spec model_preset(std::string_view name) {
  const model_preset_entry* p = find_model_preset(name);
  WISP_EXPECTS(p != nullptr, "unknown model '", name, "' (presets: ", model_preset_names(),
               "; or give a model .json file)");
  return p->config.spec();
}

}  // namespace wisp
