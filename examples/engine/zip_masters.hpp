// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The experts' host masters held losslessly compressed, for the `pager+zip` and `tiered`
/// arms: one `wisp::compressed_expert_store` per layer (each expert's three matrices as
/// `compressed_bf16` records, Huffman-coded exponents: the coder whose decoder also runs in a CUDA
/// kernel).
///
/// A miss of `pager+zip` moves `link_bytes(l, e)` (the SM and E-chunk bytes) across the modelled
/// link instead of the raw expert, and `decode` writes the exact BF16 bytes into the row, so the
/// arm's outputs are byte-identical to every other arm's.
#pragma once

#include "model.hpp"

#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/expert_store.hpp>
#include <wisp/compress/huffman.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace wisp_engine {

/// @brief Every expert of `model_weights`, compressed once (see the file comment). Decoding is
/// const and allocation-light; not thread-safe (one engine thread decodes).
class zip_masters {
 public:
  /// Compresses every expert. O(experts x expert elements). @throws std::bad_alloc.
  explicit zip_masters(const model_weights& w, std::uint32_t e_chunks = 8) {
    const auto H = static_cast<std::uint64_t>(w.cfg.hidden);
    const auto I = static_cast<std::uint64_t>(w.cfg.intermediate);
    const std::size_t elements = w.cfg.expert_bytes() / 2;
    for (std::int32_t l = 0; l < w.cfg.layers; ++l) {
      // One tensor per matrix (gate, up, down), decoded on the engine's thread.
      layers_.push_back(std::make_unique<wisp::compressed_expert_store>(
          wisp::expert_store_config{.experts = w.cfg.experts,
                                    .tensor_elements = {I * H, I * H, H * I},
                                    .e_chunks = e_chunks},
          wisp::huffman_coder{}));
      for (std::int32_t e = 0; e < w.cfg.experts; ++e) {
        const auto* master = reinterpret_cast<const wisp::bf16*>(w.master(l, e));
        layers_.back()->set_expert(e, std::span<const wisp::bf16>(master, elements));
        link_bytes_total_ += layers_.back()->link_bytes(e);
        max_e_bytes_ = std::max(max_e_bytes_, layers_.back()->link_bytes(e) - elements);
      }
    }
    raw_bytes_total_ = w.cfg.all_expert_bytes();
    raw_bytes_per_expert_ = w.cfg.expert_bytes();
    e_chunks_ = e_chunks;
  }

  /// Bytes a miss of expert `e` of layer `l` moves: its SM and E-chunk bytes.
  [[nodiscard]] std::uint64_t link_bytes(std::int32_t l, std::int32_t e) const {
    return layers_[static_cast<std::size_t>(l)]->link_bytes(e);
  }
  /// Writes expert `e` of layer `l`'s exact BF16 bytes into `row` (one expert's bytes).
  /// @throws wisp::format_error if a record does not decode.
  void decode(std::int32_t l, std::int32_t e, std::byte* row) const {
    const auto& store = *layers_[static_cast<std::size_t>(l)];
    store.decode(e, std::span<wisp::bf16>(reinterpret_cast<wisp::bf16*>(row),
                                          store.elements_per_expert()));
  }
  /// E-chunks per tensor (K).
  [[nodiscard]] std::uint32_t e_chunks() const noexcept { return e_chunks_; }
  /// Bytes of one expert's SM chunks (one byte per value: the same for every expert).
  [[nodiscard]] std::uint64_t sm_bytes() const noexcept { return raw_bytes_per_expert_ / 2; }
  /// The most bytes any expert's compressed E-chunks take (its link bytes less its SM bytes).
  [[nodiscard]] std::uint64_t max_e_bytes() const noexcept { return max_e_bytes_; }
  /// Compressed payload over raw bytes, every expert of every layer.
  [[nodiscard]] double ratio() const noexcept {
    return static_cast<double>(link_bytes_total_) / static_cast<double>(raw_bytes_total_);
  }

 private:
  std::vector<std::unique_ptr<wisp::compressed_expert_store>> layers_;
  std::uint64_t link_bytes_total_ = 0;
  std::uint64_t raw_bytes_total_ = 0;
  std::uint64_t raw_bytes_per_expert_ = 0;
  std::uint64_t max_e_bytes_ = 0;
  std::uint32_t e_chunks_ = 0;
};

}  // namespace wisp_engine
