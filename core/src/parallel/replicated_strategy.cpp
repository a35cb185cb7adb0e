#include "ft/parallel/replicated_strategy.h"

#include <c10/core/GradMode.h>
#include <cmath>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/optim/param_plan.h"
#include "ft/parallel/param_sync.h"
#include "ft/optim/precision.h"

namespace ft {

void ReplicatedStrategy::setup(std::shared_ptr<EncoderModel> model,
                               const OptimizerSpec& optimizer, const ParamPlan& plan,
                               StrategyContext& ctx) {
  adopt(std::move(model), plan, ctx);
  auto slots = slots_from_plan(model_->weights(), plan);
  for (const auto& s : slots) trainable_.push_back(s.param);
  optimizer_ = std::make_unique<TensorOptimizer>(optimizer, std::move(slots));
  on_setup();
}

at::Tensor ReplicatedStrategy::forward(const Batch& batch) {
  const Batch on_device = model_inputs_on(batch, ctx_->device);
  auto autocast = ctx_->precision->autocast();
  return model_->forward(on_device);
}

void ReplicatedStrategy::backward(const at::Tensor& loss, bool sync_grads) {
  run_backward(ctx_->precision->scale_loss(loss), sync_grads);
}

void ReplicatedStrategy::run_backward(const at::Tensor& scaled_loss, bool) {
  scaled_loss.backward();
}

std::vector<at::Tensor> ReplicatedStrategy::grads() const {
  std::vector<at::Tensor> out;
  out.reserve(trainable_.size());
  for (const auto& p : trainable_) out.push_back(p.grad());
  return out;
}

StepResult ReplicatedStrategy::step(const StepOptions& options) {
  finish_grad_sync();
  auto g = grads();
  // Every replica holds the same averaged grads: no flag to share.
  return update_from_grads(g, *ctx_->precision, *optimizer_, options, nullptr, [&] { return grad_norm_squared(g); });
}

TensorList ReplicatedStrategy::model_state() {
  TensorList out;
  for (const auto& [name, t] : model_->weights()) out.emplace_back(name, t.detach().to(at::kCPU, at::kFloat).clone());
  return out;
}

OptimizerState ReplicatedStrategy::optimizer_state() {
  OptimizerState s = optimizer_->state();
  for (auto& [name, t] : s.tensors) t = t.detach().to(at::kCPU).clone();
  return s;
}

void ReplicatedStrategy::load_state(const TensorList& model, const OptimizerState* optimizer) {
  model_->load_weights(model, "checkpoint");
  if (optimizer) optimizer_->load_state(*optimizer, "checkpoint optimizer state");
}

void ReplicatedStrategy::broadcast_model_from_rank0() {
  std::vector<at::Tensor> tensors = model_->parameters();
  for (const auto& b : model_->buffers()) tensors.push_back(b);
  broadcast_tensors(*ctx_->comm, tensors, 0);
}

StateBytes ReplicatedStrategy::state_bytes() const { return held_state_bytes(model_->parameters(), *optimizer_); }

}  // namespace ft
