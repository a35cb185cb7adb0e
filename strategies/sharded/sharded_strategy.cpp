// ShardedStrategy: policies, setup, backward and the step. The per-unit
// engine is core's FlatParamGroup; checkpoint/state code is sharded_state.cpp.
#include "sharded_strategy.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/comm/comm.h"
#include "ft/comm/device_mesh.h"
#include "ft/base/error.h"
#include "ft/parallel/grad_buffer.h"
#include "ft/model/model.h"
#include "ft/optim/param_plan.h"
#include "ft/parallel/param_sync.h"
#include "ft/optim/precision.h"
#include "ft/observe/trace.h"

namespace ft {

// ---------------------------------------------------------------- policies

ShardingPolicy ShardedStrategy::read_policy(const std::map<std::string, std::string>&, int, int) const {
  return policy_;
}

ShardingPolicy ShardingPolicy::zero(ZeroStage stage) {
  ShardingPolicy p;
  switch (stage) {
    case ZeroStage::kDisabled:
      fail("zero: stage 0 is plain data parallelism; use the ddp strategy");
    case ZeroStage::kOptimizerStates: p.name = "zero1"; break;
    case ZeroStage::kGradients: p.name = "zero2"; p.grads_sharded = true; break;
    case ZeroStage::kWeights:
      p.name = "zero3";
      p.grads_sharded = true;
      p.params_sharded = true;
      break;
  }
  return p;
}

ShardingPolicy ShardingPolicy::fsdp(FsdpSharding mode, int world_size, int shard_group_size) {
  ShardingPolicy p;
  p.name = "fsdp";
  switch (mode) {
    case FsdpSharding::kFullShard:
      p.grads_sharded = p.params_sharded = true;
      break;
    case FsdpSharding::kShardGradOp:
      p.grads_sharded = p.params_sharded = true;
      p.reshard_after_forward = false;
      break;
    case FsdpSharding::kNoShard:
      p.shard_optimizer = false;
      break;
    case FsdpSharding::kHybridShard:
    case FsdpSharding::kHybridShardZero2: {
      p.grads_sharded = p.params_sharded = true;
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

// ---------------------------------------------------------------- setup

ShardedStrategy::ShardedStrategy(ShardingPolicy policy) : policy_(std::move(policy)) {}

ShardedStrategy::~ShardedStrategy() {
  grad_buffer_.reset();
  group_.reset();  // its hooks and the model's unit runner point into it
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

void ShardedStrategy::setup(std::shared_ptr<EncoderModel> model, const OptimizerSpec& optimizer,
                            const ParamPlan& plan, StrategyContext& ctx) {
  // Options are checked before anything else, so every rank fails alike.
  const DistEnv& env = ctx.comm->env();
  policy_ = read_policy(ctx.options, env.world_size, std::max(1, env.local_world_size));
  adopt(std::move(model), plan, ctx);
  if (policy_.limit_all_gathers < 0) fail("strategy.options.limit_all_gathers: must be >= 0");
  if (policy_.params_sharded && !policy_.grads_sharded) fail("{}: sharded parameters need sharded gradients", policy_.name);
  if (policy_.shard_group_size > 0) {
    const int s = policy_.shard_group_size;
    mesh_ = std::make_unique<DeviceMesh>(*ctx.comm, std::vector<MeshDim>{{"replicate", ctx.comm->world_size() / s},
                                                                         {"shard", s}},
                                         "strategy.options.shard_group_size");
    if (ctx.comm->rank() == 0) {
      const std::string mesh = mesh_->describe("shard");
      ctx.events.emit("sharded.hybrid",
                      nlohmann::json{{"strategy", policy_.name}, {"replicate", ctx.comm->world_size() / s},
                                     {"shard", s}},
                      fmt::format("{}: hybrid sharding over the mesh {}", policy_.name, mesh));
    }
  }
  build_group(plan);

  std::vector<OptimSlot> slots;
  for (const SlotRef& r : slots_) {
    const FlatParam& f = *units()[static_cast<size_t>(r.unit)];
    const FlatEntry& e = f.layout().entries[static_cast<size_t>(r.entry)];
    auto it = plan.find(e.name);
    const ParamSettings s = it == plan.end() ? ParamSettings{} : it->second;
    slots.push_back({e.name, f.shard().narrow(0, r.piece.offset_in_shard, r.piece.numel), s.weight_decay, s.lr_scale});
  }
  optimizer_ = std::make_unique<SplitOptimizer>(optimizer, std::move(slots));
  if (!policy_.grads_sharded) build_grad_buffer();
}

void ShardedStrategy::build_group(const ParamPlan& plan) {
  // Rank 0's weights everywhere, so the shards form one consistent model;
  // unit by unit, so the wire copy is one unit, not the model.
  for (const auto& unit : model_->unit_parameters()) {
    std::vector<at::Tensor> tensors;
    for (const auto& [name, t] : unit) tensors.push_back(t);
    broadcast_tensors(*ctx_->comm, tensors, 0);
  }
  FlatParamGroupOptions o = policy_;
  // Hybrid sharding averages gradients over the whole world, which the
  // table's row exchange (inside the shard group) would not.
  o.shard_word_table = policy_.shard_word_table && !mesh_;
  o.trace = ctx_->trace;
  CommHook reduce;
  if (policy_.grads_sharded) {
    reduce = mesh_ ? hybrid_reduce_hook(shard_comm(), mesh_->comm("replicate")) : reduce_scatter_avg_hook(shard_comm());
  }
  auto trainable = [&plan](const std::string& name) {
    auto it = plan.find(name);
    return it == plan.end() || it->second.trainable;
  };
  group_ = std::make_unique<FlatParamGroup>(*model_, trainable, shard_comm(), shard_world(), shard_rank(), o,
                                            std::move(reduce));
  for (size_t u = 0; u < units().size(); ++u) {
    const FlatParam& f = *units()[u];
    for (const FlatPiece& piece : f.layout().pieces(shard_rank())) {
      if (f.layout().entries[static_cast<size_t>(piece.entry)].trainable) {
        slots_.push_back({static_cast<int>(u), piece.entry, piece});
      }
    }
  }
}

// zero1 / NO_SHARD: DDP's bucketed all-reduce of full gradients.
void ShardedStrategy::build_grad_buffer() {
  std::vector<at::Tensor> trainable;
  for (const auto& f : units()) {
    for (size_t i = 0; i < f->params().size(); ++i) {
      if (f->layout().entries[i].trainable) trainable.push_back(f->params()[i]);
    }
  }
  if (trainable.empty()) return;
  GradBufferOptions bo;
  bo.trace = ctx_->trace;
  bo.bucket_bytes = policy_.bucket_bytes;
  grad_buffer_ = std::make_unique<GradBuffer>(trainable, bo, allreduce_avg_hook(*ctx_->comm));
}

// ---------------------------------------------------------------- forward / backward

at::Tensor ShardedStrategy::forward(const Batch& batch) {
  const Batch b = model_inputs_on(batch, ctx_->device);
  auto autocast = ctx_->precision->autocast();
  return model_->forward(b);
}

void ShardedStrategy::backward(const at::Tensor& loss, bool sync_grads) {
  group_->start_backward(sync_grads);
  if (grad_buffer_) grad_buffer_->start_backward(sync_grads);
  ctx_->precision->scale_loss(loss).backward();
}

// ---------------------------------------------------------------- step

std::vector<at::Tensor> ShardedStrategy::slot_grads() const {
  std::vector<at::Tensor> out;
  out.reserve(slots_.size());
  for (const SlotRef& r : slots_) {
    if (policy_.grads_sharded) {
      out.push_back(group_->grad_shard(r.unit).narrow(0, r.piece.offset_in_shard, r.piece.numel));
      continue;
    }
    const at::Tensor& g = units()[static_cast<size_t>(r.unit)]->params()[static_cast<size_t>(r.entry)].grad();
    out.push_back(g.defined() ? g.reshape({-1}).narrow(0, r.piece.offset_in_entry, r.piece.numel) : at::Tensor());
  }
  return out;
}

StepResult ShardedStrategy::step(const StepOptions& options) {
  Comm& comm = shard_comm();
  group_->finish_grad_sync();
  if (grad_buffer_) grad_buffer_->finish_sync();
  const auto grads = slot_grads();
  // Replicas hold the same averaged shards, so the shard group decides alone.
  const StepResult result = optimizer_->update(grads, *ctx_->precision, options, &comm, grads);
  if (grad_buffer_) {
    c10::NoGradGuard no_grad;
    grad_buffer_->zero();  // the whole buffer: the update zeroed only this rank's pieces
  }
  // Replicated parameters (ZeRO-1/2): every rank re-assembles the full
  // model from the updated shards. Sharded ones gather on next use.
  if (!result.skipped && !policy_.params_sharded && shard_world() > 1) {
    std::vector<Work> works;
    for (size_t u = 0; u < units().size(); ++u) {
      if (ctx_->trace) ctx_->trace->begin_async("all-gather unit", static_cast<int64_t>(u));
      works.push_back(units()[u]->gather_from_shards_async(comm));
    }
    for (size_t u = 0; u < works.size(); ++u) {
      works[u].wait();
      if (ctx_->trace) {
        const FlatLayout& l = units()[u]->layout();
        ctx_->trace->end_async("all-gather unit", static_cast<int64_t>(u), l.padded_numel * 4);
      }
    }
  }
  return result;
}

void ShardedStrategy::teardown() { grad_buffer_.reset(); }

}  // namespace ft
