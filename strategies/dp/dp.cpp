// `dp`: the DataParallel row. One process; one model replica per device (per
// GPU with CUDA, per worker thread on CPU). Each step: copy the master's
// weights out to the replicas (after every update), scatter the batch rows,
// run the replicas' forwards in parallel, gather the logits on the first
// device (the Trainer computes the loss there), run the replicas' backwards
// in parallel, sum their gradients into the master on the first device, and
// update there. Replica 0 IS the master model, as in torch.nn.DataParallel.
//
// The gather is differentiable in two stages: forward returns the
// concatenated replica logits as a fresh leaf that requires grad; backward()
// runs the Trainer's loss backward into that leaf, splits its gradient by
// rows and drives each replica's own graph from its worker thread. (Backward
// through one at::cat would run every replica's graph on the calling thread:
// LibTorch's engine executes CPU work on the thread that called backward.)
//
// Costs that show honestly next to DDP: replica memory (R copies), the copy
// out after each step, the gather, and one updater doing all of the update.
// Dropout draws from the shared CPU generator from several threads, so dp
// runs with dropout are not bit-reproducible; with dropout 0 the losses
// equal `single`'s within fp32 noise.

#include "ft/base/error.h"
#include "ft/model/adapter.h"
#include "ft/model/lora.h"
#include "ft/model/prompt_learning.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/nn/modules/dropout.h>

#include "ft/model/model.h"
#include "ft/optim/optim.h"
#include "ft/config/options.h"
#include "ft/parallel/abilities.h"
#include "ft/plugin/plugin.h"
#include "ft/optim/precision.h"
#include "ft/parallel/replicated_strategy.h"
#include "replica_pool.h"

namespace {

using Model = ft::EncoderModel;

/// strategy.options for dp: `replicas` (1 to 1024; default: one per runtime
/// thread on CPU, one per visible GPU on CUDA).
int read_replicas(const std::map<std::string, std::string>& options, int fallback) {
  const ft::OptionReader r(options, "dp", {"replicas"});
  return r.get_int("replicas", fallback, {1, 1024}, "model replicas, e.g. 2");
}

// Rows of each replica's slice: as even as possible, earlier slices larger.
std::vector<int64_t> split_rows(int64_t rows, int replicas) {
  const int n = static_cast<int>(std::min<int64_t>(rows, replicas));
  std::vector<int64_t> sizes(static_cast<size_t>(n), rows / n);
  for (int64_t i = 0; i < rows % n; ++i) sizes[static_cast<size_t>(i)] += 1;
  return sizes;
}

bool has_dropout(const Model& model) {
  for (const auto& m : model.modules()) {
    const auto* d = dynamic_cast<const torch::nn::DropoutImpl*>(m.get());
    if (d && d->options.p() > 0) return true;
  }
  return false;
}

class DpStrategy final : public ft::ReplicatedStrategy, public ft::MemoryModel, public ft::OneProcess {
 public:
  // Its replicas are threads of the one process.
  std::string ranks_option() const override { return "replicas"; }
  // The first replica holds weights, gradients and AdamW's moments (16Ψ);
  // every other one weights and gradients (8Ψ each).
  std::string memory_formula(const std::map<std::string, std::string>&) const override { return "16Ψ+8Ψ(R-1)"; }
  int64_t theory_bytes(const ft::TheoryInputs& in) const override {
    // The default replica count is the machine's: without the option the
    // theory does not know R.
    if (in.options.count("replicas") == 0) return -1;
    const int64_t r = read_replicas(in.options, 1);
    return 16 * in.model.params + 8 * in.model.params * (r - 1);
  }
  std::vector<std::string> memory_options() const override { return {"replicas"}; }

