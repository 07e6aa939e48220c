// SPDX-License-Identifier: Apache-2.0
// The CUDA recovery and Huffman kernels against the host paths: every BF16 pattern, lengths that
// are not multiples of the vector width, misaligned buffers, and real Huffman E-chunks decoded
// one sub-stream per thread. Skips without a GPU.
#include <wisp/compress/bf16.hpp>
#include <wisp/compress/huffman.hpp>
#include <wisp/cuda/bf16_recover.cuh>
#include <wisp/cuda/runtime.cuh>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace {

template <class T>
struct device_buffer {
  T* ptr = nullptr;
  explicit device_buffer(std::size_t n) { WISP_CUDA_TRY(cudaMalloc(&ptr, n * sizeof(T) + 64)); }
  ~device_buffer() { cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

#define SKIP_WITHOUT_GPU()                            \
  if (wisp::cuda::device_count() == 0) {              \
    GTEST_SKIP() << "no CUDA device on this machine"; \
  }

TEST(Bf16RecoverKernel, MatchesTheHostRuleForEveryPatternLengthAndAlignment) {
  SKIP_WITHOUT_GPU();
  std::vector<wisp::bf16> values(65536 * 3 + 13);
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i].bits = static_cast<std::uint16_t>(i);  // wraps: every pattern thrice
  }
  std::shuffle(values.begin(), values.end(), std::mt19937_64(1));
  std::vector<std::uint8_t> sm(values.size()), ex(values.size());
  wisp::split_bf16(values, sm, ex);
  device_buffer<std::uint8_t> d_sm(values.size()), d_ex(values.size());
  device_buffer<std::uint16_t> d_out(values.size());
  for (const std::size_t offset : {0u, 1u, 3u}) {  // 1 and 3 misalign every buffer
    const std::vector<std::size_t> lengths = {0, 1, 15, 16, 17, 4095, 65536, values.size() - 3};
    for (const std::size_t n : lengths) {
      WISP_CUDA_TRY(cudaMemcpy(d_sm.ptr + offset, sm.data(), n, cudaMemcpyHostToDevice));
      WISP_CUDA_TRY(cudaMemcpy(d_ex.ptr + offset, ex.data(), n, cudaMemcpyHostToDevice));
      WISP_CUDA_TRY(cudaMemset(d_out.ptr, 0xEE, (n + offset + 8) * 2));
      wisp::cuda::recover_bf16(d_sm.ptr + offset, d_ex.ptr + offset, d_out.ptr + offset, n);
      std::vector<std::uint16_t> back(n + offset + 8);
      WISP_CUDA_TRY(cudaMemcpy(back.data(), d_out.ptr, back.size() * 2, cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(back[offset + i], values[i].bits)
            << "offset " << offset << " n " << n << " i " << i;
      }
      EXPECT_EQ(back[offset + n], 0xEEEE) << "wrote past the end";
    }
  }
}

TEST(HuffmanKernel, DecodesSubStreamsLikeTheHost) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(2);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const std::size_t n = 1'000'003;
  std::vector<std::uint8_t> symbols(n);
  for (std::uint8_t& s : symbols) {
    s = wisp::bf16_exponent(wisp::to_bf16(normal(rng)));
  }
  std::vector<std::uint8_t> enc;
  wisp::huffman_coder{.block = 1024}.encode(symbols, enc);
  const wisp::huffman_chunk chunk(enc, n);
  // Sub-stream end offsets follow the header (mode, first, last, lengths, block); data follows.
  const std::size_t streams = chunk.substreams();
  const std::size_t offsets_at = 3 + (std::size_t{enc[2]} - enc[1] + 2) / 2 + 4;
  std::vector<std::uint32_t> ends(streams);
  std::memcpy(ends.data(), enc.data() + offsets_at, 4 * streams);
  const std::uint8_t* data = enc.data() + offsets_at + 4 * streams;
  const std::size_t bytes = enc.size() - (offsets_at + 4 * streams);
  device_buffer<wisp::huffman_table> d_table(1);
  device_buffer<std::uint8_t> d_data(bytes), d_out(n);
  device_buffer<std::uint32_t> d_ends(streams);
  device_buffer<int> d_bad(1);
  WISP_CUDA_TRY(
      cudaMemcpy(d_table.ptr, &chunk.table(), sizeof(wisp::huffman_table), cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaMemcpy(d_data.ptr, data, bytes, cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaMemcpy(d_ends.ptr, ends.data(), 4 * streams, cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaMemset(d_bad.ptr, 0, sizeof(int)));
  const auto blocks = static_cast<unsigned>((streams + 127) / 128);
  wisp::cuda::detail::decode_huffman_kernel<<<blocks, 128>>>(
      d_table.ptr, d_data.ptr, bytes, d_ends.ptr, streams, 1024, n, d_out.ptr, d_bad.ptr);
  WISP_CUDA_TRY(cudaGetLastError());
  std::vector<std::uint8_t> back(n);
  int bad = 0;
  WISP_CUDA_TRY(cudaMemcpy(back.data(), d_out.ptr, n, cudaMemcpyDeviceToHost));
  WISP_CUDA_TRY(cudaMemcpy(&bad, d_bad.ptr, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(back, symbols);
}

}  // namespace
