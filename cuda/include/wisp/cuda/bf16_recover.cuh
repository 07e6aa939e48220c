// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Device side of lossless BF16 compression: the memory-coalesced recovery kernel
/// (SM bytes + exponent bytes -> BF16) and a Huffman E-chunk decoding kernel, both built on the
/// `WISP_HOST_DEVICE` rules of `<wisp/compress/bf16.hpp>` and `<wisp/compress/huffman.hpp>` that
/// the host paths use. nvcc only.
///
/// Recovery: each thread handles 16 consecutive elements: one 16-byte load of SM bytes, one of
/// exponents, the element rule in registers, two 16-byte stores, so a warp reads 2 x 512 and
/// writes 1024 contiguous bytes per step. Unaligned buffers or a ragged tail take a per-element
/// path with the same rule.
/// @code
/// wisp::cuda::recover_bf16(d_sm, d_exponents, d_out, n, stream);   // async on `stream`
/// @endcode
#pragma once

#include <wisp/compress/bf16.hpp>
#include <wisp/compress/huffman.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/cuda/runtime.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace wisp::cuda {

namespace detail {

inline constexpr unsigned recover_threads = 256;
inline constexpr std::size_t recover_per_thread = 16;

/// Grid-stride recovery; vector path when all three pointers are 16-byte aligned.
__global__ void recover_bf16_kernel(const std::uint8_t* __restrict__ sm,
                                    const std::uint8_t* __restrict__ exponents,
                                    std::uint16_t* __restrict__ out, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool aligned =
      ((reinterpret_cast<std::uintptr_t>(sm) | reinterpret_cast<std::uintptr_t>(exponents) |
        reinterpret_cast<std::uintptr_t>(out)) &
       15u) == 0;
  const std::size_t vectors = aligned ? n / recover_per_thread : 0;
  for (std::size_t v = first; v < vectors; v += stride) {
    const uint4 s = reinterpret_cast<const uint4*>(sm)[v];
    const uint4 e = reinterpret_cast<const uint4*>(exponents)[v];
    const std::uint32_t sw[4] = {s.x, s.y, s.z, s.w};
    const std::uint32_t ew[4] = {e.x, e.y, e.z, e.w};
    std::uint32_t o[8];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const auto lo = bf16_join(static_cast<std::uint8_t>(sw[w] >> (16 * h)),
                                  static_cast<std::uint8_t>(ew[w] >> (16 * h)));
        const auto hi = bf16_join(static_cast<std::uint8_t>(sw[w] >> (16 * h + 8)),
                                  static_cast<std::uint8_t>(ew[w] >> (16 * h + 8)));
        o[2 * w + h] =
            static_cast<std::uint32_t>(lo.bits) | (static_cast<std::uint32_t>(hi.bits) << 16);
      }
    }
    uint4* dst = reinterpret_cast<uint4*>(out) + 2 * v;
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
  for (std::size_t i = vectors * recover_per_thread + first; i < n; i += stride) {
    out[i] = bf16_join(sm[i], exponents[i]).bits;
  }
}

/// One thread per Huffman sub-stream: the host's lane, run on the device. Sets `*bad` to 1 if a
/// sub-stream is not exactly the encoding of its symbols.
__global__ void decode_huffman_kernel(const huffman_table* table, const std::uint8_t* data,
                                      std::size_t data_bytes, const std::uint32_t* ends,
                                      std::size_t substreams, std::uint32_t block,
                                      std::size_t symbols, std::uint8_t* out, int* bad) {
  const std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= substreams) {
    return;
  }
  const std::size_t begin = j == 0 ? 0 : ends[j - 1];
  const std::size_t first = j * block;
  const std::size_t last = first + block < symbols ? first + block : symbols;
  huffman_lane lane(data, data_bytes, begin, out + first, out + last);
  lane.run(*table);
  if (!lane.ended_cleanly(ends[j] - begin)) {
    *bad = 1;
  }
}

}  // namespace detail

/// @brief Recovers `n` BF16 values into `out` from device buffers of SM and exponent bytes,
/// asynchronously on `stream`. O(n) memory traffic: 2 bytes read and 2 written per value.
/// @throws wisp::cuda_error if the launch fails.
inline void recover_bf16(const std::uint8_t* sm, const std::uint8_t* exponents, std::uint16_t* out,
                         std::size_t n, cudaStream_t stream = nullptr) {
  if (n == 0) {
    return;
  }
  int device = 0;
  int sms = 0;
  WISP_CUDA_TRY(cudaGetDevice(&device));
  WISP_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t work = (n + detail::recover_per_thread - 1) / detail::recover_per_thread;
  const std::size_t wanted = (work + detail::recover_threads - 1) / detail::recover_threads;
  const auto blocks = static_cast<unsigned>(wanted < 8u * sms ? wanted : 8u * sms);
  detail::recover_bf16_kernel<<<blocks, detail::recover_threads, 0, stream>>>(sm, exponents, out,
                                                                              n);
  WISP_CUDA_TRY(cudaGetLastError());
}

}  // namespace wisp::cuda
