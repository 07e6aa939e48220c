// SPDX-License-Identifier: Apache-2.0
// Presets: hand-computed sizes, the shipped JSON files, the embedded table and a recomputation
// from the config fields must all agree.
#include "support/expect_error.hpp"
#include "support/paths.hpp"

#include <wisp/alloc/model_file.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/synthetic.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using wisp::model_preset;

const std::filesystem::path models_dir = wisp::test::source_dir() / "data" / "models";

// Every command that takes a model preset can also route it synthetically: one synthetic preset
// per model preset, same name, same order, same shape.
TEST(ModelSpec, EveryPresetHasASyntheticRouterOfItsShape) {
  const auto names = wisp::synthetic_preset_names();
  ASSERT_EQ(names.size(), wisp::model_presets().size() + 2);  // + default, uniform
  EXPECT_EQ(names.front(), "default");
  EXPECT_EQ(names.back(), "uniform");
  std::size_t i = 1;
  for (const auto& p : wisp::model_presets()) {
    EXPECT_EQ(names[i++], p.config.name);
    const auto c = wisp::synthetic_preset(p.config.name);
    const auto m = p.config.spec();
    EXPECT_EQ((wisp::moe_shape{c.layers, c.experts, c.top_k}), m.shape()) << p.config.name;
  }
}

TEST(ModelSpec, HandComputedPresets) {
  // Qwen3-30B-A3B: 3 x 2048 x 768 x 2 B; 48 layers x 2 x 4 KV heads x 128 x 2 B.
  const auto q = model_preset("qwen3-30b-a3b");
  EXPECT_EQ(q.layers, 48);
  EXPECT_EQ(q.experts, 128);
  EXPECT_EQ(q.top_k, 8);
  EXPECT_EQ(q.expert_bytes.count(), 9437184u);      // 9 MiB
  EXPECT_EQ(q.kv_bytes_per_token.count(), 98304u);  // 96 KiB
  EXPECT_EQ(q.block_tokens, 16u);
  EXPECT_EQ(q.cap_unit_bytes().count(), 48u * 9437184u);
  EXPECT_EQ(q.kv_block_bytes().count(), 16u * 98304u);
  // OLMoE-1B-7B: 3 x 2048 x 1024 x 2; 16 x 2 x 16 x 128 x 2.
  const auto o = model_preset("olmoe-1b-7b");
  EXPECT_EQ(o.expert_bytes.count(), 12582912u);
  EXPECT_EQ(o.kv_bytes_per_token.count(), 131072u);
  EXPECT_EQ(o.layers, 16);
  EXPECT_EQ(o.experts, 64);
  // Mixtral-8x7B: 3 x 4096 x 14336 x 2; 32 x 2 x 8 x 128 x 2.
  const auto x = model_preset("mixtral-8x7b");
  EXPECT_EQ(x.expert_bytes.count(), 352321536u);
  EXPECT_EQ(x.kv_bytes_per_token.count(), 131072u);
  EXPECT_EQ(x.top_k, 2u);
  // DeepSeek-V2-Lite: 3 x 2048 x 1408 x 2; MLA (512 + 64) x 2 B over 27 layers; 26 MoE layers.
  const auto d = model_preset("deepseek-v2-lite");
  EXPECT_EQ(d.expert_bytes.count(), 17301504u);
  EXPECT_EQ(d.kv_bytes_per_token.count(), 31104u);
  EXPECT_EQ(d.layers, 26u);
  EXPECT_EQ(d.top_k, 6u);
  // Qwen1.5-MoE-A2.7B: 3 x 2048 x 1408 x 2; 24 x 2 x 16 x 128 x 2.
  const auto w = model_preset("qwen1.5-moe-a2.7b");
  EXPECT_EQ(w.expert_bytes.count(), 17301504u);
  EXPECT_EQ(w.kv_bytes_per_token.count(), 196608u);
  EXPECT_EQ(w.experts, 60u);
  EXPECT_EQ(w.top_k, 4u);
}

