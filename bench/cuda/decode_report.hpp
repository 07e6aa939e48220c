// SPDX-License-Identifier: Apache-2.0
// What the GPU decode benchmark reports and how it checks outputs: summaries of repetitions,
// the arm-output equality check (bit for bit against the reference), the kernel-agreement check
// (within a tolerance), the device profile built from measurements, and the JSON files. Host-safe:
// tests/cuda checks each of these on the CPU (the JSON by parsing it back).
#pragma once

#include "decode_arms.hpp"
#include "decode_model.hpp"

#include <wisp/core/detail/json.hpp>
#include <wisp/core/error.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/transfer/device_profile.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wisp::bench {

/// Median, minimum and maximum of repeated measurements (all 0 when there are none).
struct summary {
  double median = 0;
  double min = 0;
  double max = 0;
  std::size_t count = 0;
};

/// The summary of `v` (the median of an even count is the mean of the two middle values).
[[nodiscard]] inline summary summarize(std::vector<double> v) {
  if (v.empty()) {
    return {};
  }
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {median, v.front(), v.back(), n};
}

// ---- output checks -----------------------------------------------------------------------------

/// @brief The comparison of an arm's MoE outputs with the reference's, bit for bit. The outputs
/// are `[tokens x layers x hidden]` bf16 (every layer's output of each checked token).
struct output_check {
  std::size_t compared = 0;
  std::size_t mismatches = 0;
  std::size_t first = 0;  ///< index of the first mismatch (when there is one)
  float want = 0;
  float got = 0;
  /// The reference is all zeros or not finite: equality would prove nothing.
  bool degenerate_reference = false;

  [[nodiscard]] bool equal() const noexcept {
    return compared > 0 && mismatches == 0 && !degenerate_reference;
  }
  /// A line for the report: "equal (N values)" or what differs, located as (token, layer, o).
  [[nodiscard]] std::string describe(std::int32_t layers, std::int32_t hidden) const {
    if (compared == 0) {
      return "not compared (no outputs)";
    }
    if (degenerate_reference) {
      return "reference degenerate (all zero or not finite): the check proves nothing";
    }
    if (mismatches == 0) {
      return "equal (" + std::to_string(compared) + " values, bit for bit)";
    }
    const std::size_t per_token =
        static_cast<std::size_t>(layers) * static_cast<std::size_t>(hidden);
    std::ostringstream o;
    o << "MISMATCH: " << mismatches << " of " << compared << " values differ; first at token "
      << first / per_token << " layer " << (first % per_token) / static_cast<std::size_t>(hidden)
      << " output " << first % static_cast<std::size_t>(hidden) << ": want " << want << ", got "
      << got;
    return o.str();
  }
};

/// @brief Compares `got` with `want` bit for bit. O(n).
/// @throws wisp::logic_error if the sizes differ.
[[nodiscard]] inline output_check compare_outputs(std::span<const bf16> want,
                                                  std::span<const bf16> got) {
  WISP_EXPECTS(want.size() == got.size(), "compare_outputs: ", got.size(), " outputs for ",
               want.size());
  output_check c;
  c.compared = want.size();
  bool nonzero = false;
  bool finite = true;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const float w = to_float(want[i]);
    nonzero = nonzero || w != 0.0f;
    finite = finite && std::isfinite(w);
    if (want[i].bits != got[i].bits) {
      if (c.mismatches++ == 0) {
        c.first = i;
        c.want = w;
        c.got = to_float(got[i]);
      }
    }
  }
  c.degenerate_reference = !nonzero || !finite;
  return c;
}

/// The largest difference allowed between two kernels' outputs, relative to the largest output
/// magnitude: bf16 activations (cuBLAS's GEMM inputs) and the order of the sums differ.
inline constexpr double kernel_tolerance = 2e-2;

/// @brief How close two kernels' outputs are: the largest absolute difference over the largest
/// absolute reference value.
struct closeness {
  std::size_t compared = 0;
  double max_abs_diff = 0;
  double max_abs_want = 0;
  bool finite = true;

