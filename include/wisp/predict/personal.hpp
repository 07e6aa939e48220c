// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `personal_predictor`: per-user co-activation tables beside a population table (WiSP
/// §5.4, Appendix G.1: a user's own table, grown from a session or two, predicts that user's
/// routing better than a population table).
///
/// A user's score blends the two tables by the evidence the user's table holds:
///
///     score = a * user score + (1 - a) * population score,   a = n / (n + prior_passes)
///
/// with `n` the user's learned passes: a new user starts on the population table and moves to
/// their own as it fills. `user(id)` is a `routing_predictor` whose `learn` feeds the user's table
/// and (by default) the population's.
/// @code
/// wisp::personal_predictor tables(shape);
/// const std::size_t alice = tables.add_user();
/// auto p = tables.user(alice);              // a routing_predictor
/// p.score(pass, target, scores);
/// p.learn(pass);
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/routing_predictor.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief A population co-activation table and one table per user (see the file description).
///
/// Memory: one `coactivation_predictor` per user plus the population's. `add_user` allocates;
/// scoring and learning do not. Not thread-safe: scoring blends through an internal buffer.
class personal_predictor {
 public:
  /// @param prior_passes the user passes at which both tables weigh the same (>= 0; 0 = the
  ///   user's table alone once it has learned anything).
  /// @param learn_population whether a user's `learn` also feeds the population table.
  /// @throws wisp::logic_error on an invalid shape, config or prior.
  explicit personal_predictor(const moe_shape& shape, const coactivation_config& config = {},
                              double prior_passes = 16.0, bool learn_population = true)
      : population_(shape, config),
        prior_(prior_passes),
        learn_population_(learn_population),
        blend_(static_cast<std::size_t>(shape.experts)) {
    WISP_EXPECTS(std::isfinite(prior_passes) && prior_passes >= 0.0,
                 "personal_predictor: prior_passes must be finite and >= 0, got ", prior_passes);
  }

  /// A user's view: a `routing_predictor` over that user's table and the population's.
  class user_predictor {
   public:
    static constexpr std::string_view name = "personal";

    /// The blended score (see the file description). @throws as `coactivation_predictor::score`.
    void score(const routing_pass& pass, std::int32_t target, std::span<float> scores) const {
      owner_->score_user(user_, pass, target, scores);
    }
    /// Learns `pass` into the user's table (and the population's unless disabled).
    /// @throws as `coactivation_predictor::learn`.
    void learn(const routing_pass& pass) { owner_->learn_user(user_, pass); }
    [[nodiscard]] std::size_t id() const noexcept { return user_; }

   private:
    friend class personal_predictor;
    user_predictor(personal_predictor* owner, std::size_t user) : owner_(owner), user_(user) {}
    personal_predictor* owner_;
    std::size_t user_;
  };

  /// Adds a user with an empty table; returns its id (0, 1, 2, ...). Allocates one table.
  std::size_t add_user() {
    users_.emplace_back(population_.shape(), population_.config());
    return users_.size() - 1;
  }
  /// Adds a user whose table was saved earlier (same shape and config as the population).
  /// @throws wisp::logic_error on a mismatch (nothing added).
  std::size_t add_user(coactivation_predictor table) {
    WISP_EXPECTS(table.shape() == population_.shape() && table.config() == population_.config(),
                 "personal_predictor::add_user: the table's shape (", table.shape(),
                 ") or config differs from the population's (", population_.shape(), ")");
    users_.push_back(std::move(table));
    return users_.size() - 1;
  }

  /// The view of user `id`, valid while this object lives and is not moved.
  /// @throws wisp::logic_error on an unknown id.
  [[nodiscard]] user_predictor user(std::size_t id) {
    check_user("user", id);
    return user_predictor(this, id);
  }
  /// The table of user `id`. @throws wisp::logic_error on an unknown id.
  [[nodiscard]] const coactivation_predictor& table(std::size_t id) const {
    check_user("table", id);
    return users_[id];
  }
  [[nodiscard]] const coactivation_predictor& population() const noexcept { return population_; }
  /// The population table, e.g. to `merge` tables learned elsewhere or to `learn` anonymous
  /// traffic.
  [[nodiscard]] coactivation_predictor& population() noexcept { return population_; }
  [[nodiscard]] std::size_t users() const noexcept { return users_.size(); }
  /// The weight `a` of user `id`'s own table in its blended score.
  [[nodiscard]] double user_weight(std::size_t id) const {
    const double n = table(id).passes();
    return n + prior_ > 0.0 ? n / (n + prior_) : 0.0;
  }

 private:
  void check_user(const char* where, std::size_t id) const {
    WISP_EXPECTS(id < users_.size(), "personal_predictor::", where, ": user ", id, " is unknown (",
                 users_.size(), " users)");
  }
  void score_user(std::size_t id, const routing_pass& pass, std::int32_t target,
                  std::span<float> scores) {
    const auto a = static_cast<float>(user_weight(id));
    population_.score(pass, target, scores);
    if (a <= 0.0f) {
      return;
    }
    users_[id].score(pass, target, blend_);
    for (std::size_t j = 0; j < scores.size(); ++j) {
      scores[j] = a * blend_[j] + (1.0f - a) * scores[j];
    }
  }
  void learn_user(std::size_t id, const routing_pass& pass) {
    users_[id].learn(pass);
    if (learn_population_) {
      population_.learn(pass);
    }
  }

  coactivation_predictor population_;
  std::vector<coactivation_predictor> users_;
  double prior_;
  bool learn_population_;
  std::vector<float> blend_;  // scratch: the user table's scores
};
static_assert(routing_predictor<personal_predictor::user_predictor>);

}  // namespace wisp
