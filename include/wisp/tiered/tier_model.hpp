// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The probabilistic model behind the compression-aware tiers (ZipMoE, seeds/001 §3.4 and
/// Appendices C-D): selection probabilities fitted to rank marginals, the hit pattern of a layer
/// call over the F/C/S/E pools, the makespan estimate of one pattern and the planner that sizes
/// the pools under a memory budget.
///
/// **Ranks.** Experts are abstracted by popularity rank: `f[r]` is the probability that the rank-r
/// expert (0 = most frequent) is among the `k` experts a layer call selects, so `sum f = k`.
///
/// **Max-entropy model.** Among all distributions over k-subsets with those marginals, the one of
/// maximum entropy is the conditional Poisson design `P(S) ∝ prod_{i in S} w_i` (Appendix D).
/// `fit_selection_probabilities` finds it by the modified iterative proportional fitting of Chen,
/// Dempster and Liu (1994): with `pi_i(w) = w_i R(k-1, N \ {i}) / R(k, N)` the design's inclusion
/// probabilities (`R(n, C)` the elementary symmetric polynomial of the weights of `C`), iterate
/// `w_i <- w_i f_i / pi_i(w)` from `w_i = f_i / (1 - f_i)`; the result is reported as
/// `q_i = c w_i / (1 + c w_i)`, with the scale `c` chosen so that `sum q = k`. Independent
/// Bernoulli(q_i) draws conditioned on exactly k successes are then that design.
///
/// **Hit pattern.** Pools are mapped onto ranks in the order F, C, S, E (pool p takes the next
/// `S_p` ranks); the remaining ranks form the miss pool M. `Phi_X(h)` is the Poisson-binomial
/// probability of exactly h successes among the ranks of X (Algorithm 2's DP), and
///   `P(h_F, h_C, h_S, h_E | k) = Phi_M(k - sum h) / Phi_N(k) * prod_p Phi_p(h_p)`.
///
/// **Makespan of a pattern** (Algorithm 3), with `m = k - sum h` misses, n tensors per expert, K
/// E-chunks per tensor, SM-chunk read u, E-chunk read v, E-chunk decode c, L decode threads:
///   `n_SM = n (h_E + m)`, `n_E = n K (h_S + m)`, `n_D = n K (k - h_F)`,
///   `T = max(n_SM u + n_E v, (n_E v + n_D c) / L)`.
///
/// **Planner** (Algorithm 4): every split of the budget among the enabled pools on a grid of step
/// `delta` (ratios summing to 1), each pool holding `floor(ratio x budget / bytes per expert in
/// that pool)` experts (no more than the ranks left), scored by the expected makespan
/// `sum_h P(h) T(h)`; the lowest wins.
/// @code
/// std::vector<double> f = ...;                       // rank marginals, sum = k
/// auto fit = wisp::fit_selection_probabilities(f, 6);
/// wisp::tier_costs costs{.sm_read = 1e-3, .e_read = 0.67e-3 / 8, .decode = 0.2e-3,
///                        .threads = 6, .e_chunks = 8, .tensors = 3};
/// wisp::tier_plan plan = wisp::plan_tiers({.q = fit.q, .k = 6, .budget_bytes = 16 * full,
///                                          .bytes = {full, comp, sm, e}, .costs = costs});
/// // plan.sizes = {S_F, S_C, S_S, S_E}, plan.expected_seconds
/// @endcode
#pragma once

#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief The compression states of a cached expert, in hierarchy order F ≺ C ≺ S ≺ E.
enum class tier : std::uint8_t {
  full = 0,        ///< F: the BF16 tensors
  compressed = 1,  ///< C: SM chunks and compressed E-chunks
  sm = 2,          ///< S: SM chunks only (E-chunks are read and decoded on a hit)
  e = 3,           ///< E: compressed E-chunks only (SM chunks are read on a hit)
};
/// Number of pools.
inline constexpr std::size_t tier_count = 4;
/// One letter per pool: "F", "C", "S", "E" (`to_string`, `from_string`).
template <>
struct enum_names<tier> {
  static constexpr std::array<enum_name<tier>, tier_count> values{
      {{tier::full, "F"}, {tier::compressed, "C"}, {tier::sm, "S"}, {tier::e, "E"}}};
};
/// @deprecated One letter per pool: `to_string(t)`.
[[deprecated("use wisp::to_string(tier)")]] [[nodiscard]] constexpr std::string_view tier_name(
    tier t) noexcept {
  return to_string(t);
}

