// `ft sweep`'s file (sweep.yaml), its trials and the ASHA pruner, apart from
// the processes that run them (cmd_sweep.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ft::app {

// One key's search space: a list of values (grid or random choice), or a
// distribution (random only): uniform, log_uniform, int_uniform in [min, max].
struct ParamSpace {
  std::string key;  // a run-config key, e.g. train.lr
  std::vector<std::string> values;
  std::string distribution;
  double min = 0, max = 0;
};

struct SweepSpec {
  std::string source;     // the file, for errors
  std::string base;       // the run config trials start from; empty: the embedded default
  std::vector<std::string> overrides;  // --set for every trial
  std::string output_dir = "runs/sweep";
  std::string method = "grid";  // grid | random
  int64_t trials = 0;           // random: how many; grid: the product (0 = all)
  uint64_t seed = 0;
  int parallel = 1;
  std::string metric;                    // empty: the base config's train.best_metric
  std::optional<bool> greater_is_better;  // unset: lower for loss, mse, mae
  std::vector<ParamSpace> params;
  // Successive halving (scheduler: {type: asha | sha, ...}); min_steps 0 =
  // no pruning. asha decides at each rung as trials arrive; sha pauses every
  // trial at a rung until all of them have reached it, then goes on with the
  // best 1/reduction_factor (docs/training-loop.md).
  std::string scheduler = "asha";
  int64_t min_steps = 0;
  int64_t reduction_factor = 3;
  std::string text;  // the file as read: a resumed sweep must be the same sweep
};

// Reads sweep.yaml; every problem is one ft::Error naming the file and key.
SweepSpec read_sweep_spec(const std::string& path);

// The trials' parameter settings, in order ("key" -> "value" as --set takes
// it): the grid's product, or `trials` draws from the spec's seed, so a
// resumed sweep regenerates the same list.
std::vector<std::map<std::string, std::string>> sweep_trials(const SweepSpec& spec);

// Whether higher is better for `metric`, as train.greater_is_better infers it.
bool sweep_greater_is_better(const SweepSpec& spec, const std::string& metric);

// Asynchronous successive halving (ASHA) as a pruner: rung k is at
// min_steps * reduction_factor^k steps; a trial that reaches a rung goes on
// only if its value is among the best max(1, n / reduction_factor) of the n
// values recorded at that rung so far (its own included).
class AshaPruner {
 public:
  AshaPruner(int64_t min_steps, int64_t reduction_factor, bool greater_is_better)
      : min_steps_(min_steps), eta_(reduction_factor), greater_(greater_is_better) {}
  bool enabled() const { return min_steps_ > 0; }
  // The rung of `step`, or -1 when the step is not a rung.
  int rung_of(int64_t step) const;
  // Records `value` at `rung`; returns whether the trial goes on.
  bool keep(int rung, double value);
  // The step of rung `rung`: min_steps * reduction_factor^rung.
  int64_t step_of(int rung) const;
  // How many of n values at a rung go on: max(1, n / reduction_factor).
  size_t survivors(size_t n) const { return std::max<size_t>(1, n / static_cast<size_t>(eta_)); }
  // Restores a recorded value (a resumed sweep) without deciding.
  void restore(int rung, double value) { values_[rung].push_back(value); }

 private:
  int64_t min_steps_, eta_;
  bool greater_;
  std::map<int, std::vector<double>> values_;
};

}  // namespace ft::app
