// SPDX-License-Identifier: Apache-2.0
// The models of the GPU decode benchmark (wisp_cuda_gpu_bench): their shapes, their routing, the
// token window every arm replays, the random bytes of their experts, and the plan of what fits in
// host and device memory. Host-safe: tests/cuda checks every rule here on the CPU.
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/model.hpp>
#include <wisp/core/shape.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/swiglu.hpp>
#include <wisp/trace/esft.hpp>
#include <wisp/trace/jsonl.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wisp::bench {

/// A model's MoE part as the benchmark runs it: the routing shape, the SwiGLU expert shape (bf16
/// rows of gate, up and down), and where its routing comes from.
struct decode_model {
  std::string name;
  moe_shape shape;
  swiglu_shape expert;
  std::string routing;  // "esft", "gptoss", or "synthetic:<preset>"

  [[nodiscard]] std::size_t expert_bytes() const noexcept { return expert.row_bytes(); }
  [[nodiscard]] std::uint64_t layer_bytes() const noexcept {
    return static_cast<std::uint64_t>(shape.experts) * expert_bytes();
  }
  [[nodiscard]] std::uint64_t model_bytes() const noexcept {
    return static_cast<std::uint64_t>(shape.layers) * layer_bytes();
  }
};

/// The models: "deepseek-v2-lite" (26 x 64, top-6, H 2048, I 1408: 16.5 MiB per expert, 27.5 GiB,
/// routed by the ESFT trace) and "qwen3-30b-a3b" (48 x 128, top-8, H 2048, I 768: 9 MiB per
/// expert, 54 GiB, routed by the synthetic router's preset of that name), both from the preset
/// table of `wisp::model_presets()`; "gpt-oss-20b" (24 x 32, top-4, H 2880, I 2880: its MXFP4
/// experts stored as bf16, 47.5 MiB each, 35.6 GiB, routed by the shared gpt-oss-20b decode
/// trace); "tiny" (4 x 16, top-2, H 256, I 128), the GPU test's.
/// @throws wisp::logic_error naming the valid names.
[[nodiscard]] inline decode_model decode_model_named(std::string_view name) {
  if (name == "tiny") {
    return {"tiny", {4, 16, 2}, {256, 128}, "synthetic:tiny"};
  }
  if (name == "gpt-oss-20b") {  // openai/gpt-oss-20b's config.json; its MXFP4 experts as bf16
    return {"gpt-oss-20b", {24, 32, 4}, {2880, 2880}, "gptoss"};
  }
  const model_preset_entry* p = find_model_preset(name);
  WISP_EXPECTS(p != nullptr && (name == "deepseek-v2-lite" || name == "qwen3-30b-a3b"),
               "unknown decode model '", name,
               "' (models: deepseek-v2-lite, qwen3-30b-a3b, gpt-oss-20b, tiny)");
  const model_config& c = p->config;
  return {std::string(name),
          {static_cast<std::int32_t>(c.moe_layers), static_cast<std::int32_t>(c.experts),
           static_cast<std::int32_t>(c.top_k)},
          {static_cast<std::int32_t>(c.hidden_size),
           static_cast<std::int32_t>(c.moe_intermediate_size)},
          name == "deepseek-v2-lite" ? "esft" : "synthetic:" + std::string(name)};
}

/// @brief The tokens of the routing every arm replays, in order: `history` tokens replayed on
/// the host only (they fill the caches, give static-hot its counts and choose wisp's policy), of
/// which the last `warmup` also run on the device, untimed; then `timed` tokens, timed; then
/// `verify` tokens whose outputs are compared with the reference's.
struct decode_window {
  std::int32_t history = 4096;
  std::int32_t warmup = 4;
  std::int32_t timed = 64;  // 16 tokens proved too few to rank the policies (bench/results)
  std::int32_t verify = 2;

  /// @throws wisp::logic_error naming the bad count.
  void validate() const {
    WISP_EXPECTS(warmup >= 0 && history >= warmup, "decode window: warm-up ", warmup,
                 " must be in [0, history = ", history, "]");
    WISP_EXPECTS(timed >= 1 && verify >= 1, "decode window: timed ", timed, " and verify ", verify,
                 " tokens must both be >= 1");
  }
  /// Tokens of routing the window needs.
  [[nodiscard]] std::int32_t tokens() const noexcept { return history + timed + verify; }
  /// The first token that runs on the device.
  [[nodiscard]] std::int32_t first_device_token() const noexcept { return history - warmup; }
  [[nodiscard]] std::int32_t first_timed() const noexcept { return history; }
  [[nodiscard]] std::int32_t first_verified() const noexcept { return history + timed; }
};

