// SPDX-License-Identifier: Apache-2.0
// `wisp compress`: lossless BF16 compression of weight files (wisp/compress).
//   wisp compress IN -o OUT [--coder huffman|zstd|lz4|lz4hc|raw] [--level N] [--e-chunks K]
//                           [--format auto|safetensors|bf16]
//   wisp compress -d IN -o OUT                       restores the exact original bytes
//   wisp compress --inspect IN [--json] [--f32-as-bf16] [--e-chunks K]
// IN is a safetensors checkpoint (by its .safetensors extension, or --format safetensors: BF16
// tensors are compressed, everything else kept as it is) or a raw little-endian BF16 file.
// --inspect reports per tensor the exponent entropy, the size bound it implies, and for every
// coder of this build the compressed size and the single-thread encode/decode throughput.
#include "commands.hpp"

#include <wisp/compress/archive.hpp>
#include <wisp/compress/bf16.hpp>
#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/safetensors.hpp>
#include <wisp/core/bf16.hpp>
#include <wisp/core/detail/little_endian.hpp>
#if defined(WISP_TOOL_HAVE_ZSTD)
#include <wisp/compress/zstd.hpp>
#endif
#if defined(WISP_TOOL_HAVE_LZ4)
#include <wisp/compress/lz4.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wisp::tool {
namespace {

struct compress_options {
  std::string input;
  std::string output;
  std::string coder = "huffman";
  std::optional<int> level;
  std::uint32_t e_chunks = 8;
  std::string format = "auto";
  bool decompress = false;
  bool inspect = false;
  bool json = false;
  bool f32_as_bf16 = false;
};

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) {
    WISP_FAIL(error, "cannot read ", path);
  }
  std::vector<std::uint8_t> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) {
    WISP_FAIL(error, "reading ", path, " failed");
  }
  return bytes;
}

void write_all(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    WISP_FAIL(error, "writing ", path, " failed");
  }
}

// Decoders for every coder id this build knows.
coder_set decoders() {
  coder_set set = core_coders();
#if defined(WISP_TOOL_HAVE_ZSTD)
  set.add(zstd_coder{});
#endif
#if defined(WISP_TOOL_HAVE_LZ4)
  set.add(lz4_coder{});
#endif
  return set;
}

// The encoder called `name` (with `level` where it has one).
any_coder encoder(const std::string& name, [[maybe_unused]] std::optional<int> level) {
  std::vector<std::pair<std::string, any_coder>> choices{{"raw", raw_coder{}},
                                                         {"huffman", huffman_coder{}}};
#if defined(WISP_TOOL_HAVE_ZSTD)
  choices.emplace_back("zstd", zstd_coder{.level = level.value_or(zstd_coder{}.level)});
#endif
#if defined(WISP_TOOL_HAVE_LZ4)
  choices.emplace_back("lz4", lz4_coder{});
  choices.emplace_back("lz4hc", lz4_coder{.hc_level = level.value_or(9)});
#endif
  std::string names;
  for (const auto& [n, coder] : choices) {
    if (n == name) {
      return coder;
    }
    names += (names.empty() ? "" : ", ") + n;
  }
  WISP_FAIL(logic_error, "unknown or unavailable coder '", name, "'; this build has: ", names);
}

// The coders --inspect compares: every one of this build, zstd at levels 1 (default), 3 and 19.
std::vector<any_coder> inspect_coders() {
  std::vector<any_coder> out{huffman_coder{}};
#if defined(WISP_TOOL_HAVE_ZSTD)
  out.emplace_back(zstd_coder{});
  out.emplace_back(zstd_coder{.level = 3});
  out.emplace_back(zstd_coder{.level = 19});
#endif
#if defined(WISP_TOOL_HAVE_LZ4)
  out.emplace_back(lz4_coder{});
  out.emplace_back(lz4_coder{.hc_level = 9});
#endif
  return out;
}

bool is_safetensors(const compress_options& opt) {
  if (opt.format == "auto") {
    return std::filesystem::path(opt.input).extension() == ".safetensors";
  }
  return opt.format == "safetensors";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct coder_result {
  std::string coder;
  std::uint64_t bytes = 0;
  double encode_seconds = 0;
  double decode_seconds = 0;  // best of three
};

struct tensor_report {
  std::string name;
  std::string dtype;
  std::uint64_t elements = 0;
  exponent_counts histogram{};
  std::vector<coder_result> results;
};

tensor_report inspect_tensor(std::string name, std::string dtype, const std::vector<bf16>& values,
                             const std::vector<any_coder>& coders, const coder_set& dec,
                             std::uint32_t e_chunks) {
  tensor_report r{std::move(name), std::move(dtype), values.size(), exponent_histogram(values), {}};
  std::vector<bf16> out(values.size());
  bf16_decode_scratch scratch;
  for (const any_coder& c : coders) {
    coder_result cr{c.label()};
    auto t0 = std::chrono::steady_clock::now();
    const compressed_bf16 z = compressed_bf16::compress(values, c, e_chunks);
    cr.encode_seconds = seconds_since(t0);
    cr.bytes = z.bytes().size();
    cr.decode_seconds = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      t0 = std::chrono::steady_clock::now();
      z.decompress(out, dec, scratch);
      cr.decode_seconds = std::min(cr.decode_seconds, seconds_since(t0));
    }
    if (out != values) {
      WISP_FAIL(error, "internal error: ", r.name, " did not round-trip with ", c.label());
    }
    r.results.push_back(cr);
  }
  return r;
}