  [[nodiscard]] double relative() const noexcept {
    return max_abs_want > 0 ? max_abs_diff / max_abs_want : std::numeric_limits<double>::infinity();
  }
  /// Finite, non-degenerate, and within `tolerance`.
  [[nodiscard]] bool within(double tolerance) const noexcept {
    return compared > 0 && finite && max_abs_want > 0 && relative() <= tolerance;
  }
  [[nodiscard]] std::string describe(double tolerance) const {
    std::ostringstream o;
    o << (within(tolerance) ? "close" : "NOT CLOSE") << ": max |diff| " << max_abs_diff
      << " over max |want| " << max_abs_want << " = " << relative() << " (tolerance " << tolerance
      << ", " << compared << " values" << (finite ? "" : ", NOT FINITE") << ")";
    return o.str();
  }
};

/// @brief Compares two kernels' bf16 outputs (see `closeness`). O(n).
/// @throws wisp::logic_error if the sizes differ.
[[nodiscard]] inline closeness compare_close(std::span<const bf16> want,
                                             std::span<const bf16> got) {
  WISP_EXPECTS(want.size() == got.size(), "compare_close: ", got.size(), " outputs for ",
               want.size());
  closeness c;
  c.compared = want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = to_float(want[i]);
    const double g = to_float(got[i]);
    c.finite = c.finite && std::isfinite(w) && std::isfinite(g);
    c.max_abs_want = std::max(c.max_abs_want, std::abs(w));
    c.max_abs_diff = std::max(c.max_abs_diff, std::abs(w - g));
  }
  return c;
}

// ---- the device profile ------------------------------------------------------------------------

/// A device's name as a file-name part: lower case, runs of other characters as one '-'
/// ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3").
[[nodiscard]] inline std::string device_slug(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') {
    out.pop_back();
  }
  return out.empty() ? "unknown-device" : out;
}

/// @brief The dense BF16 tensor peak of a known device from its datasheet (TFLOP/s), matched on
/// its name; `nullopt` for others. Used only when no cuBLAS measurement could be made.
[[nodiscard]] inline std::optional<std::pair<double, std::string_view>> datasheet_bf16_tflops(
    std::string_view device) {
  const std::string s = device_slug(device);
  const auto has = [&s](std::string_view part) { return s.find(part) != std::string::npos; };
  if (has("h200")) {
    return std::pair{989.0, "NVIDIA H200 datasheet: 989 dense BF16 TFLOP/s"};
  }
  if (has("h100") && (has("pcie") || has("nvl"))) {
    return has("nvl") ? std::pair{835.0, "NVIDIA H100 NVL datasheet: 835 dense BF16 TFLOP/s"}
                      : std::pair{756.0, "NVIDIA H100 PCIe datasheet: 756 dense BF16 TFLOP/s"};
  }
  if (has("h100")) {
    return std::pair{989.0, "NVIDIA H100 SXM datasheet: 989 dense BF16 TFLOP/s"};
  }
  if (has("a100")) {
    return std::pair{312.0, "NVIDIA A100 datasheet: 312 dense BF16 TFLOP/s"};
  }
  if (has("l4")) {
    return std::pair{121.0, "NVIDIA L4 datasheet: 121 dense BF16 TFLOP/s"};
  }
  if (has("4090")) {
    return std::pair{165.2, "NVIDIA Ada whitepaper (RTX 4090): 165.2 dense BF16 TFLOP/s"};
  }
  return std::nullopt;
}

/// What `--write-profile` measured (see docs/cuda.md for how each figure is measured).
struct profile_measurements {
  std::string device;    ///< cudaDeviceProp::name
  std::string smi_name;  ///< nvidia-smi's name of the device ("" if not given)
  std::string commit;
  std::string command;
  double h2d_gbps = 0;            ///< pinned host-to-device copies of one expert row
  double copy_latency_us = 0;     ///< one small pinned copy
  double device_memory_gbps = 0;  ///< a device copy kernel, bytes read and written
  double launch_us = 0;           ///< an empty kernel node in a CUDA graph
  double moe_gbps = 0;            ///< the GEMV fused-MoE kernel's expert bytes per second
  std::string moe_source;         ///< the shape it was measured at
  double peak_bf16_tflops = 0;
  std::string peak_source;      ///< the cuBLAS measurement, or the datasheet used instead
  double host_memory_gbps = 0;  ///< memcpy with every host thread, bytes read and written
  std::int32_t host_threads = 0;
};