  at::Tensor forward(const ft::Batch& batch) override {
    if (stale_) copy_out();
    const int64_t rows = batch.rows();
    if (rows == 0) return ReplicatedStrategy::forward(batch);
    const auto sizes = split_rows(rows, static_cast<int>(replicas_.size()));
    const int n = static_cast<int>(sizes.size());
    std::vector<ft::Batch> parts(static_cast<size_t>(n));
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      // No labels: the model never reads them; the Trainer takes the loss
      // on the gathered logits (masked-LM logits come back in position
      // order, as the slices are consecutive rows).
      parts[static_cast<size_t>(i)] =
          ft::model_inputs_on(ft::slice_rows(batch, offset, sizes[static_cast<size_t>(i)]), devices_[static_cast<size_t>(i)]);
      offset += sizes[static_cast<size_t>(i)];
    }
    // Grad mode and autocast are thread-local: each worker takes the caller's.
    const bool grad = at::GradMode::is_enabled();
    std::vector<at::Tensor> outs(static_cast<size_t>(n));
    pool_->run(n, [&](int i) {
      at::AutoGradMode mode(grad);
      auto autocast = ctx_->precision->autocast();
      outs[static_cast<size_t>(i)] = replicas_[static_cast<size_t>(i)]->forward(parts[static_cast<size_t>(i)]);
    });
    std::vector<at::Tensor> gathered;
    for (const auto& o : outs) gathered.push_back(o.detach().to(ctx_->device, at::kFloat));
    at::Tensor logits = at::cat(gathered);
    if (grad) {
      logits.requires_grad_(true);
      outputs_ = std::move(outs);
      gathered_ = logits;
    }
    return logits;
  }

  void set_training(bool training) override {
    for (auto& r : replicas_) r->train(training);
  }

  ft::StepResult step(const ft::StepOptions& options) override {
    ft::StepResult r = ReplicatedStrategy::step(options);
    stale_ = true;  // the master moved: copy out before the next forward
    return r;
  }

  void load_state(const ft::TensorList& model, const ft::OptimizerState* optimizer) override {
    ReplicatedStrategy::load_state(model, optimizer);
    stale_ = true;
  }

  ft::StateBytes state_bytes() const override {
    ft::StateBytes b = ReplicatedStrategy::state_bytes();
    for (size_t i = 1; i < replicas_.size(); ++i) {
      for (const auto& p : replicas_[i]->parameters()) {
        b.params += p.numel() * static_cast<int64_t>(p.element_size());
        if (p.grad().defined()) b.grads += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
      }
    }
    return b;
  }

  void teardown() override {
    pool_.reset();
    outputs_.clear();
    gathered_ = at::Tensor();
  }

