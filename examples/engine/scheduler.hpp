// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The engine's KV block pool and continuous-batching scheduler.
///
/// - `kv_block_pool`: fixed-size KV blocks (`block_tokens` tokens of fp32 K and V for every layer)
///   handed out lowest index first; `resize` grows in place or shrinks after compacting the used
///   blocks below the new size (a failed shrink changes nothing).
/// - `scheduler`: FIFO admission of a session only when the blocks of its current context plus
///   one token fit (head-of-line: no later session overtakes a waiting one, so none starves); a
///   session whose whole context (prompt + max new tokens) can never fit the pool is rejected at
///   submission with a message. While decoding, a session that needs a new block and finds none
///   preempts the most recently admitted running session, whose blocks are freed and whose
///   context is recomputed (prefilled again) when it is readmitted.
#pragma once

#include "index.hpp"

#include <wisp/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace wisp_engine {

/// KV blocks of `block_tokens` tokens that hold `tokens` tokens: `ceil(tokens / block_tokens)`.
[[nodiscard]] constexpr std::uint64_t blocks_for_tokens(std::uint64_t tokens,
                                                        std::uint64_t block_tokens) noexcept {
  return (tokens + block_tokens - 1) / block_tokens;
}

/// @brief KV blocks of `block_floats` floats each, lowest free index first. Not thread-safe.
class kv_block_pool {
 public:
  kv_block_pool(std::size_t blocks, std::size_t block_floats)
      : block_floats_(block_floats), data_(blocks * block_floats), used_(blocks, 0) {}

  [[nodiscard]] std::size_t capacity() const noexcept { return used_.size(); }
  [[nodiscard]] std::size_t used() const noexcept { return in_use_; }
  [[nodiscard]] std::size_t free_blocks() const noexcept { return capacity() - in_use_; }

  /// Takes the lowest free block, or nullopt. O(capacity).
  std::optional<std::int32_t> allocate() {
    for (std::int32_t b = 0; b < count(used_); ++b) {
      if (at(used_, b) == 0) {
        at(used_, b) = 1;
        ++in_use_;
        return b;
      }
    }
    return std::nullopt;
  }
  void release(std::int32_t b) noexcept {
    used_[idx(b)] = 0;
    --in_use_;
  }
  [[nodiscard]] float* block(std::int32_t b) noexcept {
    return data_.data() + idx(b) * block_floats_;
  }

  /// @brief Resizes to `blocks`. Shrinking first moves every used block at or beyond `blocks` to
  /// a free block below it (calling `relocate(from, to)` for each, so that block tables follow);
  /// it fails, changing nothing, when more than `blocks` blocks are in use.
  /// @returns whether the pool now has `blocks` blocks.
  template <class Relocate>
  bool resize(std::size_t blocks, Relocate relocate) {
    if (blocks < in_use_) {
      return false;
    }
    if (blocks < capacity()) {
      std::int32_t to = 0;
      for (auto from = static_cast<std::int32_t>(blocks); from < count(used_); ++from) {
        if (at(used_, from) == 0) {
          continue;
        }
        while (at(used_, to) != 0) {
          ++to;
        }
        std::memcpy(block(to), block(from), block_floats_ * sizeof(float));
        at(used_, to) = 1;
        at(used_, from) = 0;
        relocate(from, to);
      }
    }
    data_.resize(blocks * block_floats_);
    used_.resize(blocks, 0);
    return true;
  }

 private:
  std::size_t block_floats_;
  std::vector<float> data_;
  std::vector<std::uint8_t> used_;
  std::size_t in_use_ = 0;
};

/// @brief One request: a prompt and how many tokens to generate.
struct request {
  std::int32_t id = 0;
  std::vector<std::int32_t> prompt;
  std::int32_t max_new_tokens = 1;
  std::uint64_t trace_offset = 0;  ///< first routing-trace step of this session (trace routing)
};

enum class session_state : std::uint8_t { waiting, running, finished, rejected };

/// @brief A request being served: its tokens so far, KV block table and timings.
struct session {
  request req;
  std::vector<std::int32_t> tokens;  ///< prompt then generated tokens
  std::vector<std::int32_t> blocks;  ///< KV block table
  std::int32_t kv_len = 0;           ///< positions whose K and V are in the blocks
  std::int32_t generated = 0;
  session_state state = session_state::waiting;
  std::uint64_t logits_hash = 1469598103934665603ull;  ///< FNV-1a of every emitted token's logits
  std::string reject_reason;
  double t_first = -1;  ///< seconds from start to the first generated token
  double t_done = -1;
  [[nodiscard]] std::int32_t len() const noexcept { return count(tokens); }
  [[nodiscard]] std::int32_t context() const noexcept {
    return count(req.prompt) + req.max_new_tokens;
  }
};

/// @brief What the scheduler asks the engine to run next.
struct batch_plan {
  bool prefill = false;
  std::vector<session*> sessions;  ///< each runs positions [kv_len, len)
};

