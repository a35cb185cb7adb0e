#include "ft/optim/precision.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "compat.h"
#include "ft/base/error.h"

namespace ft {

PrecisionMode parse_precision(const std::string& text, const std::string& key) {
  if (text == "fp32") return PrecisionMode::FP32;
  if (text == "bf16") return PrecisionMode::BF16;
  if (text == "fp16") return PrecisionMode::FP16;
  fail("{}: unknown precision '{}'; use fp32, bf16 or fp16", key, text);
}

std::string to_string(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::FP32: return "fp32";
    case PrecisionMode::BF16: return "bf16";
    case PrecisionMode::FP16: return "fp16";
  }
  return "?";
}

namespace {

// LibTorch 1.13's CPU autocast takes only bf16 (fp16 came in 2.x); asking
// is the one check that holds for every version.
bool cpu_autocast_takes(at::ScalarType dtype) {
  const at::ScalarType before = compat::autocast_dtype(c10::kCPU);
  const bool enabled = compat::autocast_enabled(c10::kCPU);
  try {
    compat::set_autocast(c10::kCPU, enabled, dtype);
  } catch (const c10::Error&) {
    return false;
  }
  compat::set_autocast(c10::kCPU, enabled, before);
  return true;
}

}  // namespace

Precision::Precision(PrecisionMode mode, c10::DeviceType device, LossScalerOptions scaler)
    : mode_(mode),
      device_(device),
      options_(scaler),
      scale_(mode == PrecisionMode::FP16 ? scaler.init_scale : 1.0),
      hysteresis_left_(scaler.hysteresis) {
  if (mode == PrecisionMode::FP16 && device == c10::kCPU && !cpu_autocast_takes(at::kHalf)) {
    fail("strategy.precision: fp16 needs a CUDA device with this LibTorch (its CPU autocast runs only bf16); "
         "use --precision bf16 on CPU, or runtime.device=cuda");
  }
}

at::ScalarType Precision::compute_dtype() const {
  switch (mode_) {
    case PrecisionMode::BF16: return at::kBFloat16;
    case PrecisionMode::FP16: return at::kHalf;
    default: return at::kFloat;
  }
}

Precision::Autocast::Autocast(const Precision& p) : device_(p.device_), prev_dtype_(at::kFloat) {
  if (!p.mixed()) return;
  active_ = true;
  prev_enabled_ = compat::autocast_enabled(device_);
  prev_dtype_ = compat::autocast_dtype(device_);
  compat::set_autocast(device_, true, p.compute_dtype());
  at::autocast::increment_nesting();
}

Precision::Autocast::~Autocast() {
  if (!active_) return;
  // The cast cache only lives as long as the outermost region.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast(device_, prev_enabled_, prev_dtype_);
}

at::Tensor Precision::scale_loss(const at::Tensor& loss) const {
  return uses_loss_scaling() ? loss * scale_ : loss;
}

bool Precision::unscale_and_check(const std::vector<at::Tensor>& grads) const {
  if (!uses_loss_scaling()) return false;
  bool found_inf = false;
  const double inv = 1.0 / scale_;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    g.mul_(inv);
    if (!found_inf && !at::isfinite(g).all().item<bool>()) found_inf = true;
  }
  return found_inf;
}

void Precision::update(bool found_inf) {
  if (!uses_loss_scaling() || !options_.dynamic) return;
  if (found_inf) {
    if (hysteresis_left_ <= 1) {
      scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    } else {
      --hysteresis_left_;
    }
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
    hysteresis_left_ = options_.hysteresis;
  }
}

void Precision::load_state(const std::vector<double>& state) {
  // Checkpoints from before hysteresis hold 2 values; they start a full one.
  if (state.size() != 2 && state.size() != 3) {
    fail("training state: loss scaler state must have 2 or 3 values, got {}", state.size());
  }
  scale_ = state[0];
  growth_tracker_ = static_cast<int64_t>(state[1]);
  hysteresis_left_ = state.size() == 3 ? static_cast<int64_t>(state[2]) : options_.hysteresis;
}

}  // namespace ft
