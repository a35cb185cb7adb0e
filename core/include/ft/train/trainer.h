// Trainer: the loop. Epochs and steps, micro-batches and accumulation, the
// LR schedule, evaluation and checkpoint cadence, metrics. It talks to the
// strategy only through ft::Strategy.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ft/comm/comm.h"
#include "ft/config/config.h"
#include "ft/observe/events.h"
#include "ft/tasks/run_inputs.h"
#include "ft/parallel/strategy.h"

namespace ft {

struct TrainResult {
  SummaryEvent summary;
  std::optional<ClassificationReport> last_eval;
};

// Learning rate for optimizer step `step` (0-based) as HF's schedulers
// compute it: a warm-up from 0 (linear, or DeepSpeed's log ramp), then
// constant, linear decay to 0 or cosine decay to 0 (train.scheduler).
double scheduled_lr(const TrainConfig& train, int64_t step, int64_t total_steps, int64_t warmup_steps);

class Trainer {
 public:
  Trainer(RunConfig config, RunInputs inputs, std::shared_ptr<Strategy> strategy, std::string strategy_name,
          Comm& comm, EventLog& events);
  ~Trainer();

  TrainResult fit();
  // Evaluates each dev set with the current weights (collective): its
  // data.dev name ("" for a single set) and report, in data.dev's order.
  std::vector<std::pair<std::string, ClassificationReport>> evaluate();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Peak resident set size of this process, MB.
double peak_rss_mb();

}  // namespace ft
