// TensorStrategy: the group operators, setup, step and full checkpoints.
#include "tensor_strategy.h"

#include <c10/core/GradMode.h>
#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/optim/param_plan.h"
#include "ft/config/options.h"
#include "ft/parallel/param_sync.h"
#include "ft/optim/precision.h"
#include "ft/io/saved_state.h"

namespace ft {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Comm* comm_of(AutogradContext* ctx) { return reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt()); }

at::Tensor summed(Comm& c, const at::Tensor& t) {
  at::Tensor s = t.contiguous().clone();
  c.all_reduce(s, ReduceOp::Sum);
  return s;
}

// Megatron's f: the input of a column-parallel block. Every rank's slice
// contributes to the input's gradient.
struct Enter : torch::autograd::Function<Enter> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(*comm_of(ctx), grads[0]), at::Tensor()};
  }
};

// Megatron's g: the output of a row-parallel block, summed over the group.
struct Reduce : torch::autograd::Function<Reduce> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    return summed(*reinterpret_cast<Comm*>(comm), x);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

// Partial attention scores of ranks sharing a head: the scores are their
// sum, and each rank's score gradient is only its share, so both directions sum.
struct HeadSum : torch::autograd::Function<HeadSum> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return summed(*reinterpret_cast<Comm*>(comm), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(*comm_of(ctx), grads[0]), at::Tensor()};
  }
};

// A vocab-parallel decoder's logits: every rank's columns joined; each
// rank's loss is the same, so its own columns of the gradient are the truth.
struct GatherColumns : torch::autograd::Function<GatherColumns> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    Comm& c = *reinterpret_cast<Comm*>(comm);
    ctx->saved_data["begin"] = static_cast<int64_t>(c.rank()) * x.size(-1);
    ctx->saved_data["width"] = x.size(-1);
    std::vector<at::Tensor> parts;
    c.all_gather(parts, x.contiguous());
    return at::cat(parts, -1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t begin = ctx->saved_data["begin"].toInt(), width = ctx->saved_data["width"].toInt();
    return {grads[0].narrow(-1, begin, width).contiguous(), at::Tensor()};
  }
};

int64_t handle(Comm& c) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&c)); }

}  // namespace

int tensor_parallel_size_from(const std::map<std::string, std::string>& options, int world_size) {
  const OptionReader r(options, "tensor", {"tp_size"});
  const int t = r.get_int("tp_size", world_size, {1}, "ranks per tensor-parallel group, e.g. 2");
  if (world_size % t != 0) {
    fail("strategy.options.tp_size: {} does not divide the {} ranks into whole tensor-parallel groups; pick a divisor "
         "of {}",
         t, world_size, world_size);
  }
  return t;
}

void TensorStrategy::setup(std::shared_ptr<EncoderModel> model, const OptimizerSpec& optimizer,
                           const ParamPlan& plan, StrategyContext& ctx) {
  adopt(std::move(model), plan, ctx);
  Comm& world = *ctx.comm;
  const int t = tensor_parallel_size_from(ctx.options, world.world_size());
  mesh_ = std::make_unique<DeviceMesh>(world, std::vector<MeshDim>{{"dp", world.world_size() / t}, {"tp", t}},
                                       "strategy.options.tp_size");
  {  // rank 0's weights everywhere, before slicing
    std::vector<at::Tensor> all;
    for (const auto& [name, w] : model_->weights()) all.push_back(w);
    broadcast_tensors(world, all, 0);
  }
  const int64_t heads = model_->config().num_attention_heads;
  if (t > 1) {
    const int64_t comm = handle(tp());
    TensorParallelOps ops;
    ops.rank = tp().rank();
    ops.size = t;
    ops.enter = [comm](const at::Tensor& x) { return Enter::apply(x, comm); };
    ops.reduce = [comm](const at::Tensor& x) { return Reduce::apply(x, comm); };
    ops.gather_columns = [comm](const at::Tensor& x) { return GatherColumns::apply(x, comm); };
    if (t > heads && t % heads == 0) {  // neighbouring tp ranks share a head
      const int per_head = t / static_cast<int>(heads);
      std::vector<std::vector<int>> groups(static_cast<size_t>(heads));
      for (int r = 0; r < t; ++r) groups[static_cast<size_t>(r / per_head)].push_back(r);
      head_comm_ = tp().split("tp_head", groups);
      const int64_t head = handle(*head_comm_);
      ops.head_sum = [head](const at::Tensor& x) { return HeadSum::apply(x, head); };
    }
    TensorParallelSplit split = model_->shard_tensor_parallel(ops);
    split_ = std::move(split.sliced);
    partial_ = std::move(split.partial_grads);
  }
  auto slots = slots_from_plan(model_->weights(), plan);
  for (const auto& s : slots) {
    trainable_.push_back(s.param);
    sliced_.push_back(split_.count(s.name) > 0);
    if (partial_.count(s.name)) partial_grads_.push_back(s.param);
  }
  optimizer_ = std::make_unique<SplitOptimizer>(optimizer, std::move(slots));
  if (world.rank() == 0) report_layout(t);
}

