// SPDX-License-Identifier: Apache-2.0
// `wisp predict FILE [--predictor coactivation,frequency,previous-token] [--distance 1,2,3,4]
//                    [--k 6] [--window W --decay D --forgetting F] [--json|--csv]
//                    [--save TABLE] [--right-size TARGET --right-size-model lru|static
//                    --users N]`:
// online precision@k / recall@k of routing predictors (wisp/predict): every step is predicted
// from the layers already routed, then learned. With --right-size, per-user caps from each
// user's co-activation table (WiSP §5.4), checked on that user's later traffic.
//
// FILE is a .wtrace file, the literal `synthetic`, or a folder of ESFT expert_weights_<L>.txt
// files.
#include "commands.hpp"
#include "trace_source.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cache/per_layer_cache.hpp>
#include <wisp/core/error.hpp>
#include <wisp/predict/baselines.hpp>
#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/evaluate.hpp>
#include <wisp/predict/right_size.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace wisp::tool {
namespace {

struct predict_options {
  std::string file;
  std::vector<std::string> predictors;
  std::vector<std::int32_t> distances;  // empty: 1 .. min(4, layers - 1)
  std::vector<std::int32_t> ks;
  coactivation_config config;
  bool json = false;
  bool csv = false;
  std::string save;
  double right_size_target = -1.0;
  std::string right_size_model = "lru";
  std::int32_t users = 8;
};

constexpr const char* known_predictors[] = {"coactivation", "frequency", "previous-token"};

struct row {
  std::string predictor;
  prediction_quality quality;
};

std::vector<std::string> checked_predictors(const std::vector<std::string>& requested) {
  if (requested.empty()) {
    return {std::begin(known_predictors), std::end(known_predictors)};
  }
  std::vector<std::string> out;
  for (const std::string& name : requested) {
    if (std::find(std::begin(known_predictors), std::end(known_predictors), name) ==
        std::end(known_predictors)) {
      throw logic_error("unknown predictor '" + name +
                        "' (valid: coactivation, frequency, previous-token)");
    }
    if (std::find(out.begin(), out.end(), name) == out.end()) {
      out.push_back(name);
    }
  }
  return out;
}

template <class Predictor>
void evaluate_into(std::vector<row>& rows, const std::string& name, const routing_trace& t,
                   Predictor& predictor, const predict_options& opt) {
  for (const prediction_quality& q : evaluate_online(t, predictor, opt.distances, opt.ks)) {
    rows.push_back({name, q});
  }
}

// ------------------------------------------------------------------------- right-sizing

// One user: the sequences [first, last) of the trace, split in half by steps. The table learns
// the first half; the caps it gives are replayed on the second half (per-layer LRU, every
// (step, layer) a protected call, as `wisp sim --scope layer`).
struct user_report {
  std::size_t first_sequence = 0;
  std::size_t sequences = 0;
  std::size_t learn_steps = 0;
  std::size_t check_steps = 0;
  right_size_result caps;
  double measured_miss_ratio = 0.0;
};

double replay_miss_ratio(const routing_trace& t, std::size_t begin, std::size_t end,
                         const std::vector<std::int32_t>& caps) {
  const moe_shape& shape = t.shape();
  per_layer_cache<lru> caches(std::span<const std::int32_t>(caps), shape.experts);
  std::vector<cache_key> ids(static_cast<std::size_t>(shape.top_k));
  std::vector<access_result> out(ids.size());
  std::uint64_t time = 0;
  for (std::size_t s = begin; s < end; ++s) {
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      for (std::int32_t j = 0; j < shape.top_k; ++j) {
        ids[static_cast<std::size_t>(j)] = t.expert(s, l, j);
      }
      caches.access_call(ids, {static_cast<std::uint32_t>(s), l, time}, out);
      time += ids.size();
    }
  }
  const cache_stats stats = caches.stats();
  return stats.accesses == 0
             ? 0.0
             : static_cast<double>(stats.misses) / static_cast<double>(stats.accesses);
}