// The report of every tensor --inspect looks at: the BF16 ones (and with --f32-as-bf16 the F32
// ones rounded) of a safetensors file, or the whole raw BF16 file.
std::vector<tensor_report> inspect_file(const compress_options& opt,
                                        const std::vector<any_coder>& coders) {
  const std::vector<std::uint8_t> file = read_all(opt.input);
  const coder_set dec = decoders();
  std::vector<tensor_report> reports;
  if (!is_safetensors(opt)) {
    if (file.size() % 2 != 0) {
      throw format_error(file.size() - 1, opt.input + ": a raw BF16 file must have an even size");
    }
    reports.push_back(inspect_tensor(std::filesystem::path(opt.input).filename().string(), "BF16",
                                     bf16_from_le_bytes(file), coders, dec, opt.e_chunks));
    return reports;
  }
  for (const safetensors_tensor& t : parse_safetensors_header(file).tensors) {
    const std::span<const std::uint8_t> bytes(file.data() + t.begin, t.end - t.begin);
    if (t.dtype == "BF16") {
      reports.push_back(
          inspect_tensor(t.name, t.dtype, bf16_from_le_bytes(bytes), coders, dec, opt.e_chunks));
    } else if (t.dtype == "F32" && opt.f32_as_bf16) {
      std::vector<bf16> v(t.elements());
      for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = to_bf16(std::bit_cast<float>(detail::load_le<std::uint32_t>(bytes.data() + 4 * i)));
      }
      reports.push_back(inspect_tensor(t.name, "F32->BF16", v, coders, dec, opt.e_chunks));
    }
  }
  return reports;
}

// Totals over all tensors: the histogram of every exponent, sizes and times summed.
tensor_report total_of(const std::vector<tensor_report>& reports,
                       const std::vector<any_coder>& coders) {
  tensor_report total{"(all)", "", 0, {}, {}};
  for (const any_coder& c : coders) {
    total.results.push_back({c.label()});
  }
  for (const tensor_report& r : reports) {
    total.elements += r.elements;
    for (std::size_t s = 0; s < 256; ++s) {
      total.histogram[s] += r.histogram[s];
    }
    for (std::size_t i = 0; i < coders.size(); ++i) {
      total.results[i].bytes += r.results[i].bytes;
      total.results[i].encode_seconds += r.results[i].encode_seconds;
      total.results[i].decode_seconds += r.results[i].decode_seconds;
    }
  }
  return total;
}

double ratio(const tensor_report& r, const coder_result& c) {
  return r.elements == 0 ? 0.0 : static_cast<double>(c.bytes) / (2.0 * r.elements);
}
double gbps(const tensor_report& r, double seconds) {
  return seconds <= 0 ? 0.0 : 2.0 * static_cast<double>(r.elements) / seconds / 1e9;
}

void print_inspect_json(const compress_options& opt, const std::vector<tensor_report>& reports,
                        const tensor_report& total, double per_tensor_bound) {
  auto row = [&](const tensor_report& r) {
    nlohmann::ordered_json j;
    j["name"] = r.name;
    if (!r.dtype.empty()) {
      j["dtype"] = r.dtype;
    }
    j["elements"] = r.elements;
    j["exponent_entropy_bits"] = entropy_bits(r.histogram);
    j["entropy_bound_ratio"] = entropy_bound_ratio(r.histogram);
    for (const coder_result& c : r.results) {
      j["coders"][c.coder] = {{"bytes", c.bytes},
                              {"ratio", ratio(r, c)},
                              {"encode_gbps", gbps(r, c.encode_seconds)},
                              {"decode_gbps", gbps(r, c.decode_seconds)}};
    }
    return j;
  };
  nlohmann::ordered_json out;
  out["file"] = opt.input;
  out["e_chunks"] = opt.e_chunks;
  out["tensors"] = nlohmann::ordered_json::array();
  for (const tensor_report& r : reports) {
    out["tensors"].push_back(row(r));
  }
  out["total"] = row(total);
  out["total"]["per_tensor_entropy_bound_ratio"] = per_tensor_bound;
  std::printf("%s\n", out.dump(2).c_str());
}

