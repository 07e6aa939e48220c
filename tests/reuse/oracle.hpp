// SPDX-License-Identifier: Apache-2.0
// Brute-force oracles and stream generators for the reuse tests. Deliberately simple and
// independent of the code under test.
#pragma once

#include <wisp/reuse/reuse_distance.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace wisp::testing {

inline constexpr std::uint32_t oracle_cold = reuse_distance_counter::cold;

/// Stack distance of every access: an explicit LRU stack (front = most recent), linear search,
/// move to front. Raw pointer loops: they stay fast in unoptimised and sanitizer builds.
inline std::vector<std::uint32_t> stack_distances(const std::vector<std::uint32_t>& stream) {
  std::vector<std::uint32_t> storage(stream.size() + 1);
  std::uint32_t* const stack = storage.data();
  std::size_t depth = 0;
  std::vector<std::uint32_t> out(stream.size());
  std::uint32_t* result = out.data();
  for (const std::uint32_t key : stream) {
    std::size_t pos = 0;
    while (pos < depth && stack[pos] != key) {
      ++pos;
    }
    *result++ = pos == depth ? oracle_cold : static_cast<std::uint32_t>(pos) + 1;
    if (pos == depth) {
      ++depth;
    }
    for (std::size_t i = pos; i > 0; --i) {  // move to front
      stack[i] = stack[i - 1];
    }
    stack[0] = key;
  }
  return out;
}

/// Call-granular stack distances of a stream of calls (each a list of keys requested together):
/// every key's 1-based position in an explicit LRU stack as it was before its call, then the
/// call's keys moved to the front in call order (a key repeated within a call: 1, moved again).
inline std::vector<std::uint32_t> call_stack_distances(
    const std::vector<std::vector<std::uint32_t>>& calls) {
  std::vector<std::uint32_t> stack;  // front = most recent
  std::vector<std::uint32_t> out;
  for (const auto& call : calls) {
    const std::vector<std::uint32_t> before = stack;
    for (std::size_t i = 0; i < call.size(); ++i) {
      if (std::find(call.begin(), call.begin() + static_cast<std::ptrdiff_t>(i), call[i]) !=
          call.begin() + static_cast<std::ptrdiff_t>(i)) {
        out.push_back(1);
        continue;
      }
      const auto it = std::find(before.begin(), before.end(), call[i]);
      out.push_back(it == before.end() ? oracle_cold
                                       : static_cast<std::uint32_t>(it - before.begin()) + 1);
    }
    for (const std::uint32_t key : call) {
      stack.erase(std::remove(stack.begin(), stack.end(), key), stack.end());
      stack.insert(stack.begin(), key);
    }
  }
  return out;
}

/// An actual LRU cache of `capacity` slots over keys [0, key_space): an intrusive doubly linked
/// list in arrays (no notion of stack distance at all). Raw pointers for unoptimised builds.
class lru_cache_sim {
 public:
  lru_cache_sim(std::uint32_t key_space, std::uint32_t capacity)
      : capacity_(capacity), storage_(3 * std::size_t{key_space}, none) {
    prev_ = storage_.data();
    next_ = prev_ + key_space;
    in_ = next_ + key_space;
  }
  lru_cache_sim(const lru_cache_sim&) = delete;
  lru_cache_sim& operator=(const lru_cache_sim&) = delete;

  /// Returns true on a miss. A miss never evicts a key of `protect` (the current call).
  bool access(std::uint32_t key, const std::vector<std::uint32_t>& protect = {}) {
    if (in_[key] != none) {
      unlink(key);
      push_front(key);
      return false;
    }
    if (capacity_ == 0) {
      return true;
    }
    if (size_ == capacity_) {
      std::uint32_t victim = tail_;
      while (std::find(protect.begin(), protect.end(), victim) != protect.end()) {
        victim = prev_[victim];
      }
      unlink(victim);
      in_[victim] = none;
      --size_;
    }
    push_front(key);
    in_[key] = 1;
    ++size_;
    return true;
  }

 private:
  static constexpr std::uint32_t none = ~0u;
  void unlink(std::uint32_t k) {
    if (prev_[k] != none) {
      next_[prev_[k]] = next_[k];
    } else {
      head_ = next_[k];
    }
    if (next_[k] != none) {
      prev_[next_[k]] = prev_[k];
    } else {
      tail_ = prev_[k];
    }
    prev_[k] = next_[k] = none;
  }
  void push_front(std::uint32_t k) {
    prev_[k] = none;
    next_[k] = head_;
    if (head_ != none) {
      prev_[head_] = k;
    }
    head_ = k;
    if (tail_ == none) {
      tail_ = k;
    }
  }

  std::uint32_t capacity_;
  std::uint32_t size_ = 0;
  std::uint32_t head_ = none;
  std::uint32_t tail_ = none;
  std::vector<std::uint32_t> storage_;
  std::uint32_t* prev_ = nullptr;
  std::uint32_t* next_ = nullptr;
  std::uint32_t* in_ = nullptr;
};

/// Misses of an LRU cache of `capacity` slots that serves `calls` the way wisp's pager does: a
/// miss evicts the least recently used key that the current call does not request (`lru_cache_sim`
/// with the eviction walking past the call's keys). `capacity` must hold a call's distinct keys.
inline std::uint64_t protected_lru_misses(const std::vector<std::vector<std::uint32_t>>& calls,
                                          std::uint32_t key_space, std::uint32_t capacity) {
  lru_cache_sim cache{key_space, capacity};
  std::uint64_t misses = 0;
  for (const auto& call : calls) {
    for (const std::uint32_t key : call) {
      misses += cache.access(key, call) ? 1 : 0;
    }
  }
  return misses;
}

/// Misses of an LRU cache of `capacity` slots over the whole stream.
inline std::uint64_t lru_misses(const std::vector<std::uint32_t>& stream, std::uint32_t key_space,
                                std::uint32_t capacity) {
  lru_cache_sim cache{key_space, capacity};
  std::uint64_t misses = 0;
  const std::uint32_t* p = stream.data();
  for (const std::uint32_t* end = p + stream.size(); p != end; ++p) {
    misses += cache.access(*p) ? 1 : 0;
  }
  return misses;
}

/// Zipf(alpha) over `keys` keys, ranks shuffled onto key ids, by inverse CDF.
class zipf_stream {
 public:
  zipf_stream(std::uint32_t keys, double alpha, std::uint64_t seed) : rng_(seed), ids_(keys) {
    cdf_.resize(keys);
    double sum = 0.0;
    for (std::uint32_t r = 0; r < keys; ++r) {
      sum += 1.0 / std::pow(static_cast<double>(r + 1), alpha);
      cdf_[r] = sum;
    }
    for (double& c : cdf_) {
      c /= sum;
    }
    for (std::uint32_t i = 0; i < keys; ++i) {
      ids_[i] = i;
    }
    std::shuffle(ids_.begin(), ids_.end(), rng_);
  }

  std::uint32_t next() {
    const double u = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    const auto r =
        static_cast<std::size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    return ids_[std::min(r, ids_.size() - 1)];
  }

  std::vector<std::uint32_t> take(std::size_t n) {
    std::vector<std::uint32_t> out(n);
    for (auto& k : out) {
      k = next();
    }
    return out;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<double> cdf_;
  std::vector<std::uint32_t> ids_;
};

}  // namespace wisp::testing