std::vector<user_report> right_size_users(const routing_trace& t, const predict_options& opt) {
  std::vector<std::size_t> starts(t.sequence_starts().begin(), t.sequence_starts().end());
  if (starts.empty() || starts.front() != 0) {
    starts.insert(starts.begin(), 0);
  }
  const auto users = static_cast<std::size_t>(opt.users);
  if (users > starts.size()) {
    throw logic_error("--users " + std::to_string(users) + " exceeds the trace's " +
                      std::to_string(starts.size()) + " sequences");
  }
  starts.push_back(t.steps());
  const std::size_t sequences = starts.size() - 1;
  std::vector<user_report> out;
  routing_pass pass(t.shape());
  for (std::size_t u = 0; u < users; ++u) {
    user_report r;
    r.first_sequence = u * sequences / users;
    const std::size_t last = (u + 1) * sequences / users;
    r.sequences = last - r.first_sequence;
    const std::size_t begin = starts[r.first_sequence];
    const std::size_t end = starts[last];
    const std::size_t middle = begin + (end - begin) / 2;
    r.learn_steps = middle - begin;
    r.check_steps = end - middle;
    coactivation_predictor table(t.shape(), opt.config);
    for (std::size_t s = begin; s < middle; ++s) {
      pass.assign(t, s);
      table.learn(pass);
    }
    r.caps = right_size(
        table, opt.right_size_target,
        opt.right_size_model == "static" ? right_size_model::static_top : right_size_model::lru);
    r.measured_miss_ratio = replay_miss_ratio(t, middle, end, r.caps.layer_caps);
    out.push_back(std::move(r));
  }
  return out;
}

nlohmann::ordered_json users_json(const std::vector<user_report>& users, double target) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const user_report& r : users) {
    out.push_back({{"first_sequence", r.first_sequence},
                   {"sequences", r.sequences},
                   {"learn_steps", r.learn_steps},
                   {"check_steps", r.check_steps},
                   {"target_miss_ratio", target},
                   {"predicted_miss_ratio", r.caps.predicted_miss_ratio},
                   {"layer_caps", r.caps.layer_caps},
                   {"max_cap", r.caps.max_cap()},
                   {"slots", r.caps.slots()},
                   {"measured_miss_ratio", r.measured_miss_ratio}});
  }
  return out;
}

// ------------------------------------------------------------------------- run

// Every predictor of `predictors` evaluated online on `t` (the co-activation table saved to
// --save when asked).
std::vector<row> evaluate_predictors(const std::vector<std::string>& predictors,
                                     const routing_trace& t, const predict_options& opt) {
  const moe_shape& shape = t.shape();
  std::vector<row> rows;
  for (const std::string& name : predictors) {
    if (name == "coactivation") {
      coactivation_predictor table(shape, opt.config);
      evaluate_into(rows, name, t, table, opt);
      if (!opt.save.empty()) {
        std::ofstream out(opt.save, std::ios::binary);
        if (!out) {
          throw logic_error("--save: cannot open '" + opt.save + "' for writing");
        }
        table.save(out);
      }
    } else if (name == "frequency") {
      frequency_predictor freq(shape);
      evaluate_into(rows, name, t, freq, opt);
    } else {
      previous_token_predictor previous(shape);
      evaluate_into(rows, name, t, previous, opt);
    }
  }
  return rows;
}

void write_right_size_table(const std::vector<user_report>& users, const predict_options& opt,
                            const moe_shape& shape) {
  std::printf(
      "\nright-sizing to a miss ratio of %.3g: caps from each user's first half, LRU replay of "
      "the second half\n",
      opt.right_size_target);
  std::printf("%5s %9s %8s %8s %8s %7s %14s\n", "user", "sequences", "learn", "check", "max_cap",
              "slots", "measured_miss");
  std::int32_t global_cap = 0;
  for (std::size_t u = 0; u < users.size(); ++u) {
    const user_report& r = users[u];
    std::printf("%5zu %9zu %8zu %8zu %8d %7lld %14.4f\n", u, r.sequences, r.learn_steps,
                r.check_steps, r.caps.max_cap(), static_cast<long long>(r.caps.slots()),
                r.measured_miss_ratio);
    global_cap = std::max(global_cap, r.caps.max_cap());
  }
  std::printf(
      "one cap safe for every user: %d per layer = %lld slots; per-user caps hold the slots "
      "above\n",
      global_cap, static_cast<long long>(global_cap) * shape.layers);
}