TEST(ModelSpec, JsonFilesEmbeddedTableAndConfigAgree) {
  ASSERT_EQ(wisp::model_presets().size(), 5u);
  for (const auto& entry : wisp::model_presets()) {
    SCOPED_TRACE(std::string(entry.config.name));
    const auto path = models_dir / (std::string(entry.config.name) + ".json");
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const auto file = wisp::read_model_json(path);
    ASSERT_TRUE(file.config.has_value());
    const auto& c = *file.config;
    const auto& e = entry.config;
    EXPECT_EQ(file.spec.name, e.name);
    EXPECT_EQ(file.source, e.source);
    EXPECT_EQ(c.moe_layers, e.moe_layers);
    EXPECT_EQ(c.attention_layers, e.attention_layers);
    EXPECT_EQ(c.experts, e.experts);
    EXPECT_EQ(c.top_k, e.top_k);
    EXPECT_EQ(c.shared_experts, e.shared_experts);
    EXPECT_EQ(c.hidden_size, e.hidden_size);
    EXPECT_EQ(c.moe_intermediate_size, e.moe_intermediate_size);
    EXPECT_EQ(c.expert_matrices, e.expert_matrices);
    EXPECT_EQ(c.attention, e.attention);
    EXPECT_EQ(c.num_key_value_heads, e.num_key_value_heads);
    EXPECT_EQ(c.head_dim, e.head_dim);
    EXPECT_EQ(c.kv_lora_rank, e.kv_lora_rank);
    EXPECT_EQ(c.qk_rope_head_dim, e.qk_rope_head_dim);
    EXPECT_EQ(c.dtype_bytes, e.dtype_bytes);
    EXPECT_EQ(c.block_tokens, e.block_tokens);
    // Derived numbers: as written in the file == embedded == recomputed here from the fields.
    const std::uint64_t expert =
        std::uint64_t{c.expert_matrices} * c.hidden_size * c.moe_intermediate_size * c.dtype_bytes;
    const std::uint64_t per_layer = c.attention == wisp::attention_kind::gqa
                                        ? 2ull * c.num_key_value_heads * c.head_dim
                                        : std::uint64_t{c.kv_lora_rank} + c.qk_rope_head_dim;
    const std::uint64_t kv = std::uint64_t{c.attention_layers} * per_layer * c.dtype_bytes;
    ASSERT_TRUE(file.written_expert_bytes && file.written_kv_bytes_per_token);
    EXPECT_EQ(*file.written_expert_bytes, expert);
    EXPECT_EQ(entry.expert_bytes, expert);
    EXPECT_EQ(*file.written_kv_bytes_per_token, kv);
    EXPECT_EQ(entry.kv_bytes_per_token, kv);
    EXPECT_EQ(file.spec, model_preset(e.name));
  }
}

TEST(ModelSpec, EveryShippedFileIsAPreset) {
  for (const auto& f : std::filesystem::directory_iterator(models_dir)) {
    EXPECT_NE(wisp::find_model_preset(f.path().stem().string()), nullptr) << f.path();
  }
}

TEST(ModelSpec, UnknownPresetListsTheNames) {
  wisp::test::expect_error([] { (void)model_preset("gpt-moe"); }, "gpt-moe", "qwen3-30b-a3b");
}

TEST(ModelSpec, ValidateRejectsBadFields) {
  auto m = model_preset("olmoe-1b-7b");
  m.top_k = 65;
  EXPECT_THROW(m.validate(), wisp::logic_error);
  m = model_preset("olmoe-1b-7b");
  m.layers = 0;
  EXPECT_THROW(m.validate(), wisp::logic_error);
  m = model_preset("olmoe-1b-7b");
  m.block_tokens = 0;
  EXPECT_THROW(m.validate(), wisp::logic_error);
  m = model_preset("olmoe-1b-7b");
  m.expert_bytes = wisp::byte_size{~0ull / 2};
  EXPECT_THROW(m.validate(), wisp::logic_error);  // layers x expert_bytes overflows
}