/// @brief The device profile of `m`: named `device_slug(m.device)`, with a `source` that names
/// the command, the commit, the device (and nvidia-smi's name) and how each figure was measured.
/// @throws wisp::logic_error naming the figure if one is missing or not positive
///   (`device_profile::validate`).
[[nodiscard]] inline device_profile measured_profile(const profile_measurements& m) {
  device_profile p;
  p.name = device_slug(m.device);
  std::ostringstream s;
  s.precision(4);
  s << "measured by `" << m.command << "` at commit " << (m.commit.empty() ? "unknown" : m.commit)
    << " on " << m.device;
  if (!m.smi_name.empty()) {
    s << " (nvidia-smi: " << m.smi_name << ")";
  }
  s << ". h2d_gbps: event-timed cudaMemcpyAsync of one expert row from pinned memory, less the "
       "copy latency; copy_latency_us: one 4 KiB pinned copy; device_memory_gbps: a device copy "
       "kernel, bytes read plus written; launch_us: an empty kernel node in a CUDA graph; "
       "moe_gbps: the GEMV fused-MoE kernel's expert bytes per second at "
    << m.moe_source << "; peak_bf16_tflops: " << m.peak_source << "; host_memory_gbps: memcpy on "
    << m.host_threads
    << " threads, bytes read plus written; host_threads: std::thread::hardware_concurrency()";
  p.source = s.str();
  p.device_memory_gbps = m.device_memory_gbps;
  p.peak_bf16_tflops = m.peak_bf16_tflops;
  p.h2d_gbps = m.h2d_gbps;
  p.copy_latency_us = m.copy_latency_us;
  p.launch_us = m.launch_us;
  p.host_memory_gbps = m.host_memory_gbps;
  p.host_threads = m.host_threads;
  p.moe_gbps = m.moe_gbps;
  p.validate();
  return p;
}

// ---- JSON
// ----------------------------------------------------------------------------------------

/// @brief A small streaming JSON writer (objects, arrays, numbers, strings, booleans), indented
/// two spaces. Non-finite numbers are written as null.
class json_writer {
 public:
  json_writer() { out_.precision(10); }

  /// Opens an object (`bracket` '{') or array ('['), as member `key` of an object (`key` is
  /// ignored inside arrays and at the top).
  json_writer& open(std::string_view key, char bracket) {
    item(key);
    out_ << bracket;
    stack_.push_back({bracket == '{' ? '}' : ']', false});
    return *this;
  }
  json_writer& close() {
    WISP_EXPECTS(!stack_.empty(), "json_writer: nothing to close");
    const auto [bracket, any] = stack_.back();
    stack_.pop_back();
    if (any) {
      newline();
    }
    out_ << bracket;
    return *this;
  }
  json_writer& number(std::string_view key, double v) {
    item(key);
    if (std::isfinite(v)) {
      out_ << v;
    } else {
      out_ << "null";
    }
    return *this;
  }
  template <std::integral I>
  json_writer& integer(std::string_view key, I v) {
    item(key);
    out_ << +v;
    return *this;
  }
  json_writer& text(std::string_view key, std::string_view v) {
    item(key);
    out_ << wisp::detail::json_quote(v);
    return *this;
  }
  json_writer& boolean(std::string_view key, bool v) {
    item(key);
    out_ << (v ? "true" : "false");
    return *this;
  }
  /// `{"median": .., "min": .., "max": ..}` as member `key`.
  json_writer& stats(std::string_view key, const summary& s) {
    return open(key, '{')
        .number("median", s.median)
        .number("min", s.min)
        .number("max", s.max)
        .close();
  }
  /// The document; every container must be closed.
  [[nodiscard]] std::string str() const {
    WISP_EXPECTS(stack_.empty(), "json_writer: ", stack_.size(), " containers left open");
    return out_.str() + "\n";
  }