/// @brief Where a requested expert was found: one of the pools, or nowhere (a miss). The pool
/// values equal their `tier`'s.
enum class residency : std::uint8_t { full = 0, compressed = 1, sm = 2, e = 3, miss = 4 };
/// The pool's letter, or "miss" (`to_string`, `from_string`).
template <>
struct enum_names<residency> {
  static constexpr std::array<enum_name<residency>, 5> values{{{residency::full, "F"},
                                                               {residency::compressed, "C"},
                                                               {residency::sm, "S"},
                                                               {residency::e, "E"},
                                                               {residency::miss, "miss"}}};
};

/// Experts per pool, indexed by `tier` (S_F, S_C, S_S, S_E).
using tier_sizes = std::array<std::int32_t, tier_count>;

/// @brief Hits of one layer call per pool (h_F, h_C, h_S, h_E); the misses are `k - total()`.
struct hit_pattern {
  std::array<std::int32_t, tier_count> hits{};
  [[nodiscard]] constexpr std::int32_t total() const noexcept {
    return hits[0] + hits[1] + hits[2] + hits[3];
  }
  friend constexpr bool operator==(const hit_pattern&, const hit_pattern&) = default;
};

/// @brief Result of `fit_selection_probabilities`.
struct selection_fit {
  std::vector<double> q;        ///< selection probabilities, `sum q = k`
  std::int32_t iterations = 0;  ///< proportional-fitting rounds made
  double residual = 0.0;        ///< max_i |pi_i(q) - f_i| at the end
};

/// @brief Poisson-binomial distribution (Algorithm 2): `Phi(h)`, the probability of exactly h
/// successes among independent Bernoulli(`q[i]`), for h in [0, max_hits] (higher counts are not
/// computed; the values below are exact regardless). O(|q| x max_hits). Allocates the result.
/// @throws wisp::logic_error if `max_hits < 0` or a q is outside [0, 1].
[[nodiscard]] inline std::vector<double> poisson_binomial(std::span<const double> q,
                                                          std::int32_t max_hits) {
  WISP_EXPECTS(max_hits >= 0, "poisson_binomial: max_hits must be >= 0, got ", max_hits);
  std::vector<double> phi(static_cast<std::size_t>(max_hits) + 1, 0.0);
  phi[0] = 1.0;
  std::size_t reach = 0;  // highest h with a nonzero entry so far
  for (std::size_t i = 0; i < q.size(); ++i) {
    const double p = q[i];
    WISP_EXPECTS(p >= 0.0 && p <= 1.0, "poisson_binomial: q[", i, "] = ", p, " is outside [0, 1]");
    reach = std::min<std::size_t>(reach + 1, phi.size() - 1);
    for (std::size_t h = reach; h >= 1; --h) {
      phi[h] = phi[h] * (1.0 - p) + phi[h - 1] * p;
    }
    phi[0] *= 1.0 - p;
  }
  return phi;
}