/// One token per step, every layer: ids and gate weights `[tokens x layers x top_k]`.
struct decode_routing {
  moe_shape shape;
  std::int32_t tokens = 0;
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  std::string source;  // what routes it, for the report
  /// `[tokens]`: each token's position in its sequence (the positions position-aware policies
  /// read); empty: every token at position 0.
  std::vector<std::uint32_t> positions;

  /// Token `token`'s position in its sequence.
  [[nodiscard]] std::uint32_t position_of(std::int32_t token) const noexcept {
    return positions.empty() ? 0u : positions[static_cast<std::size_t>(token)];
  }

  [[nodiscard]] std::size_t offset(std::int32_t token, std::int32_t layer) const noexcept {
    return (static_cast<std::size_t>(token) * static_cast<std::size_t>(shape.layers) +
            static_cast<std::size_t>(layer)) *
           static_cast<std::size_t>(shape.top_k);
  }
  /// The top-k ids of `token` at `layer`.
  [[nodiscard]] std::span<const std::int32_t> ids_of(std::int32_t token, std::int32_t layer) const {
    return {ids.data() + offset(token, layer), static_cast<std::size_t>(shape.top_k)};
  }
  [[nodiscard]] std::size_t per_token() const noexcept {
    return static_cast<std::size_t>(shape.layers) * static_cast<std::size_t>(shape.top_k);
  }
};

/// The gate weight of position `j` of `k` when a trace records none: `2 (k - j) / (k (k + 1))`,
/// decreasing, summing to 1 (so a kernel that swapped two positions would give another output).
[[nodiscard]] inline float default_gate_weight(std::int32_t j, std::int32_t k) noexcept {
  return static_cast<float>(2.0 * (k - j) / (static_cast<double>(k) * (k + 1)));
}

/// @brief The first `tokens` steps of `t` as a `decode_routing` (its gate weights, or
/// `default_gate_weight` when it has none).
/// @throws wisp::logic_error if the trace is shorter or has missing rows.
[[nodiscard]] inline decode_routing routing_from_trace(const routing_trace& t, std::int32_t tokens,
                                                       std::string source) {
  WISP_EXPECTS(tokens >= 0 && static_cast<std::size_t>(tokens) <= t.steps(), "routing: ", tokens,
               " tokens asked of a trace of ", t.steps(), " steps (", source, ")");
  decode_routing r{t.shape(), tokens, {}, {}, std::move(source), {}};
  const std::size_t n = static_cast<std::size_t>(tokens) * r.per_token();
  r.ids.reserve(n);
  r.weights.reserve(n);
  for (std::int32_t s = 0; s < tokens; ++s) {
    for (std::int32_t l = 0; l < r.shape.layers; ++l) {
      WISP_EXPECTS(t.has_layer(static_cast<std::size_t>(s), l), "routing: step ", s, " layer ", l,
                   " is missing from the trace (", r.source, ")");
      for (std::int32_t j = 0; j < r.shape.top_k; ++j) {
        r.ids.push_back(t.expert(static_cast<std::size_t>(s), l, j));
        r.weights.push_back(t.has_weights() ? t.weight(static_cast<std::size_t>(s), l, j)
                                            : default_gate_weight(j, r.shape.top_k));
      }
    }
  }
  const std::span<const std::size_t> starts = t.sequence_starts();
  r.positions.reserve(static_cast<std::size_t>(tokens));
  std::size_t next = 0;  // the first start after the current token's sequence's
  std::size_t start = 0;
  for (std::size_t s = 0; s < static_cast<std::size_t>(tokens); ++s) {
    while (next < starts.size() && starts[next] <= s) {
      start = starts[next++];
    }
    r.positions.push_back(static_cast<std::uint32_t>(s - start));
  }
  return r;
}

/// The seed of every synthetic routing the benchmark draws.
inline constexpr std::uint64_t decode_routing_seed = 1;

