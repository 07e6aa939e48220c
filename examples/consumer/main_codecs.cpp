// SPDX-License-Identifier: Apache-2.0
// Uses the wisp::zstd and wisp::lz4 components from an install: a BF16 tensor compressed with
// each coder and restored bit for bit.
#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/lz4.hpp>
#include <wisp/compress/zstd.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  std::vector<wisp::bf16> weights(10000);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    weights[i] = wisp::to_bf16(static_cast<float>(i % 97) * 1e-3f - 0.05f);
  }
  wisp::coder_set decoders = wisp::core_coders();
  decoders.add(wisp::zstd_coder{}).add(wisp::lz4_coder{});
  for (const wisp::any_coder& coder :
       {wisp::any_coder(wisp::zstd_coder{}), wisp::any_coder(wisp::lz4_coder{.hc_level = 9})}) {
    const auto z = wisp::compressed_bf16::compress(weights, coder, 4);
    std::vector<wisp::bf16> back(weights.size());
    z.decompress(back, decoders);
    if (back != weights) {
      std::printf("consumer_codecs: %s did not restore the tensor\n", coder.label().c_str());
      return 1;
    }
    std::printf("consumer_codecs: %s %zu -> %zu bytes\n", coder.label().c_str(), 2 * weights.size(),
                z.bytes().size());
  }
  return 0;
}
