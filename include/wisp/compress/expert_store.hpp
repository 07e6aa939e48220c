// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `compressed_expert_store`: the host masters of a MoE layer's experts held losslessly
/// compressed (one `compressed_bf16` record per tensor), each expert either only compressed (C)
/// or also full (F), serving a pager's copy plan into caller-provided slot buffers: a miss on an F
/// expert is a raw copy, a miss on a C expert moves its compressed bytes and decodes them, one
/// task per E-chunk on the executor the caller gives (by default on the calling thread).
///
/// What an engine needs from it: `link_bytes(e)` (what a miss of `e` moves across the link:
/// compressed payload for C, raw bytes for F), `apply(plan, slots)` (decode or copy into the
/// slots, in parallel over E-chunks when the executor has threads) and the measured decode time it
/// returns. An engine that models its link charges `link_bytes` on the copy queue and the decode
/// on the consumer side. Slots may be pinned host memory when CUDA is present: the store never
/// allocates them.
/// @code
/// wisp::thread_pool decoders(2);                       // L = 2 decoder threads, the caller's
/// wisp::compressed_expert_store store({.experts = 64, .tensor_elements = {2048 * 1408, ...},
///                                      .e_chunks = 8},
///                                     wisp::huffman_coder{}, wisp::core_coders(),
///                                     decoders.executor());
/// for (int e = 0; e < 64; ++e) store.set_expert(e, weights_of(e));
/// auto r = pager.prepare(layer, topk_ids, tokens, k);
/// wisp::fetch_stats s = store.apply(r.copy_plan, slot_buffer);  // slot_buffer: slots x elements
/// timeline.copy(s.link_bytes);                                   // what crossed the link
/// @endcode
#pragma once

#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/exponent_coder.hpp>
#include <wisp/core/bf16.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/executor.hpp>
#include <wisp/core/topk.hpp>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// @brief How the store holds an expert (ZipMoE's F and C pools).
enum class expert_state : std::uint8_t {
  compressed,  ///< C: only the compressed records; a miss moves them and decodes
  full,        ///< F: also the raw BF16 bytes; a miss is a plain copy
};
/// "compressed", "full" (`to_string`, `from_string`).
template <>
struct enum_names<expert_state> {
  static constexpr std::array<enum_name<expert_state>, 2> values{
      {{expert_state::compressed, "compressed"}, {expert_state::full, "full"}}};
};

/// @brief Shape of a `compressed_expert_store` (its decoder threads are the executor's).
struct expert_store_config {
  std::int32_t experts = 0;                    ///< experts of the layer
  std::vector<std::uint64_t> tensor_elements;  ///< BF16 elements of each tensor of an expert
  std::uint32_t e_chunks = 8;                  ///< K: E-chunks per tensor (decode parallelism)
};

/// @brief What one `apply` did.
struct fetch_stats {
  std::int32_t full_copies = 0;  ///< misses served as raw bytes (F experts)
  std::int32_t decoded = 0;      ///< misses served compressed + decoded (C experts)
  std::uint64_t raw_bytes = 0;   ///< BF16 bytes written into slots
  std::uint64_t link_bytes = 0;  ///< bytes that crossed the link (sum of `link_bytes(e)`)
  double decode_seconds = 0;     ///< wall time of the decode step, measured
};