/// @brief The routing of `model` for `tokens` tokens. "esft": the ESFT trace under `traces_dir`
/// (`raw/esft_deepseek_v2_lite_intent`, replayed in its canonical order); when that folder is
/// absent, the synthetic "deepseek-v2-lite" preset (calibrated against ESFT) with a source that
/// says so. "gptoss": the gpt-oss-20b decode trace (`raw/gptoss20b_mmlu_pro_decode/routing.jsonl`,
/// requests in file order); when absent, the synthetic router at its shape, and the source says
/// so. "synthetic:<preset>": `make_synthetic_trace` of the preset ("tiny": the synthetic
/// router's default dynamics at the tiny shape), seed `decode_routing_seed`.
/// @throws wisp::logic_error if the model's shape and the trace's differ or the trace is short;
///   wisp::format_error if the ESFT files are malformed.
[[nodiscard]] inline decode_routing load_decode_routing(const decode_model& model,
                                                        const std::filesystem::path& traces_dir,
                                                        std::int32_t tokens) {
  const auto synthetic = [&](const synthetic_config& c, const std::string& label) {
    return routing_from_trace(
        make_synthetic_trace(c, static_cast<std::size_t>(tokens), decode_routing_seed), tokens,
        label);
  };
  decode_routing r;
  if (model.routing == "esft") {
    const std::filesystem::path dir = traces_dir / "raw" / "esft_deepseek_v2_lite_intent";
    if (std::filesystem::is_directory(dir)) {
      r = routing_from_trace(import_esft(dir).trace, tokens,
                             "ESFT intent trace (" + dir.string() + "), canonical order");
    } else {
      r = synthetic(synthetic_preset("deepseek-v2-lite"),
                    "ESFT ABSENT at " + dir.string() +
                        ": synthetic router, preset deepseek-v2-lite (calibrated against ESFT), "
                        "seed 1");
    }
  } else if (model.routing == "gptoss") {
    const std::filesystem::path file =
        traces_dir / "raw" / "gptoss20b_mmlu_pro_decode" / "routing.jsonl";
    if (std::filesystem::is_regular_file(file)) {
      jsonl_config c;
      c.group_key = "request";
      r = routing_from_trace(import_jsonl(file, c).trace, tokens,
                             "gpt-oss-20b decode trace (" + file.string() + "), file order");
    } else {
      r = synthetic(synthetic_for_shape(model.shape),
                    "gpt-oss-20b trace ABSENT at " + file.string() +
                        ": synthetic router at its shape, seed 1");
    }
  } else {
    WISP_EXPECTS(model.routing.starts_with("synthetic:"), "decode model '", model.name,
                 "': unknown routing '", model.routing, "'");
    const std::string preset = model.routing.substr(std::string_view("synthetic:").size());
    const synthetic_config c =
        preset == "tiny" ? synthetic_for_shape(model.shape) : synthetic_preset(preset);
    r = synthetic(c, "synthetic router, preset " + preset + ", seed 1" +
                         (preset == "qwen3-30b-a3b"
                              ? " (the ESFT-calibrated dynamics at Qwen3-30B-A3B's shape; no "
                                "real Qwen3 trace exists here)"
                              : ""));
  }
  WISP_EXPECTS(r.shape == model.shape, "routing of '", model.name, "' has ", r.shape.layers, " x ",
               r.shape.experts, " top-", r.shape.top_k, " but the model is ", model.shape.layers,
               " x ", model.shape.experts, " top-", model.shape.top_k);
  return r;
}

/// The routing of the first `layers` layers of `r` (a run shrunk to the layers that fit).
/// @throws wisp::logic_error unless `layers` is in `[1, r.shape.layers]`.
[[nodiscard]] inline decode_routing first_layers(const decode_routing& r, std::int32_t layers) {
  WISP_EXPECTS(layers >= 1 && layers <= r.shape.layers, "first_layers: ", layers,
               " layers of a routing of ", r.shape.layers);
  decode_routing out{
      {layers, r.shape.experts, r.shape.top_k}, r.tokens, {}, {}, r.source, r.positions};
  const auto k = static_cast<std::ptrdiff_t>(r.shape.top_k);
  for (std::int32_t t = 0; t < r.tokens; ++t) {
    const auto from = static_cast<std::ptrdiff_t>(r.offset(t, 0));
    out.ids.insert(out.ids.end(), r.ids.begin() + from, r.ids.begin() + from + layers * k);
    out.weights.insert(out.weights.end(), r.weights.begin() + from,
                       r.weights.begin() + from + layers * k);
  }
  return out;
}

/// @brief Slots per layer for a budget of `fraction` of each layer's experts: `round(fraction x
/// experts)`, at least `top_k` (one token's call must fit) and at most `experts`.
/// @throws wisp::logic_error unless `fraction` is in (0, 1].
[[nodiscard]] inline std::int32_t budget_capacity(const moe_shape& shape, double fraction) {
  WISP_EXPECTS(fraction > 0 && fraction <= 1, "budget fraction ", fraction, " must be in (0, 1]");
  const auto c = static_cast<std::int32_t>(std::lround(fraction * shape.experts));
  return std::clamp(c, shape.top_k, shape.experts);
}

// ---- the experts' bytes ------------------------------------------------------------------------