/// @brief Inclusion probabilities of the conditional design: `pi_i = P(i selected | exactly k
/// successes)` under independent Bernoulli(`q`). O(|q| x k^2) with prefix and suffix DPs (every
/// intermediate a probability, so nothing overflows). Allocates.
/// @throws wisp::logic_error if k is outside [0, |q|], a q is outside [0, 1], or exactly k
///   successes has probability 0.
[[nodiscard]] inline std::vector<double> inclusion_probabilities(std::span<const double> q,
                                                                 std::int32_t k) {
  const auto n = q.size();
  WISP_EXPECTS(k >= 0 && static_cast<std::size_t>(k) <= n, "inclusion_probabilities: k = ", k,
               " is outside [0, ", n, "]");
  const auto width = static_cast<std::size_t>(k) + 1;
  // prefix[i * width + j] = P(j successes among q[0..i)); suffix likewise among q[i..n).
  std::vector<double> prefix((n + 1) * width, 0.0);
  std::vector<double> suffix((n + 1) * width, 0.0);
  prefix[0] = 1.0;
  suffix[n * width] = 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    WISP_EXPECTS(q[i] >= 0.0 && q[i] <= 1.0, "inclusion_probabilities: q[", i, "] = ", q[i],
                 " is outside [0, 1]");
    for (std::size_t j = 0; j < width; ++j) {
      prefix[(i + 1) * width + j] =
          prefix[i * width + j] * (1.0 - q[i]) + (j > 0 ? prefix[i * width + j - 1] * q[i] : 0.0);
    }
  }
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t j = 0; j < width; ++j) {
      suffix[i * width + j] = suffix[(i + 1) * width + j] * (1.0 - q[i]) +
                              (j > 0 ? suffix[(i + 1) * width + j - 1] * q[i] : 0.0);
    }
  }
  const double total = prefix[n * width + static_cast<std::size_t>(k)];
  WISP_EXPECTS(total > 0.0, "inclusion_probabilities: exactly ", k,
               " successes has probability 0 under these q");
  std::vector<double> pi(n, 0.0);
  if (k == 0) {
    return pi;
  }
  for (std::size_t i = 0; i < n; ++i) {
    double others = 0.0;  // P(k - 1 successes among every q but q[i])
    for (std::size_t j = 0; j < width - 1; ++j) {
      others += prefix[i * width + j] * suffix[(i + 1) * width + (width - 2 - j)];
    }
    pi[i] = q[i] * others / total;
  }
  return pi;
}

namespace detail {
// The scale c with sum c w / (1 + c w) = k (the sum increases with c), by bisection on log c.
inline std::vector<double> probabilities_summing_to(std::span<const double> w, std::int32_t k) {
  auto sum_at = [&](double c) {
    double s = 0.0;
    for (const double x : w) {
      s += c * x / (1.0 + c * x);
    }
    return s;
  };
  double lo = -60.0;
  double hi = 60.0;
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (sum_at(std::exp(mid)) < k ? lo : hi) = mid;
  }
  const double c = std::exp(0.5 * (lo + hi));
  std::vector<double> q(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    q[i] = c * w[i] / (1.0 + c * w[i]);
  }
  return q;
}
}  // namespace detail

/// @brief Fits the maximum-entropy selection model to rank marginals `f` (the modified
/// iterative proportional fitting of the file description) until every implied marginal is
/// within `tolerance` of its `f`. O(iterations x |f| x k^2).
/// @throws wisp::logic_error if k is outside [1, |f|), an f is outside [0, 1), `sum f` differs
///   from k by more than 1e-6 k, or the fit does not reach `tolerance` in `max_iterations`.
[[nodiscard]] inline selection_fit fit_selection_probabilities(
    std::span<const double> f, std::int32_t k, double tolerance = 1e-9,
    std::int32_t max_iterations = 20000) {
  const auto n = f.size();
  WISP_EXPECTS(k >= 1 && static_cast<std::size_t>(k) < n, "fit_selection_probabilities: k = ", k,
               " must be in [1, ", n, ") (the number of marginals)");
  WISP_EXPECTS(tolerance > 0.0, "fit_selection_probabilities: tolerance must be > 0, got ",
               tolerance);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    WISP_EXPECTS(f[i] >= 0.0 && f[i] < 1.0, "fit_selection_probabilities: f[", i, "] = ", f[i],
                 " is outside [0, 1)");
    sum += f[i];
  }
  WISP_EXPECTS(std::abs(sum - k) <= 1e-6 * k, "fit_selection_probabilities: the marginals sum to ",
               sum, ", not k = ", k);
  std::vector<double> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = f[i] / (1.0 - f[i]);
  }
  selection_fit fit;
  for (;;) {
    fit.q = detail::probabilities_summing_to(w, k);
    const std::vector<double> pi = inclusion_probabilities(fit.q, k);
    fit.residual = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      fit.residual = std::max(fit.residual, std::abs(pi[i] - f[i]));
    }
    if (fit.residual <= tolerance) {
      return fit;
    }
    WISP_EXPECTS(fit.iterations < max_iterations, "fit_selection_probabilities: residual ",
                 fit.residual, " after ", fit.iterations, " iterations exceeds the tolerance ",
                 tolerance);
    for (std::size_t i = 0; i < n; ++i) {
      if (f[i] > 0.0) {
        w[i] = fit.q[i] / (1.0 - fit.q[i]) * f[i] / pi[i];
      }
    }
    ++fit.iterations;
  }
}