/// @brief FIFO continuous batching over a `kv_block_pool`. Not thread-safe.
class scheduler {
 public:
  scheduler(kv_block_pool& pool, std::int32_t block_tokens, std::int32_t max_running)
      : pool_(&pool), block_tokens_(block_tokens), max_running_(max_running) {}

  [[nodiscard]] std::size_t blocks_for(std::int64_t tokens) const noexcept {
    return idx(blocks_for_tokens(idx(tokens), idx(block_tokens_)));
  }

  /// Queues `s`, or rejects it (state `rejected`, `reject_reason` set) when its whole context can
  /// never fit the pool. @returns whether it was queued.
  bool submit(session& s) {
    s.tokens = s.req.prompt;
    if (s.req.prompt.empty() || s.req.max_new_tokens < 1) {
      reject(s, "empty prompt or no tokens to generate");
      return false;
    }
    if (!fits_ever(s)) {
      return false;
    }
    waiting_.push_back(&s);
    return true;
  }

  /// @brief The next batch: newly admitted sessions (a prefill), else every running session (a
  /// decode step, after growing block tables and preempting where the pool is full). Empty when
  /// everything is done.
  batch_plan next() {
    batch_plan plan;
    admit(plan);
    if (!plan.sessions.empty()) {
      plan.prefill = true;
      return plan;
    }
    // Decode: every running session needs room for one more position.
    for (std::size_t i = 0; i < running_.size(); ++i) {
      session* s = running_[i];
      while (blocks_for(s->len()) > s->blocks.size()) {
        if (auto b = pool_->allocate()) {
          s->blocks.push_back(*b);
          continue;
        }
        session* victim = running_.back();  // the most recently admitted
        preempt(victim);
        ++preemptions_;
        if (victim == s) {
          break;
        }
      }
    }
    plan.sessions = running_;
    return plan;
  }

  /// Marks `s` finished and frees its blocks.
  void finish(session& s, double now) {
    release_blocks(s);
    s.state = session_state::finished;
    s.t_done = now;
    running_.erase(std::find(running_.begin(), running_.end(), &s));
  }

  /// Blocks that running and admissible waiting sessions want for their whole context: the KV
  /// demand an online controller sizes the pool for.
  [[nodiscard]] std::size_t kv_demand() const {
    std::size_t d = 0;
    for (const session* s : running_) {
      d += blocks_for(s->context());
    }
    std::size_t slots = idx(max_running_) - running_.size();
    for (const session* s : waiting_) {
      if (slots-- == 0) {
        break;
      }
      d += blocks_for(s->context());
    }
    return d;
  }

  /// Rewrites block tables after the pool moved block `from` to `to`.
  void relocate(std::int32_t from, std::int32_t to) {
    for (session* s : running_) {
      std::replace(s->blocks.begin(), s->blocks.end(), from, to);
    }
  }

  [[nodiscard]] bool idle() const noexcept { return waiting_.empty() && running_.empty(); }
  [[nodiscard]] std::size_t running() const noexcept { return running_.size(); }
  [[nodiscard]] std::size_t waiting() const noexcept { return waiting_.size(); }
  [[nodiscard]] std::uint64_t preemptions() const noexcept { return preemptions_; }

 private:
  void reject(session& s, std::string why) {
    s.state = session_state::rejected;
    s.reject_reason = "session " + std::to_string(s.req.id) + " rejected: " + std::move(why);
  }
  bool fits_ever(session& s) {
    const std::size_t need = blocks_for(s.context());
    if (need > pool_->capacity()) {
      reject(s, "its context of " + std::to_string(s.context()) + " tokens needs " +
                    std::to_string(need) + " KV blocks of " + std::to_string(block_tokens_) +
                    " tokens but the pool holds only " + std::to_string(pool_->capacity()));
      return false;
    }
    return true;
  }
  void admit(batch_plan& plan) {
    while (!waiting_.empty() && running_.size() < idx(max_running_)) {
      session* s = waiting_.front();
      if (!fits_ever(*s)) {  // the pool may have shrunk since it was queued
        waiting_.pop_front();
        continue;
      }
      const std::size_t need = blocks_for(s->len() + 1);
      if (need > pool_->free_blocks()) {
        break;  // head-of-line: nobody overtakes the oldest waiting session
      }
      while (s->blocks.size() < need) {
        s->blocks.push_back(*pool_->allocate());
      }
      waiting_.pop_front();
      s->state = session_state::running;
      running_.push_back(s);
      plan.sessions.push_back(s);
    }
  }
  void release_blocks(session& s) {
    for (const std::int32_t b : s.blocks) {
      pool_->release(b);
    }
    s.blocks.clear();
    s.kv_len = 0;
  }
  void preempt(session* s) {
    release_blocks(*s);
    s->state = session_state::waiting;
    running_.pop_back();
    waiting_.push_front(s);
  }

  kv_block_pool* pool_;
  std::int32_t block_tokens_;
  std::int32_t max_running_;
  std::deque<session*> waiting_;
  std::vector<session*> running_;  // in admission order
  std::uint64_t preemptions_ = 0;
};

}  // namespace wisp_engine