void print_inspect_table(const compress_options& opt, const std::vector<tensor_report>& reports,
                         const tensor_report& total, double per_tensor_bound) {
  std::printf(
      "%s: %zu BF16 tensor(s), %llu values, K = %u E-chunks; ratio = compressed / raw, "
      "throughput in GB/s of BF16 on one thread\n",
      opt.input.c_str(), reports.size(), static_cast<unsigned long long>(total.elements),
      opt.e_chunks);
  std::printf("%-44s %10s %7s %6s", "tensor", "values", "H(exp)", "bound");
  for (const coder_result& c : total.results) {
    std::printf(" %9s", c.coder.c_str());
  }
  std::printf("\n");
  auto print_row = [&](const tensor_report& r) {
    std::printf("%-44s %10llu %7.3f %6.4f", r.name.substr(0, 44).c_str(),
                static_cast<unsigned long long>(r.elements), entropy_bits(r.histogram),
                entropy_bound_ratio(r.histogram));
    for (const coder_result& c : r.results) {
      std::printf(" %9.4f", ratio(r, c));
    }
    std::printf("\n");
  };
  for (const tensor_report& r : reports) {
    print_row(r);
  }
  print_row(total);
  std::printf("bound with each tensor at its own exponent entropy: %.4f\n", per_tensor_bound);
  std::printf("%-44s %10s %7s %6s", "throughput (encode / decode)", "", "", "");
  for (const coder_result& c : total.results) {
    std::printf(" %4.2f/%4.2f", gbps(total, c.encode_seconds), gbps(total, c.decode_seconds));
  }
  std::printf("\n");
}

void run_inspect(const compress_options& opt) {
  const std::vector<any_coder> coders = inspect_coders();
  const std::vector<tensor_report> reports = inspect_file(opt, coders);
  const tensor_report total = total_of(reports, coders);
  double bound_bytes = 0;  // each tensor at its own entropy
  for (const tensor_report& r : reports) {
    bound_bytes += 2.0 * static_cast<double>(r.elements) * entropy_bound_ratio(r.histogram);
  }
  const double per_tensor_bound = total.elements == 0 ? 0 : bound_bytes / (2.0 * total.elements);
  if (opt.json) {
    print_inspect_json(opt, reports, total, per_tensor_bound);
  } else {
    print_inspect_table(opt, reports, total, per_tensor_bound);
  }
}

void run(const compress_options& opt) {
  if (opt.inspect) {
    run_inspect(opt);
    return;
  }
  if (opt.output.empty()) {
    WISP_FAIL(logic_error, "wisp compress: -o OUT is required unless --inspect is given");
  }
  const std::vector<std::uint8_t> in = read_all(opt.input);
  try {
    if (opt.decompress) {
      write_all(opt.output, bf16_archive::parse(in).restore(decoders()));
      return;
    }
    const bf16_archive a =
        compress_file(in, encoder(opt.coder, opt.level), opt.e_chunks, is_safetensors(opt),
                      std::filesystem::path(opt.input).filename().string());
    const std::vector<std::uint8_t> packed = a.serialize();
    write_all(opt.output, packed);
    std::printf("%s: %llu -> %llu bytes (%.2f%%) with %s, %u E-chunks per tensor\n",
                opt.input.c_str(), static_cast<unsigned long long>(in.size()),
                static_cast<unsigned long long>(packed.size()),
                in.empty() ? 100.0 : 100.0 * static_cast<double>(packed.size()) / in.size(),
                opt.coder.c_str(), opt.e_chunks);
  } catch (const format_error& e) {
    throw e.in_file(opt.input);
  }
}

}  // namespace

void add_compress_command(CLI::App& app) {
  auto opt = std::make_shared<compress_options>();
  auto* cmd = app.add_subcommand(
      "compress", "Lossless BF16 compression of a safetensors or raw BF16 file (.wzar archive)");
  cmd->add_option("input", opt->input, "safetensors checkpoint, raw little-endian BF16, or .wzar")
      ->required();
  cmd->add_option("-o,--output", opt->output, "output file");
  cmd->add_option("--coder", opt->coder, "exponent coder: huffman, zstd, lz4, lz4hc, raw")
      ->capture_default_str();
  cmd->add_option("--level", opt->level, "zstd level (default 1) or lz4hc level (default 9)");
  cmd->add_option("--e-chunks", opt->e_chunks, "E-chunks per tensor, K")
      ->check(CLI::Range(1u, wzbf::max_e_chunks))
      ->capture_default_str();
  cmd->add_option("--format", opt->format, "input format: auto (by extension), safetensors, bf16")
      ->check(CLI::IsMember({"auto", "safetensors", "bf16"}))
      ->capture_default_str();
  auto* d = cmd->add_flag("-d,--decompress", opt->decompress, "restore the original file");
  auto* inspect = cmd->add_flag("--inspect", opt->inspect,
                                "report exponent entropy, ratio per coder and throughput");
  cmd->add_flag("--json", opt->json, "with --inspect: one JSON object");
  cmd->add_flag("--f32-as-bf16", opt->f32_as_bf16,
                "with --inspect: also analyse F32 tensors rounded to BF16 (nearest even)");
  d->excludes(inspect);
  cmd->callback([opt] { run(*opt); });
}

}  // namespace wisp::tool
