// Private to train/: which evaluation is the best, and when to stop early
// (train.best_metric, greater_is_better, early_stopping_patience and
// early_stopping_threshold), as transformers' Trainer and its
// EarlyStoppingCallback decide.
#pragma once

#include <string>
#include <utility>

#include "ft/checkpoint/checkpoint.h"
#include "ft/config/config.h"
#include "ft/observe/metrics.h"

namespace ft {

class Comm;

class BestModelTracker {
 public:
  // `ref`: the dev set and metric train.best_metric names (best_metric_ref).
  BestModelTracker(const TrainConfig& t, BestMetricRef ref) : t_(t), ref_(std::move(ref)) {}

  struct Verdict {
    bool improved = false;  // a new best: the next checkpoint is the best one
    bool stop = false;      // patience is spent
  };

  // Judges rank 0's reading of `r` and broadcasts it, so every rank takes
  // the same decision at the same step even if their reports differed in
  // the last bit (collective). Updates state's best and patience count.
  Verdict observe(const ClassificationReport& r, TrainerState& state, Comm& comm) const;

  // The metric's value with the sign that makes higher better.
  double signed_value(const ClassificationReport& r) const;
  bool greater_is_better(const ClassificationReport& r) const;
  // The metric as reported (unsigned), for messages.
  double shown(double signed_value, const ClassificationReport& r) const {
    return greater_is_better(r) ? signed_value : -signed_value;
  }
  // As configured ("accuracy", "sst2_accuracy"), for messages.
  const std::string& metric() const { return t_.best_metric; }
  // The name of the dev set (RunInputs::dev) the metric is read on.
  const std::string& dev_name() const { return ref_.dev; }

 private:
  const TrainConfig& t_;
  BestMetricRef ref_;
};

}  // namespace ft