void run(predict_options opt) {
  const std::vector<std::string> predictors = checked_predictors(opt.predictors);
  opt.config.validate();
  if (opt.right_size_target > 1.0) {
    throw logic_error("--right-size takes a miss ratio in [0, 1], got " +
                      std::to_string(opt.right_size_target));
  }
  if (opt.users < 1) {
    throw logic_error("--users must be >= 1, got " + std::to_string(opt.users));
  }
  const routing_trace t = load_trace(opt.file);
  const moe_shape& shape = t.shape();
  if (opt.ks.empty()) {
    opt.ks.push_back(shape.top_k);
  }
  if (opt.distances.empty()) {
    for (std::int32_t d = 1; d <= std::min(4, shape.layers - 1); ++d) {
      opt.distances.push_back(d);
    }
  }
  if (opt.distances.empty()) {
    throw logic_error("wisp predict needs a trace of at least 2 layers, got " +
                      std::to_string(shape.layers));
  }

  const std::vector<row> rows = evaluate_predictors(predictors, t, opt);
  std::vector<user_report> users;
  if (opt.right_size_target >= 0.0) {
    users = right_size_users(t, opt);
  }

  if (opt.json) {
    nlohmann::ordered_json out;
    out["results"] = nlohmann::ordered_json::array();
    for (const row& r : rows) {
      out["results"].push_back({{"predictor", r.predictor},
                                {"distance", r.quality.distance},
                                {"k", r.quality.k},
                                {"precision", r.quality.precision},
                                {"recall", r.quality.recall}});
    }
    if (!users.empty()) {
      out["right_size"] = users_json(users, opt.right_size_target);
    }
    std::cout << out.dump() << '\n';
    return;
  }
  if (opt.csv) {
    std::printf("predictor,distance,k,predictions,precision,recall\n");
    for (const row& r : rows) {
      std::printf("%s,%d,%d,%llu,%.6f,%.6f\n", r.predictor.c_str(), r.quality.distance, r.quality.k,
                  static_cast<unsigned long long>(r.quality.predictions), r.quality.precision,
                  r.quality.recall);
    }
    return;
  }
  std::printf("%s: %zu steps, %d layers x %d experts, top-%d; online: predict, then learn\n",
              opt.file.c_str(), t.steps(), shape.layers, shape.experts, shape.top_k);
  std::printf("coactivation: window %d, decay %.3g, max distance %d, forgetting %.6g\n\n",
              opt.config.window, static_cast<double>(opt.config.decay), opt.config.max_distance,
              opt.config.forgetting);
  std::printf("%-15s %8s %4s %12s %10s %8s\n", "predictor", "distance", "k", "predictions",
              "precision", "recall");
  for (const row& r : rows) {
    std::printf("%-15s %8d %4d %12llu %10.4f %8.4f\n", r.predictor.c_str(), r.quality.distance,
                r.quality.k, static_cast<unsigned long long>(r.quality.predictions),
                r.quality.precision, r.quality.recall);
  }
  if (!users.empty()) {
    write_right_size_table(users, opt, shape);
  }
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "predict",
      "Online precision@k / recall@k of routing predictors (co-activation, frequency, previous "
      "token) and per-user right-sizing");
  auto opt = std::make_shared<predict_options>();
  cmd->add_option("FILE", opt->file, trace_source_help())->required();
  cmd->add_option("--predictor,--predictors", opt->predictors,
                  "comma-separated predictors among coactivation, frequency, previous-token "
                  "(default: all)")
      ->delimiter(',');
  cmd->add_option("--distance,--distances", opt->distances,
                  "comma-separated target distances (1 = the next layer; default 1,2,3,4, at most "
                  "layers - 1)")
      ->delimiter(',');
  cmd->add_option("--k", opt->ks, "comma-separated numbers of experts predicted (default: top_k)")
      ->delimiter(',');
  cmd->add_option("--window", opt->config.window, "co-activation: observed layers a score uses")
      ->capture_default_str();
  cmd->add_option("--decay", opt->config.decay,
                  "co-activation: weight ratio of a source layer to the next nearer one")
      ->capture_default_str();
  cmd->add_option("--max-distance", opt->config.max_distance,
                  "co-activation: farthest distance the table keeps co-activations for")
      ->capture_default_str();
  cmd->add_option("--forgetting", opt->config.forgetting,
                  "co-activation: per-pass multiplier of every count (1 = none)")
      ->capture_default_str();
  auto* json = cmd->add_flag("--json", opt->json, "print one JSON object {\"results\": [...]}");
  auto* csv = cmd->add_flag("--csv", opt->csv, "print CSV: a header and one row per result");
  json->excludes(csv);
  cmd->add_option("--save", opt->save,
                  "write the co-activation table learned over the whole trace to this file");
  cmd->add_option("--right-size", opt->right_size_target,
                  "per-user caps for this miss ratio in [0, 1] (users = groups of sequences)");
  cmd->add_option("--right-size-model", opt->right_size_model,
                  "lru: an LRU cache's miss ratio by Che's approximation; static: the most "
                  "frequent experts pinned")
      ->check(CLI::IsMember({"lru", "static"}))
      ->capture_default_str();
  cmd->add_option("--users", opt->users, "users for --right-size: contiguous groups of sequences")
      ->capture_default_str();
  cmd->footer(
      "precision@k = routed experts among the k predicted / k; recall@k = the same / top_k. "
      "Distance d predicts layer t from layers 0..t-d of the same forward pass.");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace wisp::tool