namespace detail {
WISP_HOST_DEVICE constexpr std::uint64_t mix64(
    std::uint64_t z) noexcept {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// A value uniform in [-scale, scale) from 24 bits of a hash of (stream, index), rounded to bf16.
// Integer arithmetic and two explicitly rounded float operations: the same bits on host and GPU.
WISP_HOST_DEVICE inline bf16 hashed_bf16(std::uint64_t stream, std::uint64_t index,
                                         float scale) noexcept {
  const std::uint64_t h = mix64(stream * 0x9e3779b97f4a7c15ull + index);
  const float unit = static_cast<float>(static_cast<std::int32_t>(h >> 40) - (1 << 23)) *
                     (1.0f / static_cast<float>(1 << 23));  // exact: [-1, 1)
  return to_bf16(wisp::detail::mul_rn(unit, scale));
}
}  // namespace detail

/// Value `index` of expert `expert`'s row at `layer` (gate and up `[I x H]`, then down `[H x I]`):
/// uniform in `[-3/sqrt(H), 3/sqrt(H))` for gate and up and `[-3/sqrt(I), 3/sqrt(I))` for down,
/// so that with inputs uniform in [-1, 1) the dot products stay near unit variance.
WISP_HOST_DEVICE inline bf16 master_value(const swiglu_shape& shape, std::int32_t layer,
                                          std::int32_t expert, std::uint64_t index) noexcept {
  const bool down = index >= 2 * shape.matrix_values();
  const auto n = static_cast<float>(down ? shape.intermediate : shape.hidden);
#if defined(__CUDA_ARCH__)
  const float root = __fsqrt_rn(n);
#else
  const float root = std::sqrt(n);
#endif
  const float scale = wisp::detail::div_rn(3.0f, root);
  const std::uint64_t stream =
      (static_cast<std::uint64_t>(static_cast<std::uint32_t>(layer)) << 32) |
      static_cast<std::uint32_t>(expert);
  return detail::hashed_bf16(stream, index, scale);
}

/// Input value `index` of layer `layer`'s hidden state (`[tokens x H]`): uniform in [-1, 1).
WISP_HOST_DEVICE inline bf16 hidden_value(std::int32_t layer, std::uint64_t index) noexcept {
  return detail::hashed_bf16(0xffffffff00000000ull + static_cast<std::uint32_t>(layer), index,
                             1.0f);
}

// ---- what fits ---------------------------------------------------------------------------------

/// @brief What the benchmark asks of host and device memory for one model and its budgets.
struct memory_request {
  decode_model model;
  std::vector<double> budgets;         ///< fractions of each layer's experts
  std::uint64_t host_available = 0;    ///< bytes the host can pin (e.g. MemAvailable)
  std::uint64_t host_reserve = 0;      ///< bytes to leave to everything else
  std::uint64_t device_available = 0;  ///< free device bytes (cudaMemGetInfo)
  std::uint64_t device_reserve = 0;
  std::uint64_t device_fixed = 0;  ///< device bytes besides the slot arena (buffers, scratch)
};

/// @brief The layers the benchmark runs and the device arena of expert rows it allocates.
struct memory_plan {
  std::int32_t layers = 0;         ///< the first `layers` layers of the model
  bool all_resident = false;       ///< the arena holds every expert of those layers
  std::uint64_t arena_rows = 0;    ///< rows of `expert_bytes` in the device arena
  std::uint64_t host_bytes = 0;    ///< pinned masters
  std::uint64_t device_bytes = 0;  ///< arena plus fixed
  std::string note;  ///< why it shrank, with the sizes asked and available; empty if it did not
};

namespace detail {
[[nodiscard]] inline std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return text;
}
[[nodiscard]] inline std::uint64_t usable(std::uint64_t available, std::uint64_t reserve) {
  return available > reserve ? available - reserve : 0;
}
}  // namespace detail

/// @brief Arena rows the budget arms need on `layers` layers: every budget's slots in every layer
/// (`layers x capacity` for the largest budget), and at least one layer's experts (the reference
/// pass loads a whole layer).
[[nodiscard]] inline std::uint64_t budget_arena_rows(const memory_request& r, std::int32_t layers) {
  std::int32_t c = r.model.shape.top_k;
  for (const double f : r.budgets) {
    c = std::max(c, budget_capacity(r.model.shape, f));
  }
  return std::max(static_cast<std::uint64_t>(layers) * static_cast<std::uint64_t>(c),
                  static_cast<std::uint64_t>(r.model.shape.experts));
}