/// @brief The conditional hit-pattern distribution of one pool partition (see the file
/// description): pools F, C, S, E take consecutive rank intervals of `sizes`, the rest is the miss
/// pool. Construction O(|q| x k); `probability` O(1); `for_each` O(number of patterns), at most
/// C(k + 4, 4). Immutable after construction; safe to share between threads.
class hit_distribution {
 public:
  /// @throws wisp::logic_error if k is outside [0, |q|], a size is negative, the sizes cover more
  ///   than |q| ranks, a q is outside [0, 1], or exactly k selections has probability 0.
  hit_distribution(std::span<const double> q, std::int32_t k, tier_sizes sizes) : k_(k) {
    WISP_EXPECTS(k >= 0 && static_cast<std::size_t>(k) <= q.size(), "hit_distribution: k = ", k,
                 " is outside [0, ", q.size(), "]");
    std::size_t first = 0;
    for (std::size_t p = 0; p < tier_count; ++p) {
      WISP_EXPECTS(sizes[p] >= 0 && first + static_cast<std::size_t>(sizes[p]) <= q.size(),
                   "hit_distribution: pool ", to_string(static_cast<tier>(p)), " of ", sizes[p],
                   " experts from rank ", first, " runs past the ", q.size(), " ranks");
      phi_[p] = poisson_binomial(q.subspan(first, static_cast<std::size_t>(sizes[p])), k);
      first += static_cast<std::size_t>(sizes[p]);
    }
    miss_ = poisson_binomial(q.subspan(first), k);
    total_ = poisson_binomial(q, k)[static_cast<std::size_t>(k)];
    WISP_EXPECTS(total_ > 0.0, "hit_distribution: exactly ", k,
                 " selections has probability 0 under these q");
  }

  [[nodiscard]] std::int32_t k() const noexcept { return k_; }

  /// `P(h | exactly k selections)`; 0 for an impossible pattern (negative or more than k hits).
  [[nodiscard]] double probability(const hit_pattern& h) const noexcept {
    double p = 1.0;
    for (std::size_t t = 0; t < tier_count; ++t) {
      if (h.hits[t] < 0 || h.hits[t] > k_) {
        return 0.0;
      }
      p *= phi_[t][static_cast<std::size_t>(h.hits[t])];
    }
    const std::int32_t rest = k_ - h.total();
    return rest < 0 ? 0.0 : p * miss_[static_cast<std::size_t>(rest)] / total_;
  }

  /// Calls `visit(pattern, probability)` for every pattern with `sum h <= k` (Algorithm 4's loop).
  template <class Visit>
  void for_each(Visit&& visit) const {
    hit_pattern h;
    for (h.hits[0] = 0; h.hits[0] <= k_; ++h.hits[0]) {
      for (h.hits[1] = 0; h.hits[0] + h.hits[1] <= k_; ++h.hits[1]) {
        for (h.hits[2] = 0; h.hits[0] + h.hits[1] + h.hits[2] <= k_; ++h.hits[2]) {
          for (h.hits[3] = 0; h.total() <= k_; ++h.hits[3]) {
            visit(static_cast<const hit_pattern&>(h), probability(h));
          }
        }
      }
    }
  }

 private:
  std::int32_t k_;
  std::array<std::vector<double>, tier_count> phi_;
  std::vector<double> miss_;
  double total_ = 0.0;
};

