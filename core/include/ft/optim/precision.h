// Precision: the mixed-precision component any strategy can take.
//
// It owns three things and nothing else: the autocast region around the
// forward pass, the dynamic loss scale for fp16 (bf16 needs none), and the
// dtype used when a strategy chooses to communicate in low precision.
// Master weights and optimizer state stay fp32 in every mode.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

namespace ft {

enum class PrecisionMode { FP32, BF16, FP16 };

// "fp32" | "bf16" | "fp16"; anything else: ft::Error naming `key`.
PrecisionMode parse_precision(const std::string& text, const std::string& key);
std::string to_string(PrecisionMode mode);

// Dynamic loss scaling as in torch.cuda.amp.GradScaler: grow x2 after
// `growth_interval` clean steps, back off x0.5 on overflow (step skipped).
// `hysteresis` > 1 and `min_scale` give DeepSpeed's scaler: an overflow only
// backs off once `hysteresis` overflows were absorbed since the last growth,
// and never below `min_scale`. An overflowing step is skipped either way.
struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;
  double min_scale = 0.0;
  // false: init_scale is a fixed scale (overflowing steps are still skipped).
  bool dynamic = true;
};

class Precision {
 public:
  Precision(PrecisionMode mode, c10::DeviceType device, LossScalerOptions scaler = {});

  PrecisionMode mode() const { return mode_; }
  bool mixed() const { return mode_ != PrecisionMode::FP32; }
  // bf16 / fp16 for mixed modes, fp32 otherwise.
  at::ScalarType compute_dtype() const;

  // RAII: autocast enabled for this thread while alive (no-op in FP32);
  // restores the previous autocast state on exit.
  class Autocast {
   public:
    explicit Autocast(const Precision& precision);
    ~Autocast();
    Autocast(const Autocast&) = delete;
    Autocast& operator=(const Autocast&) = delete;

   private:
    bool active_ = false;
    c10::DeviceType device_;
    bool prev_enabled_ = false;
    at::ScalarType prev_dtype_;
  };
  Autocast autocast() const { return Autocast(*this); }

  // --- fp16 loss scaling (identity in other modes) ---
  bool uses_loss_scaling() const { return mode_ == PrecisionMode::FP16; }
  at::Tensor scale_loss(const at::Tensor& loss) const;
  // Multiplies grads by 1/scale in place; returns true when any grad holds
  // inf/NaN. Sharded strategies call it on their shard and OR the flag
  // across ranks before update(). No CPU kernel exists in 1.13 for the ATen
  // fused op, so this uses ordinary ops.
  bool unscale_and_check(const std::vector<at::Tensor>& grads) const;
  // Adjusts the scale after a step; `found_inf` must agree on every rank.
  void update(bool found_inf);
  double loss_scale() const { return scale_; }

  // For checkpoints: {scale, clean steps so far, overflows still absorbed}.
  std::vector<double> state() const {
    return {scale_, static_cast<double>(growth_tracker_), static_cast<double>(hysteresis_left_)};
  }
  void load_state(const std::vector<double>& state);

 private:
  PrecisionMode mode_;
  c10::DeviceType device_;
  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_left_;
};

}  // namespace ft
