// Private to train/: the config's sections turned into the options of the
// components the trainer builds (the precision's loss scaler, the tracer).
#pragma once

#include "ft/config/config.h"
#include "ft/optim/precision.h"
#include "ft/observe/trace.h"

namespace ft {

// strategy.loss_scale* as the fp16 loss scaler takes them (0: dynamic).
LossScalerOptions loss_scaler_options(const StrategyConfig& s);

// The tracer's settings from runtime.profile_steps / profile_dir (NVTX when
// runtime.device is cuda); a window that is not "A:B" is refused by name.
Tracer::Options tracer_options(const RuntimeConfig& runtime, int rank);

}  // namespace ft