/// @brief Compressed host masters of one MoE layer that serve copy plans (see the file comment).
///
/// Thread safety: one owner. The tasks it gives the executor only ever touch the records and
/// slot memory of the `apply` call in flight, which returns after they are done; so `apply` must
/// not be called from a task of an executor whose threads its own tasks need (a pool with no
/// thread to spare would deadlock).
class compressed_expert_store {
 public:
  /// Empty store (every expert all-zero, compressed) that decodes with `decoders` on `executor`
  /// (by default on the thread that calls `apply`); the executor must outlive the store.
  /// @throws wisp::logic_error on no experts, no tensors, or K outside [1, 65536].
  compressed_expert_store(expert_store_config config, any_coder coder,
                          coder_set decoders = core_coders(), any_executor executor = {})
      : config_(std::move(config)),
        coder_(std::move(coder)),
        decoders_(std::move(decoders)),
        executor_(std::move(executor)) {
    WISP_EXPECTS(config_.experts >= 1 && !config_.tensor_elements.empty(),
                 "compressed_expert_store: experts ", config_.experts, " and tensors ",
                 config_.tensor_elements.size(), " must be >= 1");
    WISP_EXPECTS(config_.e_chunks >= 1 && config_.e_chunks <= wzbf::max_e_chunks,
                 "compressed_expert_store: E-chunks ", config_.e_chunks, " outside [1, 65536]");
    for (const std::uint64_t n : config_.tensor_elements) {
      tensor_offset_.push_back(elements_);
      elements_ += n;
    }
    const std::vector<bf16> zeros(elements_);
    experts_.resize(static_cast<std::size_t>(config_.experts));
    for (std::int32_t e = 0; e < config_.experts; ++e) {
      set_expert(e, zeros);
    }
  }

  compressed_expert_store(const compressed_expert_store&) = delete;
  compressed_expert_store& operator=(const compressed_expert_store&) = delete;

  /// BF16 elements of one expert (all its tensors, concatenated in `tensor_elements` order).
  [[nodiscard]] std::uint64_t elements_per_expert() const noexcept { return elements_; }
  [[nodiscard]] std::int32_t experts() const noexcept { return config_.experts; }
  [[nodiscard]] const expert_store_config& config() const noexcept { return config_; }

  /// Compresses `values` (`elements_per_expert()` long) as expert `e`'s master, in `state`.
  /// O(elements). @throws wisp::logic_error on a bad id or length (the expert is unchanged).
  void set_expert(std::int32_t e, std::span<const bf16> values,
                  expert_state state = expert_state::compressed) {
    check_expert(e);
    WISP_EXPECTS(values.size() == elements_, "compressed_expert_store::set_expert: ", values.size(),
                 " values for an expert of ", elements_);
    entry fresh;
    for (std::size_t t = 0; t < config_.tensor_elements.size(); ++t) {
      fresh.tensors.push_back(compressed_bf16::compress(
          values.subspan(tensor_offset_[t], config_.tensor_elements[t]), coder_, config_.e_chunks));
      fresh.payload_bytes += fresh.tensors.back().payload_bytes();
    }
    if (state == expert_state::full) {
      fresh.full.assign(values.begin(), values.end());
    }
    experts_[static_cast<std::size_t>(e)] = std::move(fresh);
  }

  /// Moves expert `e` between the C and F states: to F decodes it once (O(elements)), to C
  /// drops the full copy. @throws wisp::logic_error on a bad id; wisp::format_error if decoding
  /// fails (the state is then unchanged).
  void set_state(std::int32_t e, expert_state state) {
    check_expert(e);
    entry& x = experts_[static_cast<std::size_t>(e)];
    if (state == expert_state::compressed) {
      std::vector<bf16>().swap(x.full);
    } else if (x.full.empty() && elements_ > 0) {
      std::vector<bf16> full(elements_);
      decode(e, full);
      x.full = std::move(full);
    }
  }
  [[nodiscard]] expert_state state(std::int32_t e) const {
    check_expert(e);
    return experts_[static_cast<std::size_t>(e)].full.empty() ? expert_state::compressed
                                                              : expert_state::full;
  }

  /// Bytes a miss of `e` moves across the link: raw BF16 bytes for F, the records' SM and
  /// E-chunk bytes (headers excluded) for C. O(1).
  [[nodiscard]] std::uint64_t link_bytes(std::int32_t e) const {
    return state(e) == expert_state::full ? raw_bytes_per_expert()
                                          : experts_[static_cast<std::size_t>(e)].payload_bytes;
  }
  /// BF16 bytes of one expert.
  [[nodiscard]] std::uint64_t raw_bytes_per_expert() const noexcept { return 2 * elements_; }
  /// Host memory the masters take: every record, plus the full copies of F experts.
  [[nodiscard]] std::uint64_t host_bytes() const noexcept {
    std::uint64_t total = 0;
    for (const entry& x : experts_) {
      for (const compressed_bf16& t : x.tensors) {
        total += t.bytes().size();
      }
      total += 2 * x.full.size();
    }
    return total;
  }
  /// Record of tensor `t` of expert `e` (its chunk table gives per-chunk sizes and coders).
  /// @throws wisp::logic_error on a bad id.
  [[nodiscard]] const compressed_bf16& tensor(std::int32_t e, std::size_t t) const {
    check_expert(e);
    WISP_EXPECTS(t < config_.tensor_elements.size(), "compressed_expert_store: tensor ", t, " of ",
                 config_.tensor_elements.size());
    return experts_[static_cast<std::size_t>(e)].tensors[t];
  }

