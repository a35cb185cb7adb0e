// ShardedStrategy: full (consolidated) state for ordinary checkpoints, the
// per-rank sharded save, loading full state saved by any strategy, and the
// bytes this rank holds.
#include <c10/core/GradMode.h>
#include <map>

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/checkpoint/consolidate.h"
#include "ft/base/error.h"
#include "ft/parallel/grad_buffer.h"
#include "ft/model/model.h"
#include "ft/io/saved_state.h"
#include "sharded_strategy.h"

namespace ft {

TensorList ShardedStrategy::model_state() {
  c10::NoGradGuard no_grad;
  TensorList out;
  for (const auto& f : units()) {
    for (auto& named : f->layout().unflatten(f->gather_copy(shard_comm()))) out.push_back(std::move(named));
  }
  return out;
}

namespace {
// One optimizer buffer kind of one unit as this rank's flat shard (zeros
// over padding and over pieces without a slot).
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

OptimizerState ShardedStrategy::optimizer_state() {
  c10::NoGradGuard no_grad;
  Comm& comm = shard_comm();
  OptimizerState s;
  s.step = optimizer_->step_count();
  const auto names = optimizer_->buffer_names();
  for (size_t k = 0; k < names.size(); ++k) {
    for (size_t u = 0; u < units().size(); ++u) {
      const FlatParam& f = *units()[u];
      at::Tensor shard = buffer_shard(f, static_cast<int>(u), slots_, optimizer_->buffers(), k);
      at::Tensor full = shard;
      if (shard_world() > 1) {
        full = at::empty({f.layout().padded_numel}, shard.options());
        comm.all_gather_flat(full, shard);
      }
      for (auto& named : f.layout().unflatten(full, "." + names[k], /*trainable_only=*/true)) {
        s.tensors.push_back(std::move(named));
      }
    }
  }
  return s;
}

void ShardedStrategy::load_state(const TensorList& model, const OptimizerState* optimizer) {
  c10::NoGradGuard no_grad;
  TensorList weights;
  for (const auto& [name, t] : model) weights.emplace_back(hf_name(name), t);
  for (auto& f : units()) f->load_full(f->layout().flatten(weights, "checkpoint"));
  if (!optimizer) return;
  const SavedTensors saved = SavedTensors::optimizer(*optimizer);
  const auto names = optimizer_->buffer_names();
  OptimizerState mine;
  mine.step = optimizer->step;
  for (const SlotRef& r : slots_) {
    const FlatEntry& e = units()[static_cast<size_t>(r.unit)]->layout().entries[static_cast<size_t>(r.entry)];
    for (const auto& k : names) {
      const std::string key = e.name + "." + k;
      const at::Tensor& full = saved.at(key);
      if (full.numel() != e.numel) {
        fail("checkpoint optimizer state: '{}' has {} elements, the model needs {}", key, full.numel(), e.numel);
      }
      mine.tensors.emplace_back(key, full.reshape({-1}).narrow(0, r.piece.offset_in_entry, r.piece.numel));
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
