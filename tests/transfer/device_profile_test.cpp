// SPDX-License-Identifier: Apache-2.0
// device_profile: the presets are valid and survive the file format; the roofline against
// hand-computed times; every bad profile refused naming the member and value.
#include "support/expect_error.hpp"

#include <wisp/transfer/device_profile.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace wisp {
namespace {

using test::expect_error;

const std::string good =
    R"({"name": "card", "source": "a \"quoted\" note", "device_memory_gbps": 1000,
        "peak_bf16_tflops": 100, "h2d_gbps": 25, "copy_latency_us": 10, "launch_us": 4,
        "host_memory_gbps": 50, "host_threads": 8})";

std::string with(const std::string& member, const std::string& value) {
  std::string doc = good;
  const auto at = doc.find("\"" + member + "\": ");
  const auto from = at + member.size() + 4;
  const auto to = doc.find_first_of(",}", from);
  return doc.replace(from, to - from, value);
}

TEST(device_profile, every_preset_is_valid_and_round_trips_through_json) {
  for (const std::string_view name : device_profile_preset_names()) {
    const device_profile p = device_profile_preset(name);
    EXPECT_EQ(p.name, name);
    EXPECT_FALSE(p.source.empty()) << name;
    p.validate();
    EXPECT_EQ(parse_device_profile(to_json(p)), p) << name;
  }
  device_profile measured = device_profile_preset("h100-pcie");
  measured.moe_gbps = 1234.5678901234;
  measured.source = "line\nbreak and \\ backslash";
  EXPECT_EQ(parse_device_profile(to_json(measured)), measured);
}

TEST(device_profile, the_consumer_preset_gives_the_copy_to_compute_ratio_of_its_datasheet) {
  // A 9 MiB expert (Qwen3-30B-A3B) crosses PCIe 4.0 in ~0.38 ms; the layer's 8 experts are read
  // from device memory in ~0.075 ms.
  const device_profile p = device_profile_preset("rtx-4090");
  const double expert = 9.0 * 1024 * 1024;
  EXPECT_NEAR(expert / (p.h2d_gbps * 1e9), 0.000377, 0.000001);
  EXPECT_NEAR(8 * expert / (p.device_memory_gbps * 1e9), 0.0000749, 0.0000001);
}

TEST(device_profile, the_roofline_takes_the_larger_bound_plus_one_launch) {
  const device_profile p = parse_device_profile(good);
  // 1 MB at 1000 GB/s = 1 us; 1e6 FLOP at 100 TFLOP/s = 0.01 us: memory bound, + 4 us launch.
  EXPECT_DOUBLE_EQ(p.device_seconds(1e6, 1e6), 1e-6 + 4e-6);
  // 1e9 FLOP at 100 TFLOP/s = 10 us beats 1 us of bytes: compute bound.
  EXPECT_DOUBLE_EQ(p.device_seconds(1e6, 1e9), 10e-6 + 4e-6);
  EXPECT_DOUBLE_EQ(p.moe_seconds(1e6, 0), p.device_seconds(1e6, 0));  // no measured MoE rate
  device_profile m = p;
  m.moe_gbps = 500;
  EXPECT_DOUBLE_EQ(m.moe_seconds(1e6, 0), 2e-6 + 4e-6);
  EXPECT_DOUBLE_EQ(p.host_seconds(1e6), 1e6 / 50e9);
  EXPECT_DOUBLE_EQ(p.link().copy_seconds(1000000), 10e-6 + 1e6 / 25e9);
}

TEST(device_profile, bad_profiles_are_refused_naming_the_member_and_value) {
  using E = format_error;
  expect_error<E>([] { (void)parse_device_profile(with("h2d_gbps", "-3")); }, "\"h2d_gbps\"",
                  "must be > 0, got -3");
  expect_error<E>([] { (void)parse_device_profile(with("launch_us", "0")); }, "\"launch_us\"",
                  "got 0");
  expect_error<E>([] { (void)parse_device_profile(with("peak_bf16_tflops", "\"fast\"")); },
                  "\"peak_bf16_tflops\"", "must be a number, got \"fast\"");
  expect_error<E>([] { (void)parse_device_profile(with("host_threads", "2.5")); },
                  "\"host_threads\"", "whole number", "2.5");
  expect_error<E>([] { (void)parse_device_profile(with("name", "7")); }, "\"name\"",
                  "must be a string, got 7");
  expect_error<E>([] { (void)parse_device_profile(with("launch_us", "null")); }, "\"launch_us\"",
                  "must be a number, got null");
  expect_error<E>([] { (void)parse_device_profile(with("name", "\"\"")); }, "\"name\"",
                  "must not be empty");
  std::string moe = good;
  moe.insert(1, "\"moe_gbps\": -1, ");
  expect_error<E>([&] { (void)parse_device_profile(moe); }, "\"moe_gbps\"", ">= 0, got -1");
  std::string missing = good;
  missing.erase(missing.find("\"copy_latency_us\""),
                std::string("\"copy_latency_us\": 10, ").size());
  expect_error<E>([&] { (void)parse_device_profile(missing, "my.json"); }, "my.json",
                  "\"copy_latency_us\" is missing");
  std::string unknown = good;
  unknown.insert(1, "\"pcie_gen\": 4, ");
  expect_error<E>([&] { (void)parse_device_profile(unknown); }, "\"pcie_gen\"",
                  "not a device profile member");
  expect_error<E>([] { (void)parse_device_profile("[1, 2]"); }, "must be a JSON object");
  expect_error<E>([] { (void)parse_device_profile("{\"name\": ", "p.json"); }, "p.json");
  expect_error([] { (void)device_profile_preset("rtx-5090"); }, "unknown device profile 'rtx-5090'",
               "rtx-4090", "h100-pcie");
  expect_error([] { (void)device_profile_named("no/such/file.json"); }, "no/such/file.json");
  device_profile p = parse_device_profile(good);
  p.host_threads = 0;
  expect_error([&] { p.validate(); }, "host_threads must be >= 1, got 0");
}

TEST(device_profile, a_file_or_a_preset_by_name) {
  const auto path = std::filesystem::temp_directory_path() / "wisp_device_profile_test.json";
  {
    std::ofstream out(path);
    out << good;
  }
  EXPECT_EQ(device_profile_named(path.string()), parse_device_profile(good));
  EXPECT_EQ(load_device_profile(path).name, "card");
  EXPECT_EQ(device_profile_named("l4"), device_profile_preset("l4"));
  std::filesystem::remove(path);
  expect_error<error>([&] { (void)load_device_profile(path); }, "cannot open");
}

}  // namespace
}  // namespace wisp
