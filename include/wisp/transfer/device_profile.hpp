// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `device_profile`: the figures of one GPU and its host that a modelled device charges
/// time by, as datasheet presets or as a JSON file a GPU benchmark writes from measurements.
///
/// A compute op on the device is charged by a **roofline**: the larger of the bytes it reads over
/// the device's memory bandwidth and its FLOPs over the BF16 peak, plus one launch. A copy costs
/// the link's latency plus its bytes over the pinned host-to-device bandwidth. Host compute (an
/// expert computed by the host instead of copied) reads its weights at the host's memory bandwidth.
///
/// The file format (every figure a positive number; `source` and `moe_gbps` optional; any other
/// member is refused):
/// @code{.json}
/// {"name": "rtx-4090", "source": "where the figures come from",
///  "device_memory_gbps": 1008, "peak_bf16_tflops": 165.2, "h2d_gbps": 25,
///  "copy_latency_us": 10, "launch_us": 4, "host_memory_gbps": 60, "host_threads": 16,
///  "moe_gbps": 700}
/// @endcode
/// GB/s are 1e9 bytes per second, TFLOP/s 1e12 FLOP per second. `moe_gbps`, when present, is the
/// measured rate at which a fused-MoE kernel reads its experts' rows; ops charged as MoE launches
/// use it instead of `device_memory_gbps`.
/// @code
/// wisp::device_profile dev = wisp::device_profile_preset("rtx-4090");   // or
/// load_device_profile(path) double copy = dev.link().copy_seconds(expert_bytes); double moe =
/// dev.moe_seconds(k * expert_bytes, 2.0 * tokens * k * expert_params);
/// @endcode
#pragma once

#include <wisp/core/detail/files.hpp>
#include <wisp/core/detail/json.hpp>
#include <wisp/core/error.hpp>
#include <wisp/transfer/timeline.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

namespace wisp {

/// @brief One GPU and its host, as a modelled device sees them (see the file description).
/// A plain value; `validate()` checks it.
struct device_profile {
  std::string name;               ///< e.g. "rtx-4090"
  std::string source;             ///< where the figures come from (datasheet, measurement command)
  double device_memory_gbps = 0;  ///< device memory bandwidth, GB/s
  double peak_bf16_tflops = 0;    ///< dense BF16 tensor peak, TFLOP/s
  double h2d_gbps = 0;            ///< pinned host-to-device copy bandwidth as measured, GB/s
  double copy_latency_us = 0;     ///< fixed cost of one copy, µs
  double launch_us = 0;           ///< fixed cost of one kernel launch (or graph node), µs
  double host_memory_gbps = 0;    ///< host memory bandwidth available to host compute, GB/s
  std::int32_t host_threads = 0;  ///< host threads that compute experts
  double moe_gbps = 0;            ///< optional: measured fused-MoE read rate, GB/s; 0 = not given

  /// @throws wisp::logic_error naming the member and value if `name` is empty, a figure is not
  ///   finite and > 0 (`moe_gbps`: finite and >= 0), or `host_threads < 1`.
  void validate() const {
    WISP_EXPECTS(!name.empty(), "device_profile: name must not be empty");
    const auto positive = [this](double v, const char* member) {
      WISP_EXPECTS(std::isfinite(v) && v > 0, "device profile '", name, "': ", member,
                   " must be a finite number > 0, got ", v);
    };
    positive(device_memory_gbps, "device_memory_gbps");
    positive(peak_bf16_tflops, "peak_bf16_tflops");
    positive(h2d_gbps, "h2d_gbps");
    positive(copy_latency_us, "copy_latency_us");
    positive(launch_us, "launch_us");
    positive(host_memory_gbps, "host_memory_gbps");
    WISP_EXPECTS(host_threads >= 1, "device profile '", name, "': host_threads must be >= 1, got ",
                 host_threads);
    WISP_EXPECTS(std::isfinite(moe_gbps) && moe_gbps >= 0, "device profile '", name,
                 "': moe_gbps must be a finite number >= 0 (0 = not measured), got ", moe_gbps);
  }

