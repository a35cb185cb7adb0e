#include "component_options.h"

#include <sys/resource.h>

#include "ft/base/error.h"
#include "ft/train/trainer.h"

namespace ft {

double peak_rss_mb() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

LossScalerOptions loss_scaler_options(const StrategyConfig& s) {
  LossScalerOptions o;
  o.dynamic = s.loss_scale == 0;
  o.init_scale = o.dynamic ? s.loss_scale_init : s.loss_scale;
  o.growth_interval = s.loss_scale_window;
  o.hysteresis = s.loss_scale_hysteresis;
  o.min_scale = s.loss_scale_min;
  return o;
}

Tracer::Options tracer_options(const RuntimeConfig& runtime, int rank) {
  Tracer::Options o;
  o.rank = rank;
  o.dir = runtime.profile_dir;
  o.nvtx = runtime.device == "cuda";
  if (!runtime.profile_steps.empty()) {
    o.window = parse_step_window(runtime.profile_steps);
    if (!o.window) fail("runtime.profile_steps: '{}': {}", runtime.profile_steps, kStepWindowHelp);
  }
  return o;
}

}  // namespace ft
