// ReplicatedStrategy: the shared body of every strategy that keeps a full
// copy of the model and of the optimizer state on each rank (single, ddp,
// ddp_amp, horovod, dp, local_sgd). Gradient sync goes through three
// protected hooks, on_setup(), run_backward() and finish_grad_sync(), so a
// subclass changes it without rewriting the step; single overrides only
// on_setup() (its checks). The Strategy methods stay overridable for the
// rest: dp's forward and step (its replicas), local_sgd's step and state
// (parameter averages).
//
// Step order (fixed here so every replicated strategy agrees on it):
//   finish_grad_sync() -> unscale (fp16) -> global norm -> clip -> update
//   -> zero grads -> loss-scale update.
#pragma once

#include <memory>
#include <vector>

#include "ft/optim/optim.h"
#include "ft/parallel/strategy.h"

namespace ft {

class ReplicatedStrategy : public Strategy {
 public:
  void setup(std::shared_ptr<EncoderModel> model, const OptimizerSpec& optimizer,
             const ParamPlan& plan, StrategyContext& ctx) override;
  at::Tensor forward(const Batch& batch) override;
  void backward(const at::Tensor& loss, bool sync_grads) override;
  StepResult step(const StepOptions& options) override;
  TensorList model_state() override;
  OptimizerState optimizer_state() override;
  void load_state(const TensorList& model, const OptimizerState* optimizer) override;
  StateBytes state_bytes() const override;

 protected:
  // Called once at the end of setup(), after the model is placed and the
  // optimizer built; the place to broadcast weights and build buckets.
  virtual void on_setup() {}
  // Runs the local backward; `sync_grads` false means an accumulation
  // micro-batch. Default: plain autograd backward, no communication.
  virtual void run_backward(const at::Tensor& scaled_loss, bool sync_grads);
  // Blocks until every gradient is averaged across ranks. Default: nothing.
  virtual void finish_grad_sync() {}

  // Copies rank 0's parameters and buffers to every rank (one flat
  // broadcast per dtype and device), so replicas start identical even when
  // their initialisation differed. Collective; no-op at world size 1.
  void broadcast_model_from_rank0();

  // Trainable parameters (the optimizer slots' tensors), in model order.
  const std::vector<at::Tensor>& trainable() const { return trainable_; }
  std::vector<at::Tensor> grads() const;

  std::unique_ptr<TensorOptimizer> optimizer_;

 private:
  std::vector<at::Tensor> trainable_;
};

}  // namespace ft