/// @brief Plans the run: as many layers as the host can pin (at most the model's) and the device
/// holds the budget arms' rows of, then the arena: every expert of those layers when the device
/// holds them too (`all_resident`), else the budget arms' rows. O(layers).
/// @throws wisp::logic_error on an empty budget list; wisp::out_of_memory naming the sizes asked
///   and available when not even one layer fits.
[[nodiscard]] inline memory_plan plan_memory(const memory_request& r) {
  WISP_EXPECTS(!r.budgets.empty(), "plan_memory: no budget");
  const std::uint64_t row = r.model.expert_bytes();
  const std::uint64_t layer = r.model.layer_bytes();
  const std::uint64_t host = detail::usable(r.host_available, r.host_reserve);
  const std::uint64_t device = detail::usable(r.device_available, r.device_reserve);
  memory_plan p;
  p.layers = static_cast<std::int32_t>(
      std::min<std::uint64_t>(static_cast<std::uint64_t>(r.model.shape.layers), host / layer));
  if (p.layers < 1) {
    throw out_of_memory("the pinned masters of one layer of " + r.model.name + " need " +
                        detail::gib(layer) + "; the host has " + detail::gib(r.host_available) +
                        " available, " + detail::gib(r.host_reserve) + " of it kept in reserve");
  }
  if (p.layers < r.model.shape.layers) {
    p.note = "host: " + std::to_string(r.model.shape.layers) + " layers need " +
             detail::gib(r.model.model_bytes()) + " of pinned masters, " + detail::gib(host) +
             " usable (" + detail::gib(r.host_available) + " available less " +
             detail::gib(r.host_reserve) + " reserve): running " + std::to_string(p.layers) +
             " layers. ";
  }
  const auto device_need = [&](std::uint64_t rows) { return rows * row + r.device_fixed; };
  std::int32_t fit = p.layers;
  while (fit >= 1 && device_need(budget_arena_rows(r, fit)) > device) {
    --fit;
  }
  if (fit < 1) {
    throw out_of_memory("the budget arms of " + r.model.name + " need " +
                        detail::gib(device_need(budget_arena_rows(r, 1))) +
                        " of device memory on one layer; " + detail::gib(r.device_available) +
                        " free, " + detail::gib(r.device_reserve) + " of it kept in reserve");
  }
  if (fit < p.layers) {
    p.note += "device: " + std::to_string(p.layers) + " layers need " +
              detail::gib(device_need(budget_arena_rows(r, p.layers))) + " for the budget arms, " +
              detail::gib(device) + " usable: running " + std::to_string(fit) + " layers. ";
    p.layers = fit;
  }
  const std::uint64_t all_rows =
      static_cast<std::uint64_t>(p.layers) * static_cast<std::uint64_t>(r.model.shape.experts);
  p.all_resident = device_need(all_rows) <= device;
  if (p.all_resident) {
    p.arena_rows = all_rows;
  } else {
    p.arena_rows = budget_arena_rows(r, p.layers);
    p.note += "device: all-resident needs " + detail::gib(device_need(all_rows)) + ", " +
              detail::gib(device) + " usable: all-resident does not run. ";
  }
  p.host_bytes = static_cast<std::uint64_t>(p.layers) * layer;
  p.device_bytes = device_need(p.arena_rows);
  if (!p.note.empty()) {
    p.note.pop_back();
  }
  return p;
}

/// @brief The next plan after an allocation of `failed` failed: `pinned_layers` layers of
/// masters were pinned (host) and `device_free` bytes are free on the device now. The result is
/// strictly smaller than `failed` (fewer layers, or the same layers without all-resident, or a
/// smaller arena), and its note says what failed and with which sizes. O(layers).
/// @throws wisp::out_of_memory when nothing smaller fits.
[[nodiscard]] inline memory_plan plan_after_failure(memory_request r, const memory_plan& failed,
                                                    std::int32_t pinned_layers,
                                                    std::uint64_t device_free,
                                                    const std::string& what) {
  // The host can pin what it did pin; the device has what it says is free.
  r.host_available =
      static_cast<std::uint64_t>(pinned_layers) * r.model.layer_bytes() + r.host_reserve;
  r.device_available = std::min(r.device_available, device_free);
  memory_plan p = plan_memory(r);
  const bool smaller =
      p.layers < failed.layers || (p.layers == failed.layers && p.arena_rows < failed.arena_rows);
  if (!smaller) {  // the figures alone do not shrink it: ask for less than what failed
    r.device_available = std::min(r.device_available, failed.device_bytes - 1 + r.device_reserve);
    p = plan_memory(r);  // device_bytes < failed's: fewer rows, on no more layers
  }
  p.note = what + ". " + p.note;
  return p;
}

}  // namespace wisp::bench
