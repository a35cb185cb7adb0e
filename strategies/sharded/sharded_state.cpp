// ShardedStrategy: full (consolidated) state for ordinary checkpoints, the
// per-rank sharded save, loading full state saved by any strategy, and the
// bytes this rank holds.
#include <c10/core/GradMode.h>
#include <optional>

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/checkpoint/consolidate.h"
#include "ft/base/error.h"
#include "ft/parallel/grad_buffer.h"
#include "ft/parallel/state_placement.h"
#include "ft/model/model.h"
#include "ft/io/saved_state.h"
#include "sharded_strategy.h"

namespace ft {

// Unit `unit`'s entries as StatePlacement sees them: the values (`buffer`
// < 0; frozen entries too) or one optimizer buffer kind. A rank's shard
// holds one run of each entry it reaches; unsharded values (ZeRO-1/2) are
// whole_values(), the same on every rank.
StatePlacement ShardedStrategy::placement(size_t unit, int buffer) {
  const FlatParam& f = *units()[unit];
  if (buffer < 0 && !f.params_sharded()) return whole_values(unit);
  const FlatLayout& layout = f.layout();
  std::vector<std::optional<FlatPiece>> mine(layout.entries.size());
  for (const FlatPiece& p : layout.pieces(shard_rank())) mine[static_cast<size_t>(p.entry)] = p;
  std::vector<int> slot_of(layout.entries.size(), -1);
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].unit == static_cast<int>(unit)) slot_of[static_cast<size_t>(slots_[i].entry)] = static_cast<int>(i);
  const auto kinds = optimizer_->buffer_names();
  StatePlacement out(shard_comm());
  for (size_t e = 0; e < layout.entries.size(); ++e) {
    const FlatEntry& entry = layout.entries[e];
    if (buffer >= 0 && !entry.trainable) continue;
    const std::optional<FlatPiece>& piece = mine[e];
    at::Tensor local;
    if (buffer < 0 && piece) local = f.shard().narrow(0, piece->offset_in_shard, piece->numel);
    if (buffer >= 0 && slot_of[e] >= 0) {
      local = optimizer_->buffers()[static_cast<size_t>(slot_of[e])][static_cast<size_t>(buffer)];
    }
    out.add(buffer < 0 ? entry.name : entry.name + "." + kinds[static_cast<size_t>(buffer)], entry.shape, local,
            Placement::rows(piece ? piece->offset_in_entry : 0));
  }
  return out;
}

StatePlacement ShardedStrategy::whole_values(size_t unit) {
  const FlatParam& f = *units()[unit];
  StatePlacement out(shard_comm());
  for (const FlatEntry& e : f.layout().entries) {
    out.add(e.name, e.shape, f.full().narrow(0, e.offset, e.numel).view(e.shape), Placement::replicated());
  }
  return out;
}

TensorList ShardedStrategy::model_state() {
  TensorList out;
  for (size_t u = 0; u < units().size(); ++u) {
    for (auto& named : placement(u, -1).gather()) out.push_back(std::move(named));
  }
  return out;
}

OptimizerState ShardedStrategy::optimizer_state() {
  OptimizerState s;
  s.step = optimizer_->step_count();
  const int kinds = static_cast<int>(optimizer_->buffer_names().size());
  for (int k = 0; k < kinds; ++k) {
    for (size_t u = 0; u < units().size(); ++u) {
      for (auto& named : placement(u, k).gather()) s.tensors.push_back(std::move(named));
    }
  }
  return s;
}

void ShardedStrategy::load_state(const TensorList& model, const OptimizerState* optimizer) {
  const SavedTensors weights = SavedTensors::weights(model);
  for (size_t u = 0; u < units().size(); ++u) {
    placement(u, -1).load(weights, "checkpoint", ShapeCheck::kShape);
    // A unit kept gathered (after forward, SHARD_GRAD_OP) takes the values too.
    const FlatParam& f = *units()[u];
    if (f.params_sharded() && f.state() == ShardedState::kUnsharded) {
      whole_values(u).load(weights, "checkpoint", ShapeCheck::kShape);
    }
  }
  if (!optimizer) return;
  const SavedTensors saved = SavedTensors::optimizer(*optimizer);
  OptimizerState mine;
  mine.step = optimizer->step;
  const int kinds = static_cast<int>(optimizer_->buffer_names().size());
  for (int k = 0; k < kinds; ++k) {
    for (size_t u = 0; u < units().size(); ++u) {
      for (auto& named : placement(u, k).parts(saved, "checkpoint optimizer state", ShapeCheck::kElements)) {
        mine.tensors.push_back(std::move(named));
      }
    }
  }
  optimizer_->load_state(mine, "checkpoint optimizer state");
}

StateBytes ShardedStrategy::state_bytes() const {
  StateBytes b;
  for (const auto& f : units()) {
    b.params += f->params_sharded() ? f->shard_bytes() : f->layout().padded_numel * 4;
  }
  b.params += group_->peak_gathered_bytes();
  b.grads = group_->grad_bytes();
  if (grad_buffer_) {
    for (const auto& t : grad_buffer_->buffers()) b.grads += t.numel() * static_cast<int64_t>(t.element_size());
  }
  b.optimizer = optimizer_->state_bytes();
  return b;
}

namespace {
// One optimizer buffer kind of one unit as this rank's flat shard (zeros
// over padding and over pieces without a slot): the sharded save's layout.
template <typename Slots>
at::Tensor buffer_shard(const FlatParam& f, int unit, const Slots& slots,
                        const std::vector<std::vector<at::Tensor>>& buffers, size_t kind) {
  at::Tensor shard = at::zeros({f.layout().shard_numel()}, at::kFloat);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].unit != unit) continue;
    shard.narrow(0, slots[i].piece.offset_in_shard, slots[i].piece.numel)
        .copy_(buffers[i][kind].detach().reshape({-1}).to(at::kCPU));
  }
  return shard;
}
}  // namespace

void ShardedStrategy::save_sharded(const std::filesystem::path& dir) {
  c10::NoGradGuard no_grad;
  ShardedMeta meta;
  meta.strategy = policy_.name;
  meta.world_size = shard_world();
  meta.optimizer_step = optimizer_->step_count();
  meta.optimizer_buffers = optimizer_->buffer_names();
  for (const auto& f : units()) meta.units.push_back(f->layout());
  // With unsharded optimizer state (NO_SHARD) every rank holds the same
  // single shard, and under hybrid sharding every replica the same shards:
  // one copy is written (rank 0's, or the first replica's).
  if (writes_shards()) {
    TensorList tensors;
    for (size_t u = 0; u < units().size(); ++u) {
      const std::string prefix = "unit." + std::to_string(u) + ".";
      tensors.emplace_back(prefix + "param", units()[u]->shard().detach().to(at::kCPU).clone());
      for (size_t k = 0; k < meta.optimizer_buffers.size(); ++k) {
        tensors.emplace_back(prefix + meta.optimizer_buffers[k],
                             buffer_shard(*units()[u], static_cast<int>(u), slots_, optimizer_->buffers(), k));
      }
    }
    write_shard(dir, shard_rank(), meta, tensors);
  }
  if (ctx_->comm->rank() == 0) write_sharded_meta(dir, meta);
}

}  // namespace ft
