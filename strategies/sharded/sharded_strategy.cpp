// ShardedStrategy: setup, the unit runner, backward hooks and the step.
// Checkpoint/state code is in sharded_state.cpp.
#include "sharded_strategy.h"

#include <c10/core/GradMode.h>
#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "ft/comm.h"
#include "ft/device_mesh.h"
#include "ft/error.h"
#include "ft/grad_buffer.h"
#include "ft/model.h"
#include "ft/param_plan.h"
#include "ft/precision.h"
#include "ft/trace.h"

namespace ft {

// ---------------------------------------------------------------- policies

ShardingPolicy ShardingPolicy::zero(ZeroStage stage) {
  ShardingPolicy p;
  switch (stage) {
    case ZeroStage::kDisabled:
      fail("zero: stage 0 is plain data parallelism; use the ddp strategy");
    case ZeroStage::kOptimizerStates: p.name = "zero1"; break;
    case ZeroStage::kGradients: p.name = "zero2"; p.shard_grads = true; break;
    case ZeroStage::kWeights:
      p.name = "zero3";
      p.shard_grads = true;
      p.shard_params = true;
      break;
  }
  return p;
}

ShardingPolicy ShardingPolicy::fsdp(FsdpSharding mode, int world_size, int shard_group_size) {
  ShardingPolicy p;
  p.name = "fsdp";
  switch (mode) {
    case FsdpSharding::kFullShard:
      p.shard_grads = p.shard_params = true;
      break;
    case FsdpSharding::kShardGradOp:
      p.shard_grads = p.shard_params = true;
      p.reshard_after_forward = false;
      break;
    case FsdpSharding::kNoShard:
      p.shard_optimizer = false;
      break;
    case FsdpSharding::kHybridShard:
    case FsdpSharding::kHybridShardZero2: {
      p.shard_grads = p.shard_params = true;
      p.reshard_after_forward = mode == FsdpSharding::kHybridShard;
      const int s = shard_group_size;
      if (s < 1 || world_size % s != 0) {
        fail("strategy.options.shard_group_size: {} does not divide the {} ranks into equal shard groups; "
             "pick a divisor of {}", s, world_size, world_size);
      }
      if (s == world_size) {
        fail("strategy.options.shard_group_size: one shard group of all {} ranks is FULL_SHARD; use FULL_SHARD, "
             "or set shard_group_size to a smaller divisor of {}", world_size, world_size);
      }
      if (s == 1) {
        fail("strategy.options.shard_group_size: shard groups of one rank replicate everything; use NO_SHARD, "
             "or set shard_group_size to a divisor of {} above 1", world_size);
      }
      p.shard_group_size = s;
      break;
    }
  }
  return p;
}

// ---------------------------------------------------------------- glue classes

class ShardedStrategy::Runner final : public UnitRunner {
 public:
  explicit Runner(ShardedStrategy* owner) : owner_(owner) {}
  at::Tensor run(int index, RunPass pass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    return owner_->run_unit(index, pass, input, fn);
  }