 private:
  void newline() { out_ << '\n' << std::string(2 * stack_.size(), ' '); }
  void item(std::string_view key) {
    if (stack_.empty()) {
      return;
    }
    if (stack_.back().second) {
      out_ << ',';
    }
    stack_.back().second = true;
    newline();
    if (stack_.back().first == '}') {
      out_ << wisp::detail::json_quote(key) << ": ";
    }
  }

  std::ostringstream out_;
  std::vector<std::pair<char, bool>> stack_;  // closing bracket, holds an item
};

// ---- the reports -------------------------------------------------------------------------------

/// One arm of one (model, budget).
struct arm_report {
  decode_arm arm = decode_arm::wisp;
  std::vector<double> tok_s;  ///< decode tokens/s of the MoE part, one per repetition
  std::int32_t timed_tokens = 0;
  std::int32_t layers = 0;
  call_totals totals;  ///< over the timed tokens (the same in every repetition)
  std::uint64_t row_bytes = 0;
  std::string output_check = "not checked";
  bool output_ok = false;
  std::string error;    ///< what failed, when it did
  std::string skipped;  ///< why it did not run, when it did not
  std::string notes;    ///< the arm's configuration

  [[nodiscard]] summary decode_tok_s() const { return summarize(tok_s); }
  /// Microseconds per layer of each repetition.
  [[nodiscard]] summary us_per_layer() const {
    std::vector<double> us;
    for (const double r : tok_s) {
      us.push_back(r > 0 ? 1e6 / (r * layers) : 0.0);
    }
    return summarize(us);
  }
  [[nodiscard]] std::uint64_t link_bytes() const noexcept { return totals.link_rows * row_bytes; }
};

/// A kernel measured on one model's shape.
struct kernel_report {
  std::string name;
  summary us_per_call;  ///< one layer call at batch 1 (all experts resident)
  double expert_bytes_per_call = 0;
  std::string check;  ///< against the host arithmetic or the other kernel
  bool ok = false;
  std::string error;

  [[nodiscard]] double gbps() const noexcept {
    return us_per_call.median > 0 ? expert_bytes_per_call / (us_per_call.median * 1e3) : 0.0;
  }
};

/// @brief Pinned host-to-device bandwidth of one expert row (`row_bytes`), both ways the arms
/// copy: DMA (`cudaMemcpyAsync`, what the host arms' copy engine issues) and the device pager's
/// copy kernel reading the row through unified addressing (what `wisp-graph` runs). Each is the
/// row over (time of a row-sized copy - time of a 4 KiB one), medians; 0 when not measured.
struct link_rates {
  std::size_t row_bytes = 0;
  double dma_gbps = 0;
  double uva_copy_kernel_gbps = 0;
  double dma_latency_us = 0;  ///< a 4 KiB copy's
};

/// @brief The host's expert kernel (`wisp::host_swiglu_kernel`) on one model's experts, read from
/// the pinned masters, on the threads the host arms use; absent (threads 0) when no host arm ran.
struct host_figures {
  std::int32_t threads = 0;
  std::string isa;
  std::int32_t experts_per_call = 0;  ///< top-k
  std::int32_t wide_rows = 0;
  std::uint64_t row_bytes = 0;
  summary call_us;        ///< top-k experts at 1 row
  summary one_expert_us;  ///< one expert at 1 row
  summary wide_call_us;   ///< top-k experts at `wide_rows` rows
  /// Expert bytes per second at 1 row, in GB/s.
  [[nodiscard]] double gbps() const noexcept {
    return call_us.median > 0 ? static_cast<double>(experts_per_call) *
                                    static_cast<double>(row_bytes) / (call_us.median * 1e3)
                              : 0.0;
  }
};