  /// The host-to-device link: `h2d_gbps` and `copy_latency_us`. O(1).
  [[nodiscard]] link_model link() const noexcept {
    return link_model{.bytes_per_second = h2d_gbps * 1e9,
                      .latency_seconds = copy_latency_us * 1e-6};
  }
  /// Seconds of one device launch reading `bytes` and doing `flops`: the roofline plus the launch.
  [[nodiscard]] double device_seconds(double bytes, double flops) const noexcept {
    return std::max(bytes / (device_memory_gbps * 1e9), flops / (peak_bf16_tflops * 1e12)) +
           launch_us * 1e-6;
  }
  /// Seconds of one fused-MoE launch: as `device_seconds`, reading at `moe_gbps` when measured.
  [[nodiscard]] double moe_seconds(double bytes, double flops) const noexcept {
    const double gbps = moe_gbps > 0 ? moe_gbps : device_memory_gbps;
    return std::max(bytes / (gbps * 1e9), flops / (peak_bf16_tflops * 1e12)) + launch_us * 1e-6;
  }
  /// Seconds the host takes to read `bytes` of weights at its memory bandwidth (all its threads).
  [[nodiscard]] double host_seconds(double bytes) const noexcept {
    return bytes / (host_memory_gbps * 1e9);
  }

  friend bool operator==(const device_profile&, const device_profile&) = default;
};

namespace detail {

struct device_preset {
  std::string_view name;
  std::string_view source;
  double device_memory_gbps, peak_bf16_tflops, h2d_gbps, copy_latency_us, launch_us,
      host_memory_gbps;
  std::int32_t host_threads;
};

// Datasheet figures. PCIe is the pinned bandwidth cudaMemcpy reaches (about 80% of the bus's
// 31.5 GB/s for 4.0 x16, 63 GB/s for 5.0 x16), not the bus's peak. Launch: a kernel launch on the
// stream. Copy latency: the fixed cost of one cudaMemcpyAsync of a small pinned buffer.
inline constexpr std::array<device_preset, 4> device_presets{{
    {"rtx-4090",
     "NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4090: 1008 GB/s GDDR6X, 165.2 dense BF16 "
     "tensor TFLOP/s with FP32 accumulate); PCIe 4.0 x16 pinned ~25 GB/s; host: 16-core desktop, "
     "dual-channel DDR5-5200 (83.2 GB/s peak), 60 GB/s sustained assumed",
     1008, 165.2, 25, 10, 4, 60, 16},
    {"l4",
     "NVIDIA L4 datasheet (300 GB/s GDDR6, 121 dense BF16 TFLOP/s); PCIe 4.0 x16 pinned ~25 GB/s; "
     "host: one 32-core server socket, 8-channel DDR5-4800 (307 GB/s peak), 200 GB/s sustained "
     "assumed",
     300, 121, 25, 10, 4, 200, 32},
    {"a100-pcie",
     "NVIDIA A100 datasheet (A100 80GB PCIe: 1935 GB/s HBM2e, 312 dense BF16 TFLOP/s); PCIe 4.0 "
     "x16 pinned ~25 GB/s; host: one 32-core server socket, 8-channel DDR4-3200 (205 GB/s peak), "
     "150 GB/s sustained assumed",
     1935, 312, 25, 10, 4, 150, 32},
    {"h100-pcie",
     "NVIDIA H100 datasheet (H100 PCIe: 2000 GB/s HBM2e, 756 dense BF16 TFLOP/s); PCIe 5.0 x16 "
     "pinned ~50 GB/s; host: one 32-core server socket, 12-channel DDR5-4800 (461 GB/s peak), "
     "300 GB/s sustained assumed",
     2000, 756, 50, 10, 4, 300, 32},
}};

[[nodiscard]] inline device_profile to_profile(const device_preset& p) {
  device_profile d;
  d.name = std::string(p.name);
  d.source = std::string(p.source);
  d.device_memory_gbps = p.device_memory_gbps;
  d.peak_bf16_tflops = p.peak_bf16_tflops;
  d.h2d_gbps = p.h2d_gbps;
  d.copy_latency_us = p.copy_latency_us;
  d.launch_us = p.launch_us;
  d.host_memory_gbps = p.host_memory_gbps;
  d.host_threads = p.host_threads;
  return d;
}

[[noreturn]] inline void fail_profile_member(std::string_view where, std::string_view member,
                                             const std::string& why) {
  throw format_error(std::string(where) + ": \"" + std::string(member) + "\" " + why);
}

/// A JSON value as a message shows it: strings quoted, numbers as written, containers by kind.
[[nodiscard]] inline std::string describe_json(const json_value& v) {
  switch (v.type) {
    case json_value::kind::string:
      return "\"" + v.text + "\"";
    case json_value::kind::number:
      return v.text;
    case json_value::kind::boolean:
      return v.boolean ? "true" : "false";
    case json_value::kind::array:
      return "an array";
    case json_value::kind::object:
      return "an object";
    case json_value::kind::null:
      break;
  }
  return "null";
}

}  // namespace detail

/// Names of the built-in presets, in order: "rtx-4090", "l4", "a100-pcie", "h100-pcie".
[[nodiscard]] inline std::array<std::string_view, detail::device_presets.size()>
device_profile_preset_names() noexcept {
  std::array<std::string_view, detail::device_presets.size()> out{};
  std::transform(detail::device_presets.begin(), detail::device_presets.end(), out.begin(),
                 [](const detail::device_preset& p) { return p.name; });
  return out;
}

/// @brief The built-in preset `name` (see `device_profile_preset_names`). O(presets).
/// @throws wisp::logic_error naming `name` and every preset if there is none of that name.
[[nodiscard]] inline device_profile device_profile_preset(std::string_view name) {
  for (const detail::device_preset& p : detail::device_presets) {
    if (p.name == name) {
      return detail::to_profile(p);
    }
  }
  std::string known;
  for (const std::string_view n : device_profile_preset_names()) {
    known += known.empty() ? "" : ", ";
    known += n;
  }
  WISP_FAIL(logic_error, "unknown device profile '", name, "' (presets: ", known,
            "; or a profile file)");
}

/// @brief Parses a device profile from JSON (the format of the file description). `where` names
/// the input in messages (a file name).
/// @throws wisp::format_error naming the member and value on a syntax error, a document that is
///   not an object, a missing, non-numeric, non-finite, zero or negative figure, a fractional or
///   out-of-range `host_threads`, a `name`/`source` that is not a string, or an unknown member.
[[nodiscard]] inline device_profile parse_device_profile(
    std::string_view json, std::string_view where = "device profile") {
  const detail::json_value doc = [&] {
    try {
      return detail::json_parser(json, 0).parse_document();
    } catch (const format_error& e) {
      throw format_error(e.offset(), std::string(where) + ": " + e.problem());
    }
  }();
  if (doc.type != detail::json_value::kind::object) {
    throw format_error(std::string(where) + ": a device profile must be a JSON object");
  }
  device_profile d;
  bool seen[10] = {};
  static constexpr std::array<std::string_view, 10> members{
      "name",         "source",          "device_memory_gbps", "peak_bf16_tflops",
      "h2d_gbps",     "copy_latency_us", "launch_us",          "host_memory_gbps",
      "host_threads", "moe_gbps"};
  for (const detail::json_member& m : doc.members) {
    const auto it = std::find(members.begin(), members.end(), m.key);
    if (it == members.end()) {
      detail::fail_profile_member(where, m.key,
                                  "is not a device profile member (members: name, source, "
                                  "device_memory_gbps, peak_bf16_tflops, h2d_gbps, "
                                  "copy_latency_us, launch_us, host_memory_gbps, host_threads, "
                                  "moe_gbps)");
    }
    const auto index = static_cast<std::size_t>(std::distance(members.begin(), it));
    seen[index] = true;
    if (index < 2) {
      if (m.value.type != detail::json_value::kind::string) {
        detail::fail_profile_member(where, m.key,
                                    "must be a string, got " + detail::describe_json(m.value));
      }
      (index == 0 ? d.name : d.source) = m.value.text;
      continue;
    }
    if (m.value.type != detail::json_value::kind::number) {
      detail::fail_profile_member(where, m.key,
                                  "must be a number, got " + detail::describe_json(m.value));
    }
    const double v = m.value.number;
    const bool optional = m.key == "moe_gbps";
    if (!std::isfinite(v) || v < 0 || (v == 0 && !optional)) {
      detail::fail_profile_member(
          where, m.key,
          std::string("must be ") + (optional ? ">= 0" : "> 0") + ", got " + m.value.text);
    }
    if (m.key == "host_threads") {
      if (v != std::floor(v) || v > std::numeric_limits<std::int32_t>::max()) {
        detail::fail_profile_member(where, m.key,
                                    "must be a whole number of threads, got " + m.value.text);
      }
      d.host_threads = static_cast<std::int32_t>(v);
      continue;
    }
    double* const target[] = {
        &d.device_memory_gbps, &d.peak_bf16_tflops, &d.h2d_gbps, &d.copy_latency_us,
        &d.launch_us,          &d.host_memory_gbps, nullptr,     &d.moe_gbps};
    *target[index - 2] = v;
  }
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!seen[i] && members[i] != "source" && members[i] != "moe_gbps") {
      detail::fail_profile_member(where, members[i], "is missing");
    }
  }
  if (d.name.empty()) {
    detail::fail_profile_member(where, "name", "must not be empty");
  }
  return d;
}