  /// Writes expert `e`'s BF16 values into `out` on the calling thread. O(elements).
  /// @throws wisp::logic_error on a bad id or length; wisp::format_error if a record is corrupt.
  void decode(std::int32_t e, std::span<bf16> out) const {
    check_expert(e);
    WISP_EXPECTS(out.size() == elements_, "compressed_expert_store::decode: output of ", out.size(),
                 " for an expert of ", elements_);
    const scratch_lease scratch(*this);
    const entry& x = experts_[static_cast<std::size_t>(e)];
    for (std::size_t t = 0; t < x.tensors.size(); ++t) {
      x.tensors[t].decompress(out.subspan(tensor_offset_[t], config_.tensor_elements[t]), decoders_,
                              *scratch);
    }
  }

  /// @brief Serves a copy plan: writes each op's expert into `slots` row `op.slot` (rows of
  /// `elements_per_expert()` values): F experts by `memcpy`, C experts by tasks on the executor
  /// (one per E-chunk, so one expert's chunks decode in parallel when it has threads). Returns
  /// once every slot is written. O(plan x elements) work over the executor's threads.
  /// @throws wisp::logic_error (nothing written) on an expert or slot out of range or a slot
  ///   buffer that is not a whole number of rows; wisp::format_error if a record does not decode
  ///   (then the slots of this plan hold unspecified values).
  fetch_stats apply(std::span<const copy_op> plan, std::span<bf16> slots) {
    WISP_EXPECTS(elements_ > 0 && slots.size() % elements_ == 0,
                 "compressed_expert_store::apply: slot buffer of ", slots.size(),
                 " values is not a whole number of experts of ", elements_);
    const auto slot_count = static_cast<std::int64_t>(slots.size() / elements_);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      check_expert(plan[i].expert);
      WISP_EXPECTS(plan[i].slot >= 0 && plan[i].slot < slot_count,
                   "compressed_expert_store::apply: plan[", i, "] slot ", plan[i].slot,
                   " is outside [0, ", slot_count, ")");
    }
    fetch_stats stats;
    const auto start = std::chrono::steady_clock::now();
    batch_state batch;
    try {
      serve(plan, slots, batch, stats);
    } catch (...) {  // a task could not be submitted: let those submitted end before unwinding
      batch.finish();
      throw;
    }
    batch.wait();
    stats.decode_seconds =
        stats.decoded == 0
            ? 0
            : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats;
  }

 private:
  struct entry {
    std::vector<compressed_bf16> tensors;
    std::vector<bf16> full;  // F state: the raw values; empty in C
    std::uint64_t payload_bytes = 0;
  };
  struct task {
    const compressed_bf16* tensor;
    std::uint32_t chunk;
    std::span<bf16> out;
  };
  // The tasks of one `apply` call: how many are still running and the first error.
  struct batch_state {
    std::mutex mutex;
    std::condition_variable done;
    std::size_t pending = 0;
    std::exception_ptr error;

    // Blocks until every task submitted has finished.
    void finish() {
      std::unique_lock lock(mutex);
      done.wait(lock, [this] { return pending == 0; });
    }
    // finish(), then rethrows the first error.
    void wait() {
      finish();
      if (error) {
        std::rethrow_exception(error);
      }
    }
  };
  // A decoder's scratch borrowed from the store for one task (or one `decode`) and returned, so
  // that at most one scratch per thread that ever decoded exists and a steady state allocates
  // nothing. Its Huffman table cache makes the chunks of one tensor share one decode table.
  class scratch_lease {
   public:
    explicit scratch_lease(const compressed_expert_store& store) : store_(store) {
      const std::lock_guard lock(store_.scratch_mutex_);
      if (!store_.free_scratch_.empty()) {
        scratch_ = std::move(store_.free_scratch_.back());
        store_.free_scratch_.pop_back();
      }
      if (scratch_ == nullptr) {  // room to return it first, so that returning cannot throw
        store_.free_scratch_.reserve(store_.scratch_count_ + 1);
        scratch_ = std::make_unique<bf16_decode_scratch>();
        ++store_.scratch_count_;
      }
    }
    scratch_lease(const scratch_lease&) = delete;
    scratch_lease& operator=(const scratch_lease&) = delete;
    ~scratch_lease() {
      const std::lock_guard lock(store_.scratch_mutex_);
      store_.free_scratch_.push_back(std::move(scratch_));  // capacity reserved: no throw
    }
    bf16_decode_scratch& operator*() const noexcept { return *scratch_; }

   private:
    const compressed_expert_store& store_;
    std::unique_ptr<bf16_decode_scratch> scratch_;
  };

  void check_expert(std::int32_t e) const {
    WISP_EXPECTS(e >= 0 && e < config_.experts, "compressed_expert_store: expert ", e,
                 " is outside [0, ", config_.experts, ")");
  }

  // The loop of `apply`: copies F experts, submits the E-chunks of C experts to `batch`.
  void serve(std::span<const copy_op> plan, std::span<bf16> slots, batch_state& batch,
             fetch_stats& stats) {
    for (const copy_op& op : plan) {
      const entry& x = experts_[static_cast<std::size_t>(op.expert)];
      const std::span<bf16> row =
          slots.subspan(static_cast<std::size_t>(op.slot) * elements_, elements_);
      stats.raw_bytes += raw_bytes_per_expert();
      stats.link_bytes += link_bytes(op.expert);
      if (!x.full.empty()) {
        std::memcpy(row.data(), x.full.data(), raw_bytes_per_expert());
        ++stats.full_copies;
        continue;
      }
      ++stats.decoded;
      for (std::size_t t = 0; t < x.tensors.size(); ++t) {
        for (std::uint32_t j = 0; j < config_.e_chunks; ++j) {
          submit(batch,
                 {&x.tensors[t], j, row.subspan(tensor_offset_[t], config_.tensor_elements[t])});
        }
      }
    }
  }

  // Hands task `t` of `batch` to the executor. The task decodes with a borrowed scratch and
  // records its error in the batch; it never throws.
  void submit(batch_state& batch, const task& t) {
    {
      const std::lock_guard lock(batch.mutex);
      ++batch.pending;
    }
    auto run = [this, &batch, t]() noexcept {
      std::exception_ptr error;
      try {
        const scratch_lease scratch(*this);
        t.tensor->decompress_chunk(t.chunk, t.out, *scratch, decoders_);
      } catch (...) {
        error = std::current_exception();
      }
      const std::lock_guard lock(batch.mutex);
      if (error && !batch.error) {
        batch.error = error;
      }
      if (--batch.pending == 0) {
        batch.done.notify_all();  // under the lock: `batch` may go as soon as it is released
      }
    };
    try {
      executor_.execute(run);
    } catch (...) {  // the executor could not take the task: nothing runs it
      const std::lock_guard lock(batch.mutex);
      --batch.pending;
      if (!batch.error) {
        batch.error = std::current_exception();
      }
    }
  }

  expert_store_config config_;
  any_coder coder_;
  coder_set decoders_;
  any_executor executor_;
  std::uint64_t elements_ = 0;
  std::vector<std::uint64_t> tensor_offset_;
  std::vector<entry> experts_;
  mutable std::mutex scratch_mutex_;  // guards the two below
  mutable std::vector<std::unique_ptr<bf16_decode_scratch>> free_scratch_;
  mutable std::size_t scratch_count_ = 0;  // scratches made: free ones plus those lent out
};

}  // namespace wisp