/// One (model, budget): what the JSON file of that pair holds.
struct config_report {
  std::string model;
  double budget_fraction = 0;
  std::string device;
  std::string smi_name;
  std::string command;
  std::string commit;
  decode_model shape;
  memory_plan memory;
  std::int32_t capacity = 0;  ///< slots per layer
  decode_window window;
  std::string routing;
  std::int32_t repetitions = 0;  ///< asked for
  std::string wisp_policy;
  std::string wisp_graph_policy;       ///< the device step's policy (`step_policy_name`)
  std::string wisp_graph_policy_note;  ///< why it differs from `wisp_policy`, when it does
  std::vector<std::pair<std::string, std::uint64_t>> policy_misses;  ///< over the history
  double device_memory_gbps = 0;  ///< the profile's, to put the kernels' rates in proportion
  link_rates link;                ///< measured once per run, to put the arms' copies in proportion
  std::vector<kernel_report> kernels;
  host_figures host;
  std::vector<arm_report> arms;
  std::vector<arm_report> cublas_arms;  ///< arms run again with the cuBLAS kernel
  std::string truncated;                ///< why fewer repetitions ran than asked, when they did
};

/// @brief What the measured rates allow an arm: every timed token needs its link bytes at the
/// link's DMA rate, its host experts at the host kernel's 1-row rate and the device's MoE work at
/// the all-resident arm's time per token; with the three overlapping perfectly, a token takes at
/// least the longest of them. 0 where a rate the arm needs was not measured.
struct arm_ceiling {
  double link_s = 0;    ///< per token
  double host_s = 0;    ///< per token
  double device_s = 0;  ///< per token: all-resident's median
  double tok_s = 0;     ///< 1 / the longest
  [[nodiscard]] std::string_view bound() const noexcept {
    return link_s >= host_s && link_s >= device_s ? "link" : host_s >= device_s ? "host" : "device";
  }
};

/// Arm `a`'s ceiling at run `r`'s measured rates (see `arm_ceiling`). O(arms).
[[nodiscard]] inline arm_ceiling ceiling_of(const config_report& r, const arm_report& a) {
  arm_ceiling c;
  if (a.timed_tokens <= 0) {
    return c;
  }
  const double tokens = a.timed_tokens;
  for (const arm_report& b : r.arms) {
    if (b.arm == decode_arm::all_resident && !b.tok_s.empty()) {
      c.device_s = 1.0 / b.decode_tok_s().median;
    }
  }
  bool measured = c.device_s > 0;
  if (a.link_bytes() > 0) {
    measured = measured && r.link.dma_gbps > 0;
    c.link_s = r.link.dma_gbps > 0
                   ? static_cast<double>(a.link_bytes()) / tokens / (r.link.dma_gbps * 1e9)
                   : 0.0;
  }
  if (a.totals.host_experts > 0) {
    measured = measured && r.host.gbps() > 0;
    c.host_s = r.host.gbps() > 0 ? static_cast<double>(a.totals.host_experts) / tokens *
                                       static_cast<double>(a.row_bytes) / (r.host.gbps() * 1e9)
                                 : 0.0;
  }
  const double longest = std::max({c.link_s, c.host_s, c.device_s});
  c.tok_s = measured && longest > 0 ? 1.0 / longest : 0.0;
  return c;
}