/// @brief The profiled durations and resources of a layer call's work (seconds), shared by the
/// makespan estimate (Algorithm 3: `estimate_makespan`, the planner) and the cache-affinity
/// scheduler (`schedule_layer`). The estimate does not model recovery; the scheduler takes the
/// tensors per expert from each `layer_expert`. (`recover` comes last so that brace
/// initialisers written for the older field orders either keep their meaning or fail to compile.)
struct tier_costs {
  double sm_read = 0.0;        ///< u: reading one tensor's SM chunk
  double e_read = 0.0;         ///< v: reading one compressed E-chunk
  double decode = 0.0;         ///< c: decoding one E-chunk
  std::uint32_t threads = 1;   ///< L: decode threads
  std::uint32_t e_chunks = 1;  ///< K: E-chunks per tensor
  std::uint32_t tensors = 1;   ///< n: tensors per expert
  double recover = 0.0;        ///< r: one tensor's recovery (SM + exponents -> BF16)
  /// @throws wisp::logic_error naming the field if a duration is negative or not finite, or a
  ///   count is 0.
  void validate() const {
    for (const double x : {sm_read, e_read, decode, recover}) {
      WISP_EXPECTS(std::isfinite(x) && x >= 0.0,
                   "tier_costs: durations must be finite and >= 0, got ", x);
    }
    WISP_EXPECTS(threads >= 1 && e_chunks >= 1 && tensors >= 1, "tier_costs: threads ", threads,
                 ", e_chunks ", e_chunks, " and tensors ", tensors, " must be >= 1");
  }
};

/// @brief Algorithm 3: estimated makespan of a layer call with `k` experts and hit pattern `h`
/// (the formula of the file description; expert execution excluded). O(1).
/// @throws wisp::logic_error if the pattern has a negative count or more than k hits.
[[nodiscard]] inline double estimate_makespan(const tier_costs& c, std::int32_t k,
                                              const hit_pattern& h) {
  WISP_EXPECTS(
      h.hits[0] >= 0 && h.hits[1] >= 0 && h.hits[2] >= 0 && h.hits[3] >= 0 && h.total() <= k,
      "estimate_makespan: pattern (", h.hits[0], ", ", h.hits[1], ", ", h.hits[2], ", ", h.hits[3],
      ") is not a pattern of k = ", k);
  const double n = c.tensors;
  const double kk = c.e_chunks;
  const double misses = k - h.total();
  const double n_sm = n * (h.hits[3] + misses);
  const double n_e = n * kk * (h.hits[2] + misses);
  const double n_d = n * kk * (k - h.hits[0]);
  const double io = n_sm * c.sm_read + n_e * c.e_read;
  const double decode = (n_e * c.e_read + n_d * c.decode) / c.threads;
  return std::max(io, decode);
}

/// `sum_h P(h) T(h)` over the hit distribution. O(C(k + 4, 4)).
[[nodiscard]] inline double expected_makespan(const hit_distribution& d, const tier_costs& c) {
  double sum = 0.0;
  d.for_each([&](const hit_pattern& h, double p) { sum += p * estimate_makespan(c, d.k(), h); });
  return sum;
}

/// @brief Bytes one expert takes in each pool, indexed by `tier`.
using tier_bytes = std::array<std::uint64_t, tier_count>;

/// @brief What `plan_tiers` needs. `enabled` is the set Λ of pools the planner may use.
struct tier_plan_request {
  std::span<const double> q;       ///< fitted selection probabilities, by rank
  std::int32_t k = 1;              ///< experts per layer call
  std::uint64_t budget_bytes = 0;  ///< memory of one layer's pools
  tier_bytes bytes{};              ///< bytes per expert in F, C, S, E
  tier_costs costs{};              ///< Algorithm 3's constants
  std::array<bool, tier_count> enabled{true, true, true, true};
  double grid_step = 0.05;  ///< delta: ratios are multiples of it (1 / delta rounded)
};

/// @brief One partition the planner scored.
struct tier_partition {
  std::array<double, tier_count> ratios{};  ///< share of the budget per pool
  tier_sizes sizes{};                       ///< experts per pool
  std::uint64_t bytes_used = 0;             ///< sum of sizes x bytes per expert
  double expected_seconds = 0.0;            ///< expected makespan under the model
};

