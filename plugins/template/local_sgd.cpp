// `local_sgd`: a third-party strategy plugin, built against the INSTALLED ft
// SDK (find_package(ft)), never against ft's source tree. Copy this folder
// to start your own; docs/writing-a-strategy.md walks through it.
//
// Local SGD (Stich 2019; Lin et al. 2020, "Don't use large mini-batches, use
// local SGD"): every rank keeps a full replica and steps its optimizer on its
// OWN gradients; every `sync_every` steps the ranks average their parameters.
// Communication drops by that factor at the price of replicas drifting apart
// in between. Each rank's optimizer state (AdamW moments) stays local, as in
// the papers.
//
//   strategy.options.sync_every   integer >= 1, default 1
//
// sync_every = 1 is synchronous data parallelism: gradients (not parameters)
// are averaged before every step, which is exactly single-process training
// on the global batch (with AdamW, averaging parameters after independent
// steps would not be). That is what the parity test checks.
//
// Everything here comes from ft's public headers: ReplicatedStrategy gives
// placement, forward, the step (unscale, clip, update, zero), model and
// optimizer state; ft::Comm gives the collectives; ft::OptionReader reads
// strategy.options; ft::MemoryModel (ft/parallel/abilities.h) lets `ft bench` print
// this strategy's theory column beside what each rank measured.

#include <c10/core/GradMode.h>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ft/parallel/abilities.h"
#include "ft/comm/comm.h"
#include "ft/model/model.h"
#include "ft/config/options.h"
#include "ft/plugin/plugin.h"
#include "ft/parallel/replicated_strategy.h"

namespace {

/// strategy.options.* of local_sgd, validated at setup (same on every rank,
/// so every rank fails the same way before the first collective).
/// ft::OptionReader refuses unknown keys and writes the errors every ft
/// strategy writes.
struct LocalSgdOptions {
  int64_t sync_every = 1;  ///< average every this many optimizer steps

  static LocalSgdOptions parse(const std::map<std::string, std::string>& options) {
    const ft::OptionReader r(options, "local_sgd", {"sync_every"});
    LocalSgdOptions out;
    out.sync_every = r.get_int("sync_every", 1, {1}, "steps between averages");
    return out;
  }
};

/// Runs `collective` once on a flat copy of `tensors` (floating point ones
/// only; they share dtype and device here: fp32 master weights and grads)
/// and copies the result back: one message instead of one per tensor.
/// Every rank must pass tensors of the same shapes in the same order.
template <typename Collective>
void through_flat_buffer(const std::vector<at::Tensor>& tensors, Collective collective) {
  std::vector<at::Tensor> parts;
  std::vector<at::Tensor> targets;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_floating_point()) continue;
    parts.push_back(t.detach().reshape({-1}));
    targets.push_back(t);
  }
  if (parts.empty()) return;
  at::Tensor flat = at::cat(parts);
  collective(flat);
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& t : targets) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

class LocalSgdStrategy final : public ft::ReplicatedStrategy, public ft::MemoryModel {
 public:
  // MemoryModel: every rank holds a full replica, its gradients and its own
  // AdamW moments, all fp32 (16 bytes per trainable parameter); sync_every
  // changes how often ranks talk, not what they hold. `ft bench` compares
  // this with state_bytes() per rank. A strategy `auto` should weigh also
  // overrides estimate() (see ft/parallel/abilities.h).
  std::string memory_formula(const std::map<std::string, std::string>&) const override { return "16Ψ"; }
  int64_t theory_bytes(const ft::TheoryInputs& in) const override { return 16 * in.model.params; }

  ft::StepResult step(const ft::StepOptions& options) override {
    ft::StepResult result = ReplicatedStrategy::step(options);
    // Counted here, not from the optimizer, so that every rank agrees on
    // when to average even if a rank skipped an fp16 step.
    ++steps_;
    if (options_.sync_every > 1 && steps_ % options_.sync_every == 0) average_parameters();
    return result;
  }

  // Between averages the replicas differ: save and report their average so a
  // checkpoint is one well-defined model, without disturbing training.
  ft::TensorList model_state() override {
    ft::TensorList state = ReplicatedStrategy::model_state();  // fp32 CPU copies
    if (replicas_may_differ()) average_list(state);
    return state;
  }

  ft::OptimizerState optimizer_state() override {
    ft::OptimizerState state = ReplicatedStrategy::optimizer_state();  // CPU copies
    if (replicas_may_differ()) average_list(state.tensors);
    return state;
  }

 protected:
  void on_setup() override {
    options_ = LocalSgdOptions::parse(ctx_->options);
    // Start from rank 0's weights, whatever each rank initialised.
    if (ctx_->comm->world_size() > 1) {
      through_flat_buffer(model_->parameters(), [&](at::Tensor& flat) { ctx_->comm->broadcast(flat, 0); });
    }
  }

  // Called once per optimizer step, after the last micro-batch's backward.
  void finish_grad_sync() override {
    if (options_.sync_every != 1 || ctx_->comm->world_size() == 1) return;
    through_flat_buffer(grads(), [&](at::Tensor& flat) { ctx_->comm->all_reduce(flat, ft::ReduceOp::Avg); });
  }

 private:
  bool replicas_may_differ() const { return options_.sync_every > 1 && ctx_->comm->world_size() > 1; }

  void average_parameters() {
    through_flat_buffer(trainable(), [&](at::Tensor& flat) { ctx_->comm->all_reduce(flat, ft::ReduceOp::Avg); });
  }

  void average_list(ft::TensorList& list) {
    std::vector<at::Tensor> tensors;
    for (auto& [name, t] : list) tensors.push_back(t);
    through_flat_buffer(tensors, [&](at::Tensor& flat) { ctx_->comm->all_reduce(flat, ft::ReduceOp::Avg); });
  }

  LocalSgdOptions options_;
  int64_t steps_ = 0;  // step() calls so far in this process
};

}  // namespace

FT_STRATEGY_PLUGIN("local_sgd", "1.0.0",
                   FT_STRATEGY("local_sgd",
                               "Local SGD: ranks step alone, average parameters every "
                               "strategy.options.sync_every steps (1 = average grads each step)",
                               [] { return new LocalSgdStrategy(); }))