// How each layer is split over the tensor-parallel group, as the
// "tensor.layout" event.
void TensorStrategy::report_layout(int64_t t) const {
  const auto& c = model_->config();
  const int64_t heads = c.num_attention_heads;
  const bool vocab = split_.count(c.family().word_embeddings()) > 0;
  const std::string share = t <= heads ? fmt::format("{} of {} heads", heads / t, heads)
                                       : fmt::format("1/{} of a head ({} of {} dims)", t / heads, c.hidden_size / t,
                                                     c.hidden_size / heads);
  const std::string mesh = mesh_->describe("tp");
  nlohmann::json dims;
  for (const auto& d : mesh_->dims()) dims[d.name] = d.size;
  ctx_->events.emit(
      "tensor.layout",
      nlohmann::json{{"tp", t}, {"heads", heads}, {"attention_dims_per_rank", c.hidden_size / t},
                     {"ffn_units", c.intermediate_size}, {"ffn_units_per_rank", c.intermediate_size / t},
                     {"vocab_parallel", vocab}, {"vocab_rows_per_rank", vocab ? c.vocab_size / t : c.vocab_size},
                     {"mesh", dims}},
      fmt::format("tensor: {} rank(s) per layer: {} and {} of {} FFN units each; word embeddings {}; mesh {}", t,
                  share, c.intermediate_size / t, c.intermediate_size,
                  vocab ? fmt::format("vocab-parallel ({} rows each)", c.vocab_size / t) : std::string("replicated"),
                  mesh));
}

at::Tensor TensorStrategy::forward(const Batch& batch) {
  const Batch b = model_inputs_on(batch, ctx_->device);
  auto autocast = ctx_->precision->autocast();
  return model_->forward(b);
}

void TensorStrategy::backward(const at::Tensor& loss, bool sync_grads) {
  ctx_->precision->scale_loss(loss).backward();
  if (!sync_grads) return;
  sum_grads(tp(), partial_grads_);  // each rank holds its slice's share of these gradients
  average_grads(data_comm(), trainable_);  // data-parallel replicas
}

StepResult TensorStrategy::step(const StepOptions& options) {
  std::vector<at::Tensor> grads, sliced, whole;
  for (size_t i = 0; i < trainable_.size(); ++i) {
    grads.push_back(trainable_[i].grad());
    (sliced_[i] ? sliced : whole).push_back(trainable_[i].grad());
  }
  // Slices are disjoint parts of one tensor; replicated tensors count once.
  return optimizer_->update(grads, *ctx_->precision, options, &tp(), sliced, whole);
}

// ---------------------------------------------------------------- state

// Every weight (`optimizer` false) or every optimizer buffer ("<param>.<buffer>",
// cut as its parameter): this rank's slice of a cut tensor, whole otherwise.
StatePlacement TensorStrategy::placement(bool optimizer) {
  StatePlacement out(tp());
  auto add = [&](const std::string& key, const std::string& param, const at::Tensor& local) {
    auto it = split_.find(param);
    if (it == split_.end()) return out.add(key, local.sizes().vec(), local, Placement::replicated());
    std::vector<int64_t> shape = local.sizes().vec();
    shape[static_cast<size_t>(it->second.dim)] *= tp().world_size();
    out.add(key, std::move(shape), local, Placement::cut_by(it->second));
  };
  if (!optimizer) {
    for (const auto& [name, w] : model_->weights()) add(name, name, w);
  } else {
    for (const auto& [key, t] : optimizer_->state().tensors) add(key, key.substr(0, key.rfind('.')), t);
  }
  return out;
}

TensorList TensorStrategy::model_state() { return placement(false).gather(); }

OptimizerState TensorStrategy::optimizer_state() {
  OptimizerState s;
  s.step = optimizer_->step_count();
  s.tensors = placement(true).gather();
  return s;
}

void TensorStrategy::load_state(const TensorList& model, const OptimizerState* optimizer) {
  placement(false).load(SavedTensors::weights(model), "checkpoint", ShapeCheck::kShape);
  if (!optimizer) return;
  OptimizerState own;
  own.step = optimizer->step;
  own.tensors = placement(true).parts(SavedTensors::optimizer(*optimizer), "checkpoint optimizer state",
                                      ShapeCheck::kElements);
  optimizer_->load_state(own, "checkpoint optimizer state");
}

StateBytes TensorStrategy::state_bytes() const {
  return held_state_bytes(model_->parameters(), *optimizer_);  // the slices, where sliced
}

}  // namespace ft