namespace detail {
inline void write_arm(json_writer& j, const arm_report& a, const arm_ceiling& c) {
  j.open(arm_name(a.arm), '{');
  j.stats("decode_tok_s", a.decode_tok_s());
  j.stats("us_per_layer", a.us_per_layer());
  j.number("hit_rate", a.totals.hit_rate());
  j.integer("link_bytes", a.link_bytes());
  j.number("link_bytes_per_token",
           a.timed_tokens > 0 ? static_cast<double>(a.link_bytes()) / a.timed_tokens : 0.0);
  j.integer("repetitions", a.tok_s.size());
  j.open("tok_s", '[');
  for (const double r : a.tok_s) {
    j.number({}, r);
  }
  j.close();
  j.integer("hits", a.totals.hits).integer("misses", a.totals.misses);
  j.integer("host_experts", a.totals.host_experts);
  j.number("host_experts_per_token",
           a.timed_tokens > 0 ? static_cast<double>(a.totals.host_experts) / a.timed_tokens : 0.0);
  // The host's own time (the last repetition's): beside the ceiling's host rate, what the host
  // kernel ran at while the arm ran (its memory shared with the DMA engines, say).
  j.number("host_compute_s_per_token",
           a.timed_tokens > 0 ? a.totals.host_seconds / a.timed_tokens : 0.0);
  j.number("host_us_per_expert",
           a.totals.host_experts > 0
               ? 1e6 * a.totals.host_seconds / static_cast<double>(a.totals.host_experts)
               : 0.0);
  j.open("ceiling", '{')
      .number("tok_s", c.tok_s)
      .number("fraction_reached", c.tok_s > 0 ? a.decode_tok_s().median / c.tok_s : 0.0)
      .text("bound_by", c.tok_s > 0 ? c.bound() : "not measured")
      .number("link_s_per_token", c.link_s)
      .number("host_s_per_token", c.host_s)
      .number("device_s_per_token", c.device_s)
      .close();
  // Outputs: bit for bit for arms the device computes whole, within host_swiglu_tolerance of
  // the reference for the host arms (output_check says which).
  j.text("output_check", a.output_check).boolean("output_equal", a.output_ok);
  if (!a.error.empty()) {
    j.text("error", a.error);
  }
  if (!a.skipped.empty()) {
    j.text("skipped", a.skipped);
  }
  j.text("notes", a.notes);
  j.close();
}
}  // namespace detail

/// The JSON file of one (model, budget) (format: docs/cuda.md).
[[nodiscard]] inline std::string to_json(const config_report& r) {
  json_writer j;
  j.open({}, '{');
  j.text("model", r.model).number("budget_fraction", r.budget_fraction);
  j.text("device", r.device).text("nvidia_smi_name", r.smi_name);
  j.text("command", r.command).text("commit", r.commit);
  j.text("what",
         "decode tokens/s of the MoE part only (router ids from a trace, no attention), "
         "batch 1, bf16 experts with random values, masters in pinned host memory");
  j.open("shape", '{')
      .integer("model_layers", r.shape.shape.layers)
      .integer("layers_run", r.memory.layers)
      .integer("experts", r.shape.shape.experts)
      .integer("top_k", r.shape.shape.top_k)
      .integer("hidden", r.shape.expert.hidden)
      .integer("intermediate", r.shape.expert.intermediate)
      .integer("expert_bytes", r.shape.expert_bytes())
      .close();
  j.integer("capacity_per_layer", r.capacity);
  j.integer("budget_rows", static_cast<std::int64_t>(r.capacity) * r.memory.layers);
  j.open("memory", '{')
      .integer("host_pinned_bytes", r.memory.host_bytes)
      .integer("device_arena_bytes", r.memory.device_bytes)
      .boolean("all_resident_fits", r.memory.all_resident)
      .text("shrunk", r.memory.note)
      .close();
  j.text("routing", r.routing);
  j.open("window", '{')
      .integer("history", r.window.history)
      .integer("warmup", r.window.warmup)
      .integer("timed", r.window.timed)
      .integer("verify", r.window.verify)
      .close();
  j.integer("repetitions_asked", r.repetitions);
  j.text("truncated", r.truncated);
  j.text("wisp_policy", r.wisp_policy);
  j.text("wisp_graph_policy", r.wisp_graph_policy);
  j.text("wisp_graph_policy_note", r.wisp_graph_policy_note);
  j.open("policy_misses_over_history", '{');
  for (const auto& [name, misses] : r.policy_misses) {
    j.integer(name, misses);
  }
  j.close();
  j.open("link", '{')
      .integer("row_bytes", r.link.row_bytes)
      .number("dma_h2d_gbps", r.link.dma_gbps)
      .number("uva_copy_kernel_gbps", r.link.uva_copy_kernel_gbps)
      .number("dma_latency_us", r.link.dma_latency_us)
      .close();
  if (r.host.threads > 0) {
    j.open("host_kernel", '{')
        .integer("threads", r.host.threads)
        .text("isa", r.host.isa)
        .integer("experts_per_call", r.host.experts_per_call)
        .stats("call_us", r.host.call_us)
        .stats("one_expert_us", r.host.one_expert_us)
        .integer("wide_rows", r.host.wide_rows)
        .stats("wide_call_us", r.host.wide_call_us)
        .number("expert_read_gbps", r.host.gbps())
        .close();
  }
  j.open("kernels", '{');
  for (const kernel_report& k : r.kernels) {
    j.open(k.name, '{');
    j.stats("us_per_layer_call", k.us_per_call);
    j.number("us_per_expert",
             r.shape.shape.top_k > 0 ? k.us_per_call.median / r.shape.shape.top_k : 0.0);
    j.number("expert_read_gbps", k.gbps());
    j.number("fraction_of_device_memory_gbps",
             r.device_memory_gbps > 0 ? k.gbps() / r.device_memory_gbps : 0.0);
    j.text("check", k.check).boolean("ok", k.ok);
    if (!k.error.empty()) {
      j.text("error", k.error);
    }
    j.close();
  }
  j.close();
  j.open("arms", '{');
  for (const arm_report& a : r.arms) {
    detail::write_arm(j, a, ceiling_of(r, a));
  }
  j.close();
  j.open("cublas_arms", '{');
  for (const arm_report& a : r.cublas_arms) {
    detail::write_arm(j, a, ceiling_of(r, a));
  }
  j.close();
  j.close();
  return j.str();
}