 private:
  ShardedStrategy* owner_;
};

// ---------------------------------------------------------------- setup

ShardedStrategy::ShardedStrategy(ShardingPolicy policy) : policy_(std::move(policy)) {}

ShardedStrategy::~ShardedStrategy() {
  grad_buffer_.reset();  // its hooks point at this object
  if (model_) model_->set_unit_runner(nullptr);
}

Comm& ShardedStrategy::shard_comm() { return mesh_ ? mesh_->comm("shard") : *ctx_->comm; }
int ShardedStrategy::shard_world() const {
  if (!policy_.shard_optimizer) return 1;
  return mesh_ ? mesh_->size("shard") : ctx_->comm->world_size();
}
int ShardedStrategy::shard_rank() const {
  if (!policy_.shard_optimizer) return 0;
  return mesh_ ? mesh_->coordinate("shard") : ctx_->comm->rank();
}
bool ShardedStrategy::writes_shards() const {
  if (!policy_.shard_optimizer) return ctx_->comm->rank() == 0;
  return !mesh_ || mesh_->coordinate("replicate") == 0;
}

void ShardedStrategy::setup(std::shared_ptr<BertForSequenceClassification> model, const OptimizerSpec& optimizer,
                            const ParamPlan& plan, StrategyContext& ctx) {
  ctx_ = &ctx;
  model_ = std::move(model);
  model_->to(ctx.device);
  if (policy_.limit_all_gathers < 0) fail("strategy.options.limit_all_gathers: must be >= 0");
  if (policy_.shard_params && !policy_.shard_grads) fail("{}: sharded parameters need sharded gradients", policy_.name);
  if (policy_.shard_group_size > 0) {
    const int s = policy_.shard_group_size;
    mesh_ = std::make_unique<DeviceMesh>(*ctx.comm, std::vector<MeshDim>{{"replicate", ctx.comm->world_size() / s},
                                                                         {"shard", s}},
                                         "strategy.options.shard_group_size");
    if (ctx.comm->rank() == 0) {
      std::fputs(fmt::format("{}: hybrid sharding over the mesh {}\n", policy_.name, mesh_->describe("shard")).c_str(),
                 stdout);
      std::fflush(stdout);
    }
  }
  apply_trainable(*model_, plan);
  build_units(plan);

  std::vector<OptimSlot> slots;
  for (const SlotRef& r : slots_) {
    const FlatParam& f = *units_[static_cast<size_t>(r.unit)];
    const FlatEntry& e = f.layout().entries[static_cast<size_t>(r.entry)];
    auto it = plan.find(e.name);
    const ParamSettings s = it == plan.end() ? ParamSettings{} : it->second;
    slots.push_back({e.name, f.shard().narrow(0, r.piece.offset_in_shard, r.piece.numel), s.weight_decay, s.lr_scale});
  }
  optimizer_ = std::make_unique<TensorOptimizer>(optimizer, std::move(slots));

  build_grad_buffer();
  norm_buf_ = at::zeros({1}, at::kDouble);
  if (policy_.shard_params) {
    runner_ = std::make_unique<Runner>(this);
    model_->set_unit_runner(runner_.get());
  }
  note_gathered_bytes();
}

void ShardedStrategy::build_units(const ParamPlan& plan) {
  Comm& comm = *ctx_->comm;
  const auto unit_params = model_->unit_parameters();
  const int n = static_cast<int>(unit_params.size());
  c10::NoGradGuard no_grad;
  for (int u = 0; u < n; ++u) {
    const TensorList& params = unit_params[static_cast<size_t>(u)];
    // Rank 0's weights everywhere, so the shards form one consistent model.
    if (comm.world_size() > 1 && !params.empty()) {
      std::vector<at::Tensor> parts;
      for (const auto& [name, t] : params) parts.push_back(t.detach().reshape({-1}));
      at::Tensor flat = at::cat(parts);
      comm.broadcast(flat, 0);
      int64_t off = 0;
      for (const auto& [name, t] : params) {
        t.detach().copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    }
    std::vector<bool> trainable;
    for (const auto& [name, t] : params) {
      auto it = plan.find(name);
      trainable.push_back(it == plan.end() || it->second.trainable);
    }
    units_.push_back(std::make_unique<FlatParam>(u, params, trainable, shard_world(), shard_rank(),
                                                 policy_.shard_params, &gather_pool_));
    const FlatParam& f = *units_.back();
    int count = 0;
    for (const FlatPiece& piece : f.layout().pieces(shard_rank())) {
      if (f.layout().entries[static_cast<size_t>(piece.entry)].trainable) slots_.push_back({u, piece.entry, piece});
    }
    for (const auto& e : f.layout().entries) count += e.trainable ? 1 : 0;
    trainable_count_.push_back(count);
    has_frozen_.push_back(count < static_cast<int>(f.layout().entries.size()));
  }
  ready_.assign(static_cast<size_t>(n), false);
  input_grad_done_.assign(static_cast<size_t>(n), false);
  prefetched_unit_.assign(static_cast<size_t>(n), false);
}

void ShardedStrategy::build_grad_buffer() {
  // The buffer's params: every trainable weight, unit by unit (model order).
  std::vector<at::Tensor> trainable;
  std::vector<std::vector<int>> index(units_.size());  // per unit and entry: buffer param, or -1 if frozen
  for (size_t u = 0; u < units_.size(); ++u) {
    const FlatParam& f = *units_[u];
    for (size_t i = 0; i < f.params().size(); ++i) {
      const bool t = f.layout().entries[i].trainable;
      index[u].push_back(t ? static_cast<int>(trainable.size()) : -1);
      if (t) trainable.push_back(f.params()[i]);
    }
  }
  if (trainable.empty()) return;
  GradBufferOptions bo;
  bo.trace = ctx_->trace;
  CommHook hook;
  std::vector<int> bucket_unit;  // reduce-scattered: bucket b holds unit bucket_unit[b]
  if (policy_.shard_grads) {
    // Last unit first: backward fills it first. Units that train nothing get no bucket.
    for (int u = static_cast<int>(units_.size()) - 1; u >= 0; --u) {
      const auto uu = static_cast<size_t>(u);
      if (trainable_count_[uu] == 0) continue;
      const FlatLayout& l = units_[uu]->layout();
      GradBufferUnit unit;
      for (size_t i = 0; i < l.entries.size(); ++i) unit.segments.push_back({index[uu][i], l.entries[i].numel});
      unit.padded_numel = l.padded_numel;
      bo.units.push_back(std::move(unit));
      bucket_unit.push_back(u);
    }
    bo.trace_name = "reduce-scatter unit";
    hook = mesh_ ? hybrid_reduce_hook(shard_comm(), mesh_->comm("replicate")) : reduce_scatter_avg_hook(*ctx_->comm);
  } else {
    bo.bucket_bytes = std::max<int64_t>(4, static_cast<int64_t>(policy_.bucket_mb * 1024.0 * 1024.0));
    hook = allreduce_avg_hook(*ctx_->comm);
  }
  if (policy_.shard_params) {
    // A unit whose grads are all accumulated no longer needs its gathered weights.
    bo.on_bucket_ready = [this, bucket_unit](int b) {
      const int u = bucket_unit[static_cast<size_t>(b)];
      ready_[static_cast<size_t>(u)] = true;
      reshard_if_backward_done(u);
    };
  }
  grad_buffer_ = std::make_unique<GradBuffer>(trainable, bo, std::move(hook));
  if (!policy_.shard_grads) return;
  grad_shards_.assign(units_.size(), at::Tensor());
  for (size_t b = 0; b < bucket_unit.size(); ++b) {
    const auto u = static_cast<size_t>(bucket_unit[b]);
    const BucketInfo& info = grad_buffer_->buckets()[b];
    const FlatLayout& l = units_[u]->layout();
    grad_shards_[u] = grad_buffer_->buffers()[0].narrow(0, info.offset + l.shard_begin(shard_rank()), l.shard_numel());
  }
}

// ---------------------------------------------------------------- forward

at::Tensor ShardedStrategy::forward(const Batch& batch) {
  const Batch b = model_inputs_on(batch, ctx_->device);
  auto autocast = ctx_->precision->autocast();
  return model_->forward(b);
}

void ShardedStrategy::note_gathered_bytes() {
  if (!policy_.shard_params) return;
  int64_t held = 0;
  for (const auto& f : units_) held += f->full_bytes_held();
  peak_full_bytes_ = std::max(peak_full_bytes_, held);
}

namespace {
int64_t gathered_bytes(const FlatParam& f) {
  return f.layout().padded_numel * static_cast<int64_t>(f.shard().element_size());
}

// wait_for_unshard, traced on the comm track from issue (here, or in
// prefetch) to completion.
void traced_wait_for_unshard(FlatParam& f, int unit, Comm& comm, Tracer* trace) {
  const ShardedState before = f.state();
  if (trace && before == ShardedState::kSharded) trace->begin_async("all-gather unit", unit);
  f.wait_for_unshard(comm);
  if (trace && before != ShardedState::kUnsharded) trace->end_async("all-gather unit", unit, gathered_bytes(f));
}
}  // namespace

void ShardedStrategy::prefetch(int unit) {
  if (unit < 0 || unit >= static_cast<int>(units_.size())) return;
  FlatParam& f = *units_[static_cast<size_t>(unit)];
  if (f.state() != ShardedState::kSharded || prefetched_ >= policy_.limit_all_gathers) return;
  if (ctx_->trace) ctx_->trace->begin_async("all-gather unit", unit);
  f.unshard(shard_comm());
  prefetched_unit_[static_cast<size_t>(unit)] = true;
  ++prefetched_;
  note_gathered_bytes();
}

void ShardedStrategy::release_prefetch(int unit) {
  if (!prefetched_unit_[static_cast<size_t>(unit)]) return;
  prefetched_unit_[static_cast<size_t>(unit)] = false;
  --prefetched_;
}

void ShardedStrategy::gather_for_use(int unit) {
  release_prefetch(unit);
  traced_wait_for_unshard(*units_[static_cast<size_t>(unit)], unit, shard_comm(), ctx_->trace);
  note_gathered_bytes();
}

void ShardedStrategy::reshard_unit(int unit) {
  FlatParam& f = *units_[static_cast<size_t>(unit)];
  if (!f.params_sharded()) return;
  // An all-gather still writing into the storage must finish before it goes.
  if (f.state() == ShardedState::kUnsharding) traced_wait_for_unshard(f, unit, shard_comm(), ctx_->trace);
  release_prefetch(unit);
  f.reshard();
}

// Activation checkpointing runs a layer twice: kNoGraph in forward (freed
// afterwards as any training forward, per reshard_after_forward) and
// kRecompute in backward, whose own backward follows at once: its weights
// stay gathered for it (pre_backward finds them there) instead of being
// freed and gathered a third time, and no forward-order prefetch is issued
// from inside backward.
at::Tensor ShardedStrategy::run_unit(int unit, RunPass pass, const at::Tensor& input,
                                     const std::function<at::Tensor(const at::Tensor&)>& fn) {
  gather_for_use(unit);
  const std::vector<int> reads = model_->units_read_by(unit);  // the tied decoder reads unit 0
  for (int other : reads) gather_for_use(other);
  if (policy_.forward_prefetch && pass != RunPass::kRecompute) {
    for (int k = 1; k <= policy_.limit_all_gathers; ++k) prefetch(unit + k);
  }
  at::Tensor out = fn(input);
  const bool training = at::GradMode::is_enabled() || pass == RunPass::kNoGraph;
  const bool keep = pass == RunPass::kRecompute || (training && !policy_.reshard_after_forward);
  if (!keep) {
    reshard_unit(unit);
    for (int other : reads) reshard_unit(other);  // gathered again by pre_backward, like the unit itself
  }
  if (at::GradMode::is_enabled() && out.requires_grad()) {
    out.register_hook([this, unit](const at::Tensor& grad) {
      pre_backward(unit);
      return grad;
    });
  }
  return out;
}

// ---------------------------------------------------------------- backward

void ShardedStrategy::backward(const at::Tensor& loss, bool sync_grads) {
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(input_grad_done_.begin(), input_grad_done_.end(), false);
  callback_queued_ = false;
  if (grad_buffer_) grad_buffer_->start_backward(sync_grads);
  ctx_->precision->scale_loss(loss).backward();
}

namespace {
void queue_end_callback(bool& queued, const std::function<void()>& fn) {
  if (queued) return;
  torch::autograd::Engine::get_default_engine().queue_callback(fn);
  queued = true;
}
}  // namespace

void ShardedStrategy::pre_backward(int unit) {
  queue_end_callback(callback_queued_, [this] { on_backward_end(); });
  // The grad of this unit's output is the grad of the next unit's input:
  // that unit's backward has read its frozen weights for the last time.
  if (unit + 1 < static_cast<int>(units_.size())) {
    input_grad_done_[static_cast<size_t>(unit) + 1] = true;
    reshard_if_backward_done(unit + 1);
  }
  gather_for_use(unit);
  // A unit read here stays gathered until its own grads are done.
  for (int other : model_->units_read_by(unit)) gather_for_use(other);
  if (policy_.backward_prefetch) {
    for (int k = 1; k <= policy_.limit_all_gathers; ++k) prefetch(unit - k);
  }
}

// All trainable grads of a unit have arrived; its frozen weights may still be
// needed for the grad of its input (a frozen query weight under LoRA), so a
// unit that has some waits for that too. Units left over go at backward end.
void ShardedStrategy::reshard_if_backward_done(int unit) {
  const auto u = static_cast<size_t>(unit);
  const bool grads_done = ready_[u] || trainable_count_[u] == 0;
  if (grads_done && (!has_frozen_[u] || input_grad_done_[u])) reshard_unit(unit);
}

void ShardedStrategy::on_backward_end() {
  callback_queued_ = false;
  // Units whose grads did not all arrive (unused parameters) or that have no
  // trainable parameters: done now, in the same order on every rank.
  for (size_t u = 0; u < units_.size(); ++u) {
    ready_[u] = true;
    reshard_unit(static_cast<int>(u));
  }
}

// ---------------------------------------------------------------- step

std::vector<at::Tensor> ShardedStrategy::slot_grads() const {
  std::vector<at::Tensor> out;
  out.reserve(slots_.size());
  for (const SlotRef& r : slots_) {
    if (policy_.shard_grads) {
      out.push_back(grad_shards_[static_cast<size_t>(r.unit)].narrow(0, r.piece.offset_in_shard, r.piece.numel));
      continue;
    }
    const at::Tensor& g = units_[static_cast<size_t>(r.unit)]->params()[static_cast<size_t>(r.entry)].grad();
    out.push_back(g.defined() ? g.reshape({-1}).narrow(0, r.piece.offset_in_entry, r.piece.numel) : at::Tensor());
  }
  return out;
}

StepResult ShardedStrategy::step(const StepOptions& options) {
  Comm& comm = shard_comm();
  if (grad_buffer_) grad_buffer_->finish_sync();
  auto grads = slot_grads();
  StepResult result;
  bool found_inf = ctx_->precision->unscale_and_check(grads);
  // Replicas hold the same averaged shards, so the shard group decides alone.
  if (ctx_->precision->uses_loss_scaling() && shard_world() > 1) {
    at::Tensor flag = at::full({1}, found_inf ? 1.0f : 0.0f, at::kFloat);
    comm.all_reduce(flag, ReduceOp::Max);
    found_inf = flag.item<float>() > 0.0f;
  }
  result.skipped = found_inf;
  if (!found_inf) {
    double sq = grad_norm_squared(grads);
    if (shard_world() > 1) {
      norm_buf_.fill_(sq);  // kept from step to step: the step allocates nothing
      comm.all_reduce(norm_buf_, ReduceOp::Sum);
      sq = norm_buf_.item<double>();
    }
    result.grad_norm = std::sqrt(sq);
    clip_grads(grads, result.grad_norm, options.max_grad_norm);
    optimizer_->step(options.lr, grads);
  } else {
    result.grad_norm = std::nan("");
  }
  {
    c10::NoGradGuard no_grad;
    if (grad_buffer_) grad_buffer_->zero();
  }
  ctx_->precision->update(found_inf);
  // Replicated parameters (ZeRO-1/2): every rank re-assembles the full
  // model from the updated shards. Sharded ones gather on next use.
  if (!found_inf && !policy_.shard_params && shard_world() > 1) {
    std::vector<Work> works;
    for (size_t u = 0; u < units_.size(); ++u) {
      if (ctx_->trace) ctx_->trace->begin_async("all-gather unit", static_cast<int64_t>(u));
      works.push_back(units_[u]->gather_from_shards_async(comm));
    }
    for (size_t u = 0; u < works.size(); ++u) {
      works[u].wait();
      if (ctx_->trace) ctx_->trace->end_async("all-gather unit", static_cast<int64_t>(u), gathered_bytes(*units_[u]));
    }
  }
  return result;
}

void ShardedStrategy::teardown() { grad_buffer_.reset(); }

}  // namespace ft