TEST(ModelFile, DirectFormAndErrors) {
  const auto f = wisp::parse_model_json(
      R"({"name": "tiny", "layers": 2, "experts": 8, "top_k": 2, "expert_bytes": 1000,)"
      R"( "kv_bytes_per_token": 10, "block_tokens": 4})");
  EXPECT_EQ(f.spec.name, "tiny");
  EXPECT_EQ(f.spec.kv_block_bytes().count(), 40u);
  EXPECT_FALSE(f.config.has_value());
  // Non-integer, negative, missing, wrong derived numbers, bad JSON.
  EXPECT_THROW(
      (void)wisp::parse_model_json(
          R"({"layers": 2.5, "experts": 8, "top_k": 2, "expert_bytes": 1, "kv_bytes_per_token": 1})"),
      wisp::format_error);
  EXPECT_THROW(
      (void)wisp::parse_model_json(
          R"({"layers": -2, "experts": 8, "top_k": 2, "expert_bytes": 1, "kv_bytes_per_token": 1})"),
      wisp::format_error);
  EXPECT_THROW((void)wisp::parse_model_json(R"({"layers": 2})"), wisp::format_error);
  EXPECT_THROW((void)wisp::parse_model_json("{"), wisp::format_error);
  EXPECT_THROW(
      (void)wisp::parse_model_json(
          R"({"layers": 2, "experts": 8, "top_k": 9, "expert_bytes": 1, "kv_bytes_per_token": 1})"),
      wisp::logic_error);
  EXPECT_THROW(
      (void)wisp::parse_model_json(
          R"({"name": "x", "config": {"moe_layers": 2, "attention_layers": 2, "experts": 8,)"
          R"( "top_k": 2, "hidden_size": 16, "moe_intermediate_size": 8, "attention": "gqa",)"
          R"( "num_key_value_heads": 2, "head_dim": 4}, "derived": {"expert_bytes": 767}})"),
      wisp::format_error);
  wisp::test::expect_error<wisp::error>(
      [] { (void)wisp::read_model_json("/nonexistent/model.json"); },
      "cannot open /nonexistent/model.json: No such file or directory");
}

// Qwen3-30B-A3B's config with quantised experts: 4-bit weights, one 2-byte scale per 128
// weights. A matrix is 2048 x 768 = 1,572,864 weights: 786,432 B of weights and 12,288 scales
// (24,576 B); three matrices: 2,433,024 B. The KV cache stays bf16 (dtype_bytes 2).
TEST(ModelFile, QuantisedExperts) {
  const std::string config =
      R"({"name": "q4", "config": {"moe_layers": 48, "attention_layers": 48, "experts": 128,)"
      R"( "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,)"
      R"( "attention": "gqa", "num_key_value_heads": 4, "head_dim": 128, "dtype_bytes": 2)";
  const auto q4 = wisp::parse_model_json(
      config + R"(, "weight_bits": 4, "group_size": 128}, "derived": {"expert_bytes": 2433024}})");
  EXPECT_EQ(q4.spec.expert_bytes.count(), 2433024u);
  EXPECT_EQ(q4.spec.kv_bytes_per_token, model_preset("qwen3-30b-a3b").kv_bytes_per_token);
  ASSERT_TRUE(q4.storage.has_value());
  EXPECT_EQ(q4.storage->weight_bits, 4u);
  // Odd sizes round up: 3 bits x 1,572,864 = 589,824 B exactly; 1,572,864 / 100 -> 15,729 blocks.
  const auto q3 = wisp::parse_model_json(
      config + R"(, "weight_bits": 3, "group_size": 100, "scale_bytes": 4}})");
  EXPECT_EQ(q3.spec.expert_bytes.count(), 3u * (589824u + 15729u * 4u));
  // Without block scales, and with the bytes given outright.
  EXPECT_EQ(wisp::parse_model_json(config + R"(, "weight_bits": 8}})").spec.expert_bytes,
            wisp::byte_size{3u * 1572864u});
  EXPECT_EQ(wisp::parse_model_json(config + R"(, "expert_bytes": 2500000}})").spec.expert_bytes,
            wisp::byte_size{2500000});
  // Contradictions and impossible values are refused.
  for (const char* bad : {R"(, "weight_bits": 4, "expert_bytes": 5}})", R"(, "group_size": 128}})",
                          R"(, "weight_bits": 0}})", R"(, "weight_bits": 33}})",
                          R"(, "weight_bits": 4, "group_size": 0}})", R"(, "expert_bytes": 0}})",
                          R"(, "weight_bits": 4}, "derived": {"expert_bytes": 9437184}})"}) {
    EXPECT_THROW((void)wisp::parse_model_json(config + bad), wisp::format_error) << bad;
  }
}

}  // namespace