 protected:
  void on_setup() override {
    const bool cuda = ctx_->device.is_cuda();
    const int fallback = cuda ? std::max<int>(1, static_cast<int>(torch::cuda::device_count())) : std::max(1, ctx_->threads);
    const int replicas = read_replicas(ctx_->options, fallback);
    if (cuda && replicas > static_cast<int>(torch::cuda::device_count())) {
      ft::fail("strategy.options.replicas: {} replicas need {} GPUs, {} visible", replicas, replicas,
               torch::cuda::device_count());
    }
    if (!cuda && replicas > 1 && model_->activation_checkpointing() && has_dropout(*model_)) {
      ft::fail("train.activation_checkpointing: dp's {} CPU replicas share one random generator, so recomputed "
               "layers would draw other dropout masks; set dropout to 0, strategy.options.replicas=1, or use ddp",
               replicas);
    }
    replicas_.push_back(model_);
    devices_.push_back(ctx_->device);
    for (int i = 1; i < replicas; ++i) {
      const c10::Device dev = cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(
                                                                  (ctx_->device.index() + i) % torch::cuda::device_count()))
                                   : ctx_->device;
      auto replica = std::make_shared<Model>(model_->config());
      ft::replicate_lora(*model_, *replica);  // same adapter modules, so parameters line up by position
      ft::replicate_bottleneck_adapters(*model_, *replica);
      ft::replicate_prompt_learning(*model_, *replica);
      replica->to(dev);
      replica->set_activation_checkpointing(model_->activation_checkpointing());
      replica->set_padding_free(model_->padding_free());
      replica->set_attention(model_->attention());
      auto mine = replica->parameters();
      auto master = model_->parameters();
      for (size_t k = 0; k < mine.size(); ++k) mine[k].set_requires_grad(master[k].requires_grad());
      replicas_.push_back(std::move(replica));
      devices_.push_back(dev);
    }
    stale_ = true;
    // Master ids of trainable params -> each replica's same-position tensor.
    auto master = model_->parameters();
    for (size_t k = 0; k < master.size(); ++k)
      if (master[k].requires_grad()) trainable_index_.push_back(k);
    const int per_replica = cuda ? 1 : std::max(1, ctx_->threads / replicas);
    pool_ = std::make_unique<ft::dp::ReplicaPool>(replicas, per_replica);
  }

  void run_backward(const at::Tensor& scaled_loss, bool /*sync_grads*/) override {
    if (!gathered_.defined()) {  // rows == 0 or no replica graph: plain backward
      scaled_loss.backward();
      return;
    }
    scaled_loss.backward();  // stops at the gathered logits (a leaf)
    at::Tensor grad = gathered_.grad();
    const int n = static_cast<int>(outputs_.size());
    std::vector<at::Tensor> grads;
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const auto& o = outputs_[static_cast<size_t>(i)];
      grads.push_back(grad.narrow(0, offset, o.size(0)).to(o.device(), o.scalar_type()));
      offset += o.size(0);
    }
    pool_->run(n, [&](int i) {
      torch::autograd::backward({outputs_[static_cast<size_t>(i)]}, {grads[static_cast<size_t>(i)]});
    });
    outputs_.clear();
    gathered_ = at::Tensor();
  }

  // Reduce to the first device: sum every replica's gradients into the
  // master's (accumulation micro-batches just keep accumulating in the
  // replicas until the step).
  void finish_grad_sync() override {
    c10::NoGradGuard no_grad;
    auto master = model_->parameters();
    for (size_t r = 1; r < replicas_.size(); ++r) {
      auto mine = replicas_[r]->parameters();
      for (size_t k : trainable_index_) {
        at::Tensor g = mine[k].grad();
        if (!g.defined()) continue;
        if (master[k].grad().defined()) {
          master[k].mutable_grad().add_(g.to(master[k].device()));
        } else {
          master[k].mutable_grad() = g.to(master[k].device()).clone();
        }
        g.zero_();
      }
    }
  }

 private:
  // Broadcast after an update: master weights and buffers into every replica.
  void copy_out() {
    c10::NoGradGuard no_grad;
    auto mp = model_->parameters();
    auto mb = model_->buffers();
    for (size_t r = 1; r < replicas_.size(); ++r) {
      auto rp = replicas_[r]->parameters();
      auto rb = replicas_[r]->buffers();
      for (size_t k = 0; k < mp.size(); ++k) rp[k].copy_(mp[k]);
      for (size_t k = 0; k < mb.size(); ++k) rb[k].copy_(mb[k]);
    }
    stale_ = false;
  }

  std::vector<std::shared_ptr<Model>> replicas_;  // [0] is model_
  std::vector<c10::Device> devices_;
  std::vector<size_t> trainable_index_;  // positions in parameters() that train
  std::unique_ptr<ft::dp::ReplicaPool> pool_;
  bool stale_ = true;
  // Between forward and backward of one training micro-batch.
  std::vector<at::Tensor> outputs_;  // replica logits, still attached to their graphs
  at::Tensor gathered_;              // the leaf the Trainer's loss was computed on
};

}  // namespace

FT_STRATEGY_PLUGIN("dp", "1.0.0",
                   FT_STRATEGY("dp", "DataParallel: one process, a replica per device (CPU: per worker thread)",
                               [] { return new DpStrategy(); }))
