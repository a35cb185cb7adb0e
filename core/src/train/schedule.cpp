// The learning-rate schedule (ft/train/trainer.h: scheduled_lr): warm-up (linear
// or DeepSpeed's log ramp), then constant, linear or cosine decay to 0.
#include <algorithm>
#include <cmath>

#include "ft/config/config.h"
#include "ft/train/trainer.h"

namespace ft {

// `step` counts the optimizer steps already taken, so the first step runs at
// the warm-up's start, as HF's LambdaLR schedules and DeepSpeed's WarmupLR do.
double scheduled_lr(const TrainConfig& train, int64_t step, int64_t total_steps, int64_t warmup_steps) {
  if (step < warmup_steps) {
    // ln(warmup) is 0 for a one-step warm-up: that step runs at lr * 0 either way.
    const double ramp = train.warmup_type == "log"
                            ? std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(std::max<int64_t>(2, warmup_steps)))
                            : static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
    return train.lr * ramp;
  }
  if (train.scheduler == "constant") return train.lr;
  const double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  if (train.scheduler == "cosine") return train.lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
  return train.lr * std::max(0.0, 1.0 - progress);
}

}  // namespace ft