/// The text table of one (model, budget).
[[nodiscard]] inline std::string to_table(const config_report& r) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  o << r.model << ", budget " << r.budget_fraction << " (" << r.capacity << " slots per layer, "
    << r.memory.layers << " of " << r.shape.shape.layers << " layers), " << r.device << "\n";
  o << "  arm               tok/s median (min-max)      us/layer   hit rate   link MiB/token  "
       "host experts/token  ceiling tok/s (bound, reached)  output\n";
  const auto row = [&o, &r](const arm_report& a, std::string_view suffix) {
    const summary s = a.decode_tok_s();
    std::string name = std::string(arm_name(a.arm)) + std::string(suffix);
    name.resize(18, ' ');
    o << "  " << name;
    if (!a.skipped.empty() || !a.error.empty() || s.count == 0) {
      o << (a.error.empty() ? "skipped: " + a.skipped : "ERROR: " + a.error) << "\n";
      return;
    }
    o << s.median << " (" << s.min << "-" << s.max << ")    " << a.us_per_layer().median << "    "
      << a.totals.hit_rate() << "    "
      << (a.timed_tokens > 0 ? static_cast<double>(a.link_bytes()) / a.timed_tokens / (1 << 20) : 0)
      << "    "
      << (a.timed_tokens > 0 ? static_cast<double>(a.totals.host_experts) / a.timed_tokens : 0);
    const arm_ceiling c = ceiling_of(r, a);
    o << "    " << c.tok_s << " (" << (c.tok_s > 0 ? c.bound() : "not measured") << ", "
      << (c.tok_s > 0 ? 100 * s.median / c.tok_s : 0) << "%)    "
      << (a.output_ok ? (computes_on_host(a.arm) ? "close" : "equal") : a.output_check) << "\n";
  };
  for (const arm_report& a : r.arms) {
    row(a, "");
  }
  for (const arm_report& a : r.cublas_arms) {
    row(a, " (cuBLAS)");
  }
  for (const kernel_report& k : r.kernels) {
    o << "  kernel " << k.name << ": " << k.us_per_call.median << " us per layer call, " << k.gbps()
      << " GB/s of expert bytes; " << (k.error.empty() ? k.check : k.error) << "\n";
  }
  if (r.host.threads > 0) {
    o << "  host kernel " << r.host.isa << " on " << r.host.threads
      << " threads: " << r.host.call_us.median << " us for " << r.host.experts_per_call
      << " experts at 1 row (" << r.host.gbps() << " GB/s of expert bytes), "
      << r.host.one_expert_us.median << " us for one, " << r.host.wide_call_us.median << " us for "
      << r.host.experts_per_call << " at " << r.host.wide_rows << " rows\n";
  }
  if (r.link.row_bytes > 0) {
    o << "  link, one " << static_cast<double>(r.link.row_bytes) / (1 << 20)
      << " MiB row from pinned memory: DMA " << r.link.dma_gbps << " GB/s, UVA copy kernel "
      << r.link.uva_copy_kernel_gbps << " GB/s\n";
  }
  o << "  policies: wisp " << r.wisp_policy << ", wisp-graph's device step " << r.wisp_graph_policy
    << (r.wisp_graph_policy_note.empty() ? "" : " (") << r.wisp_graph_policy_note
    << (r.wisp_graph_policy_note.empty() ? "" : ")") << "\n";
  if (!r.truncated.empty()) {
    o << "  TRUNCATED: " << r.truncated << "\n";
  }
  return o.str();
}