/// @brief Experts per pool for budget shares `ratios` (pools fill ranks in hierarchy order; a pool
/// gets no more experts than ranks remain). O(1).
[[nodiscard]] inline tier_sizes sizes_for_ratios(const std::array<double, tier_count>& ratios,
                                                 std::uint64_t budget_bytes,
                                                 const tier_bytes& bytes, std::int32_t experts) {
  tier_sizes s{};
  std::int32_t left = experts;
  for (std::size_t p = 0; p < tier_count; ++p) {
    if (ratios[p] <= 0.0 || bytes[p] == 0) {
      continue;
    }
    // A tiny epsilon so that a ratio of 0.3 of 10 experts' bytes is 3 experts, not 2.
    const double fit = std::floor(
        ratios[p] * static_cast<double>(budget_bytes) / static_cast<double>(bytes[p]) + 1e-9);
    s[p] = static_cast<std::int32_t>(std::min<double>(fit, left));
    left -= s[p];
  }
  return s;
}

/// @brief Result of `plan_tiers`: the best partition and how many were scored.
struct tier_plan {
  tier_partition best;
  std::size_t evaluated = 0;
};

/// @brief Algorithm 4: scores every grid split of the budget among the enabled pools and returns
/// the one with the lowest expected makespan (the first in enumeration order on ties; the
/// enumeration runs F's share from high to low, so the all-F plain cache wins ties).
/// `visit(partition)` sees every scored partition. O(grid points x (|q| k + C(k + 4, 4))).
/// @throws wisp::logic_error on an invalid request (no pool enabled, a zero byte size for an
///   enabled pool, a grid step outside (0, 1], a k outside [1, |q|]) or invalid costs.
template <class Visit>
tier_plan plan_tiers(const tier_plan_request& r, Visit&& visit) {
  r.costs.validate();
  WISP_EXPECTS(r.k >= 1 && static_cast<std::size_t>(r.k) <= r.q.size(), "plan_tiers: k = ", r.k,
               " is outside [1, ", r.q.size(), "]");
  WISP_EXPECTS(r.grid_step > 0.0 && r.grid_step <= 1.0, "plan_tiers: grid step ", r.grid_step,
               " is outside (0, 1]");
  std::vector<std::size_t> pools;
  for (std::size_t p = 0; p < tier_count; ++p) {
    if (r.enabled[p]) {
      WISP_EXPECTS(r.bytes[p] > 0, "plan_tiers: pool ", to_string(static_cast<tier>(p)),
                   " is enabled but an expert takes 0 bytes in it");
      pools.push_back(p);
    }
  }
  WISP_EXPECTS(!pools.empty(), "plan_tiers: no pool is enabled");
  const auto steps = static_cast<std::int32_t>(std::lround(1.0 / r.grid_step));
  const auto experts = static_cast<std::int32_t>(r.q.size());
  tier_plan plan;
  plan.best.expected_seconds = INFINITY;
  std::vector<std::int32_t> units(pools.size(), 0);
  // Compositions of `steps` into |pools| parts, the first pool's part from high to low.
  auto score = [&] {
    tier_partition x;
    for (std::size_t i = 0; i < pools.size(); ++i) {
      x.ratios[pools[i]] = static_cast<double>(units[i]) / steps;
    }
    x.sizes = sizes_for_ratios(x.ratios, r.budget_bytes, r.bytes, experts);
    for (std::size_t p = 0; p < tier_count; ++p) {
      x.bytes_used += static_cast<std::uint64_t>(x.sizes[p]) * r.bytes[p];
    }
    x.expected_seconds = expected_makespan(hit_distribution(r.q, r.k, x.sizes), r.costs);
    ++plan.evaluated;
    visit(static_cast<const tier_partition&>(x));
    if (x.expected_seconds < plan.best.expected_seconds) {
      plan.best = x;
    }
  };
  auto compose = [&](auto& self, std::size_t i, std::int32_t left) -> void {
    if (i + 1 == pools.size()) {
      units[i] = left;
      score();
      return;
    }
    for (std::int32_t u = left; u >= 0; --u) {
      units[i] = u;
      self(self, i + 1, left - u);
    }
  };
  compose(compose, 0, steps);
  return plan;
}

/// `plan_tiers` without a visitor.
inline tier_plan plan_tiers(const tier_plan_request& r) {
  return plan_tiers(r, [](const tier_partition&) {});
}

}  // namespace wisp