/// @brief Reads a device profile file (see `parse_device_profile`).
/// @throws wisp::error if the file cannot be read; wisp::format_error as `parse_device_profile`.
[[nodiscard]] inline device_profile load_device_profile(const std::filesystem::path& path) {
  std::ifstream in = detail::open_for_reading(path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_device_profile(text.str(), path.string());
}

/// @brief The profile `name_or_file`: a preset name, or else a path to a profile file.
/// @throws as `device_profile_preset` when it is neither a preset nor an existing file; as
///   `load_device_profile` otherwise.
[[nodiscard]] inline device_profile device_profile_named(std::string_view name_or_file) {
  const auto names = device_profile_preset_names();
  if (std::find(names.begin(), names.end(), name_or_file) != names.end() ||
      !std::filesystem::exists(std::filesystem::path(name_or_file))) {
    return device_profile_preset(name_or_file);
  }
  return load_device_profile(std::filesystem::path(name_or_file));
}

/// @brief The profile as one JSON object in the file format (`moe_gbps` only when given); numbers
/// are written so that `parse_device_profile(to_json(p)) == p`.
[[nodiscard]] inline std::string to_json(const device_profile& p) {
  const auto quoted = [](const std::string& s) { return detail::json_quote(s); };
  std::ostringstream o;
  o.precision(17);
  o << "{\"name\": " << quoted(p.name) << ", \"source\": " << quoted(p.source)
    << ", \"device_memory_gbps\": " << p.device_memory_gbps
    << ", \"peak_bf16_tflops\": " << p.peak_bf16_tflops << ", \"h2d_gbps\": " << p.h2d_gbps
    << ", \"copy_latency_us\": " << p.copy_latency_us << ", \"launch_us\": " << p.launch_us
    << ", \"host_memory_gbps\": " << p.host_memory_gbps << ", \"host_threads\": " << p.host_threads;
  if (p.moe_gbps > 0) {
    o << ", \"moe_gbps\": " << p.moe_gbps;
  }
  o << "}";
  return o.str();
}

}  // namespace wisp
