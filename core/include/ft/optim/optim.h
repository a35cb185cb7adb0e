// Optimizers written over plain tensors, so one implementation updates full
// parameters (single, ddp, dp) and flat shards (ZeRO, FSDP) alike, and its
// state can be exported by parameter name and loaded under any strategy.
//
// The math matches torch.optim.AdamW / SGD (non-fused, non-amsgrad,
// non-nesterov) operation for operation, which the parity fixture checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/base/types.h"

namespace ft {

// One tensor the optimizer updates, with its own settings.
struct OptimSlot {
  std::string name;  // HF parameter name or a shard label; keys exported state
  at::Tensor param;  // updated in place (fp32)
  double weight_decay = 0.0;
  double lr_scale = 1.0;
};

class TensorOptimizer {
 public:
  TensorOptimizer(const OptimizerSpec& spec, std::vector<OptimSlot> slots);

  // One update; grads[i] belongs to slots()[i] (undefined grad: skipped).
  void step(double lr, const std::vector<at::Tensor>& grads);

  const std::vector<OptimSlot>& slots() const { return slots_; }
  int64_t step_count() const { return step_; }

  // State tensors keyed "<slot name>.exp_avg" / ".exp_avg_sq" (AdamW) or
  // ".momentum_buffer" (SGD with momentum). Views, not copies.
  OptimizerState state() const;
  // Loads state produced by state() of an optimizer over the same names;
  // a missing or mis-shaped entry is an ft::Error naming it.
  void load_state(const OptimizerState& state, const std::string& source);
  // Bytes of optimizer state held (the memory table's optimizer column).
  int64_t state_bytes() const;

  // Per-slot state tensors, for strategies that reshape state (ZeRO).
  const std::vector<std::vector<at::Tensor>>& buffers() const { return buffers_; }
  std::vector<std::string> buffer_names() const;

 private:
  OptimizerSpec spec_;
  std::vector<OptimSlot> slots_;
  std::vector<std::vector<at::Tensor>> buffers_;  // per slot: {exp_avg, exp_avg_sq} or {momentum}
  int64_t step_ = 0;
};

// Squared L2 norm of all grads, as a double (accumulated in fp32 per tensor
// like torch.nn.utils.clip_grad_norm_).
double grad_norm_squared(const std::vector<at::Tensor>& grads);

// Scales grads in place so their global norm is at most max_norm, given the
// global norm (computed across shards by the caller). Same rule as
// clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1.
void clip_grads(const std::vector<at::Tensor>& grads, double total_norm, double max_norm);

// Weight decay / LR scale / trainable per parameter, from the BERT
// convention (no decay on biases and LayerNorm unless decay_all).
ParamPlan default_param_plan(const TensorList& params, double weight_decay, bool decay_all);

// Slots for full parameters following a plan (frozen params left out).
std::vector<OptimSlot> slots_from_plan(const TensorList& params, const ParamPlan& plan);

}  // namespace ft