/// The device pager step timed on a GPU (device_step.cuh): microseconds per layer per form.
struct device_step_report {
  std::string device;
  std::string smi_name;
  std::string command;
  std::string commit;
  moe_shape shape;
  std::int32_t capacity = 0;
  std::int32_t passes = 0;
  std::int32_t replays = 0;
  std::int32_t repetitions = 0;
  std::string routing;
  double hit_rate = 0;
  std::vector<std::pair<std::string, summary>> forms;  ///< name, microseconds per layer

  /// The form `name`'s summary (all zero when it was not timed).
  [[nodiscard]] summary form(std::string_view name) const {
    for (const auto& [n, s] : forms) {
      if (n == name) {
        return s;
      }
    }
    return {};
  }
};

/// The target of the device step: under 2 microseconds per layer in a graph.
inline constexpr double device_step_target_us = 2.0;

/// The device-step JSON file (format: docs/cuda.md).
[[nodiscard]] inline std::string to_json(const device_step_report& r) {
  json_writer j;
  j.open({}, '{');
  j.text("device", r.device).text("nvidia_smi_name", r.smi_name);
  j.text("command", r.command).text("commit", r.commit);
  j.text("what", "microseconds per layer of the device pager step: " + std::to_string(r.passes) +
                     " forward passes x " + std::to_string(r.shape.layers) +
                     " layers of nodes captured in one CUDA graph, replayed " +
                     std::to_string(r.replays) +
                     " times per repetition (new routing copied in "
                     "before each replay), repetitions interleaved over the forms");
  j.open("shape", '{')
      .integer("layers", r.shape.layers)
      .integer("experts", r.shape.experts)
      .integer("top_k", r.shape.top_k)
      .integer("capacity", r.capacity)
      .close();
  j.text("routing", r.routing).number("hit_rate", r.hit_rate);
  j.integer("repetitions", r.repetitions);
  j.open("device_step_us", '{');
  for (const char* name : {"block", "warp", "automatic", "warp_lfu_history", "empty_node"}) {
    j.stats(name, r.form(name));
  }
  j.close();
  j.open("levers_us", '{');
  for (const char* name : {"router_only", "router_then_step", "fused_router_step"}) {
    j.stats(name, r.form(name));
  }
  j.number("step_in_its_own_node",
           r.form("router_then_step").median - r.form("router_only").median);
  j.number("step_fused_into_the_router",
           r.form("fused_router_step").median - r.form("router_only").median);
  j.close();
  j.stats("launched_us", r.form("launched"));
  j.stats("host_round_trip_us", r.form("host_round_trip"));
  j.number("target_us", device_step_target_us);
  const double fused = r.form("fused_router_step").median - r.form("router_only").median;
  const auto under = [](const summary& s) {
    return s.count > 0 && s.median < device_step_target_us;
  };
  j.open("under_target", '{')
      .boolean("block", under(r.form("block")))
      .boolean("warp", under(r.form("warp")))
      .boolean("automatic", under(r.form("automatic")))
      .boolean("warp_lfu_history", under(r.form("warp_lfu_history")))
      .boolean("step_fused_into_the_router",
               r.form("fused_router_step").count > 0 && fused < device_step_target_us)
      .close();
  j.close();
  return j.str();
}

}  // namespace wisp::bench
