#include "best_model.h"

#include <ATen/ATen.h>

#include "ft/comm/comm.h"

namespace ft {

// The default metric, accuracy, is the loss for regression (which has none).
bool BestModelTracker::greater_is_better(const ClassificationReport& r) const {
  if (t_.greater_is_better) return *t_.greater_is_better;
  const std::string& name = ref_.metric;
  const bool loss = name == "loss" || (name == "accuracy" && r.problem_type == ProblemType::kRegression);
  return !(loss || name == "mse" || name == "mae");
}

double BestModelTracker::signed_value(const ClassificationReport& r) const {
  const std::string& name = ref_.metric;
  double v = 0;
  if (name == "loss" || (name == "accuracy" && r.problem_type == ProblemType::kRegression)) {
    v = r.loss;
  } else if (name == "accuracy") {
    v = r.accuracy;
  } else {
    v = r.score(name).value_or(r.accuracy);
  }
  return greater_is_better(r) ? v : -v;
}

BestModelTracker::Verdict BestModelTracker::observe(const ClassificationReport& r, TrainerState& state,
                                                    Comm& comm) const {
  const double v = signed_value(r);
  Verdict verdict;
  // EarlyStoppingCallback's test: better than the best so far by more than the threshold.
  const bool counts = !state.has_best || (v > state.best_metric && v - state.best_metric > t_.early_stopping_threshold);
  verdict.improved = !state.has_best || v > state.best_metric;
  const int64_t waited = counts ? 0 : state.evals_without_improvement + 1;
  verdict.stop = t_.early_stopping_patience > 0 && waited >= t_.early_stopping_patience;
  auto decided = at::tensor({verdict.improved ? 1.0 : 0.0, verdict.stop ? 1.0 : 0.0, v, static_cast<double>(waited)},
                            at::kDouble);
  comm.broadcast(decided, 0);
  const double* d = decided.data_ptr<double>();
  verdict.improved = d[0] > 0.5;
  verdict.stop = d[1] > 0.5;
  state.evals_without_improvement = static_cast<int64_t>(d[3]);
  if (verdict.improved) {
    state.best_metric = d[2];
    state.has_best = true;
    state.best_step = state.global_step;
  }
  return verdict;
}

}  // namespace ft
