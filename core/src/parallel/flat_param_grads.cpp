// FlatParamGroup, gradient side: shards, the bucket pool, the AccumulateGrad
// pre-hooks, in-order reduce-scatters and the one end-of-backward callback.
#include <c10/core/GradMode.h>
#include <algorithm>
#include <functional>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "ft/parallel/cost_model.h"
#include "compat.h"
#include "ft/base/error.h"
#include "ft/parallel/flat_param_group.h"
#include "ft/model/model.h"
#include "ft/observe/trace.h"

namespace ft {

// ---------------------------------------------------------------- pool

GradBucketPool::GradBucketPool(int64_t capacity, int max_buckets) : capacity_(capacity), max_buckets_(max_buckets) {
  if (capacity_ < 1 || max_buckets_ < 1) fail("gradient bucket pool: capacity {} and bucket limit {} must be >= 1", capacity_, max_buckets_);
}

namespace {
// Where a bucket of `numel` goes in a ring of `capacity` whose live spans
// are `live` (oldest first, contiguous modulo the ring), or -1.
template <typename Spans>
int64_t ring_place(const Spans& live, int64_t capacity, int64_t numel) {
  if (numel > capacity) return -1;
  if (live.empty()) return 0;
  const auto& front = live.front();
  const auto& back = live.back();
  const int64_t end = back.offset + back.numel;
  if (back.offset >= front.offset) {  // not wrapped: free after `end` and before `front`
    if (end + numel <= capacity) return end;
    return numel <= front.offset ? 0 : -1;
  }
  return end + numel <= front.offset ? end : -1;
}
}  // namespace

bool GradBucketPool::fits(int64_t numel) const {
  return static_cast<int>(live_.size()) < max_buckets_ && ring_place(live_, capacity_, numel) >= 0;
}

at::Tensor GradBucketPool::take(int64_t numel, const at::TensorOptions& options) {
  const int64_t at = ring_place(live_, capacity_, numel);
  if (at < 0 || static_cast<int>(live_.size()) >= max_buckets_) fail("gradient bucket pool: no room for {} elements", numel);
  if (!arena_.defined()) arena_ = at::empty({capacity_}, options);
  live_.push_back({at, numel});
  return arena_.narrow(0, at, numel);
}

void GradBucketPool::give_oldest() {
  if (!live_.empty()) live_.erase(live_.begin());
}

int64_t GradBucketPool::held_bytes() const {
  return arena_.defined() ? arena_.numel() * static_cast<int64_t>(arena_.element_size()) : 0;
}

// ---------------------------------------------------------------- hooks

// Pre-hook of a trainable parameter's AccumulateGrad node: takes the
// incoming gradient into the unit's bucket and hands autograd an undefined
// one, so AccumulateGrad does nothing and `.grad` is never allocated.
class FlatParamGroup::GradHook final : public torch::autograd::FunctionPreHook {
 public:
  GradHook(FlatParamGroup* owner, int unit, int entry) : owner_(owner), unit_(unit), entry_(entry) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    if (!grads.empty() && grads[0].defined()) owner_->on_grad(unit_, entry_, grads[0]);
    return {at::Tensor()};
  }

 private:
  FlatParamGroup* owner_;  // outlives the hook: ~FlatParamGroup removes it
  int unit_, entry_;
};

void FlatParamGroup::install_grad_hooks() {
  grad_shards_.assign(units_.size(), at::Tensor());
  grads_.clear();
  grads_.resize(units_.size());
  std::vector<int64_t> sizes;
  for (size_t pos = 0; pos < launch_order_.size(); ++pos) {
    const int u = launch_order_[pos];
    const FlatParam& f = *units_[static_cast<size_t>(u)];
    grads_[static_cast<size_t>(u)].position = static_cast<int>(pos);
    grads_[static_cast<size_t>(u)].arrived.assign(f.params().size(), false);
    grad_shards_[static_cast<size_t>(u)] = at::zeros({f.layout().shard_numel()}, f.shard().options());
    sizes.push_back(f.layout().padded_numel);
    for (size_t i = 0; i < f.params().size(); ++i) {
      if (!f.layout().entries[i].trainable) continue;
      const at::Tensor& p = f.params()[i];
      if (!p.requires_grad()) fail("flat param group: trainable '{}' does not require grad", f.layout().entries[i].name);
      auto acc = torch::autograd::impl::grad_accumulator(p);
      auto hook = std::make_unique<GradHook>(this, u, static_cast<int>(i));
      hook_ids_.push_back(hook.get());
      acc->add_pre_hook(std::move(hook));
      accumulators_.push_back(compat::shared_node(std::move(acc)));
    }
  }
  // The word table has no bucket: its gradient is exchanged as rows.
  if (words_unit_ >= 0 && trainable_count_[static_cast<size_t>(words_unit_)] > 0) {
    const FlatParam& f = *units_[static_cast<size_t>(words_unit_)];
    grad_shards_[static_cast<size_t>(words_unit_)] = at::zeros({f.layout().shard_numel()}, f.shard().options());
  }
  if (options_.accumulation == GradAccumulation::kReduceEachMicroBatch && !sizes.empty()) {
    pool_ = std::make_unique<GradBucketPool>(grad_pool_capacity(sizes, options_.grad_buckets), options_.grad_buckets);
  }
}

// ---------------------------------------------------------------- per backward

void FlatParamGroup::start_backward(bool sync) {
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(input_grad_done_.begin(), input_grad_done_.end(), false);
  callback_queued_ = false;
  sync_ = sync || options_.accumulation == GradAccumulation::kReduceEachMicroBatch;
  next_launch_ = 0;
  for (auto& g : grads_) {
    std::fill(g.arrived.begin(), g.arrived.end(), false);
    g.pending = 0;
    // A unit still in flight from the previous micro-batch keeps its state
    // until its bucket is needed again (bind) or finish_grad_sync().
    if (g.state == UnitGrad::kComplete) g.state = UnitGrad::kIdle;  // no_sync: accumulated, kept in its bucket
  }
}

void FlatParamGroup::queue_backward_end() {
  if (callback_queued_) return;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { on_backward_end(); });
  callback_queued_ = true;
}

void FlatParamGroup::on_grad(int unit, int entry, const at::Tensor& grad) {
  queue_backward_end();
  UnitGrads& g = grads_[static_cast<size_t>(unit)];
  if (g.position < next_launch_ || g.state == UnitGrad::kComplete) {
    fail("flat param group: unit {} got a gradient after it was complete (a second backward without "
         "start_backward()?)", unit);
  }
  // Still in flight from the previous micro-batch: done with it before this one starts.
  if (g.state == UnitGrad::kLaunched) finish_through(unit);
  if (g.state == UnitGrad::kIdle) bind(unit);
  const FlatEntry& e = units_[static_cast<size_t>(unit)]->layout().entries[static_cast<size_t>(entry)];
  c10::NoGradGuard no_grad;
  at::Tensor dst = g.bucket.narrow(0, e.offset, e.numel).view(grad.sizes());
  // The first contribution of a backward overwrites (the bucket is not
  // zeroed); no_sync adds to what earlier micro-batches left.
  if (g.arrived[static_cast<size_t>(entry)] || g.holds_data) {
    dst.add_(grad);
  } else {
    dst.copy_(grad);
  }
  if (!g.arrived[static_cast<size_t>(entry)]) {
    g.arrived[static_cast<size_t>(entry)] = true;
    if (--g.pending == 0) complete(unit);
  }
}

// Gives `unit` a bucket: its own (no_sync) or one from the pool, waiting for
// the oldest reduce-scatters until one fits. Gaps that no gradient writes
// (frozen weights, padding) are zeroed, unless no_sync kept the data.
void FlatParamGroup::bind(int unit) {
  UnitGrads& g = grads_[static_cast<size_t>(unit)];
  const FlatParam& f = *units_[static_cast<size_t>(unit)];
  const FlatLayout& l = f.layout();
  const auto options = f.shard().options();
  if (!pool_) {
    if (!g.bucket.defined()) g.bucket = at::empty({l.padded_numel}, options);
  } else {
    while (!pool_->fits(l.padded_numel) && !in_pool_.empty() &&
           grads_[static_cast<size_t>(in_pool_.front())].state == UnitGrad::kLaunched) {
      finish_oldest();
    }
    if (pool_->fits(l.padded_numel)) {
      g.bucket = pool_->take(l.padded_numel, options);
      g.from_pool = true;
      in_pool_.push_back(unit);
    } else {
      // The oldest pool bucket's gradients are not all in yet: this unit's
      // arrived out of launch order. Correct, but outside the bound.
      g.bucket = at::empty({l.padded_numel}, options);
      g.from_pool = false;
      ++overflow_;
      overflow_bytes_ = std::max(overflow_bytes_, l.padded_numel * static_cast<int64_t>(g.bucket.element_size()));
    }
    g.holds_data = false;
  }
  int live = 0;
  for (const auto& other : grads_) live += other.state != UnitGrad::kIdle || other.holds_data ? 1 : 0;
  peak_live_buckets_ = std::max(peak_live_buckets_, live + 1);
  g.pending = trainable_count_[static_cast<size_t>(unit)];
  g.state = UnitGrad::kFilling;
  if (g.holds_data) return;
  c10::NoGradGuard no_grad;
  for (const FlatEntry& e : l.entries) {
    if (!e.trainable) g.bucket.narrow(0, e.offset, e.numel).zero_();
  }
  if (l.padding() > 0) g.bucket.narrow(0, l.numel, l.padding()).zero_();
}

void FlatParamGroup::complete(int unit) {
  UnitGrads& g = grads_[static_cast<size_t>(unit)];
  g.state = UnitGrad::kComplete;
  ready_[static_cast<size_t>(unit)] = true;
  reshard_if_backward_done(unit);
  if (sync_) launch_in_order();
}

void FlatParamGroup::launch_in_order() {
  // Strict launch order: every rank issues the same collectives in the same
  // order even if its gradients arrived in a different one.
  while (next_launch_ < static_cast<int>(launch_order_.size())) {
    const int u = launch_order_[static_cast<size_t>(next_launch_)];
    if (grads_[static_cast<size_t>(u)].state != UnitGrad::kComplete) return;
    launch(u);
    ++next_launch_;
  }
}

void FlatParamGroup::launch(int unit) {
  UnitGrads& g = grads_[static_cast<size_t>(unit)];
  if (options_.trace) options_.trace->begin_async("reduce-scatter unit", unit);
  GradBucket bucket{g.position, g.bucket, 0};
  g.comm = reduce_(bucket);
  g.state = UnitGrad::kLaunched;
}

void FlatParamGroup::finish_oldest() { finish(in_pool_.front()); }

void FlatParamGroup::finish_through(int unit) {
  if (grads_[static_cast<size_t>(unit)].from_pool) {
    while (!in_pool_.empty() && in_pool_.front() != unit) finish_oldest();
  }
  finish(unit);
}

void FlatParamGroup::finish_all() {
  while (!in_pool_.empty()) finish_oldest();
  for (int u : launch_order_) {
    if (grads_[static_cast<size_t>(u)].state == UnitGrad::kLaunched) finish(u);
  }
}

// Waits for `unit`'s reduce-scatter, adds this rank's chunk into its shard
// and gives the bucket back.
void FlatParamGroup::finish(int unit) {
  UnitGrads& g = grads_[static_cast<size_t>(unit)];
  if (g.state != UnitGrad::kLaunched) fail("flat param group: unit {} finished before it was launched", unit);
  g.comm.work.wait();
  if (g.comm.after_wait) g.comm.after_wait();
  g.comm = BucketComm{};
  const FlatLayout& l = units_[static_cast<size_t>(unit)]->layout();
  if (options_.trace) options_.trace->end_async("reduce-scatter unit", unit, l.padded_numel * 4);
  {
    c10::NoGradGuard no_grad;
    const int rank = static_cast<int>(shard_.rank());
    grad_shards_[static_cast<size_t>(unit)].add_(g.bucket.narrow(0, l.shard_begin(rank), l.shard_numel()));
  }
  g.state = UnitGrad::kIdle;
  g.holds_data = false;
  if (g.from_pool) {
    if (in_pool_.empty() || in_pool_.front() != unit) fail("flat param group: pool buckets returned out of order");
    pool_->give_oldest();
    in_pool_.erase(in_pool_.begin());
    g.bucket = at::Tensor();
    g.from_pool = false;
  } else if (pool_) {
    g.bucket = at::Tensor();  // an overflow bucket
  }
}

// Runs once per backward, after every gradient was accumulated and before
// backward() returns: units short of gradients (unused parameters: zeros)
// are completed, what is left is launched in order, and every unit is
// resharded, in the same order on every rank.
void FlatParamGroup::on_backward_end() {
  callback_queued_ = false;
  for (int u : launch_order_) {
    UnitGrads& g = grads_[static_cast<size_t>(u)];
    if (g.position < next_launch_) continue;  // launched in this backward
    if (g.state == UnitGrad::kLaunched) finish_through(u);  // the previous micro-batch's
    if (g.state == UnitGrad::kIdle && !sync_ && !g.holds_data) continue;  // no_sync: nothing to keep
    if (g.state == UnitGrad::kIdle) bind(u);
    if (g.state == UnitGrad::kFilling) {
      c10::NoGradGuard no_grad;
      const FlatLayout& l = units_[static_cast<size_t>(u)]->layout();
      for (size_t i = 0; i < l.entries.size(); ++i) {
        if (l.entries[i].trainable && !g.arrived[i] && !g.holds_data) g.bucket.narrow(0, l.entries[i].offset, l.entries[i].numel).zero_();
      }
      g.state = UnitGrad::kComplete;
    }
  }
  if (sync_) {
    launch_in_order();
  } else {
    // no_sync: the data stays in each unit's own bucket for the next micro-batch.
    for (int u : launch_order_) {
      UnitGrads& g = grads_[static_cast<size_t>(u)];
      if (g.state == UnitGrad::kComplete) g.holds_data = true;
    }
  }
  for (int u = 0; u < model_units_; ++u) {
    ready_[static_cast<size_t>(u)] = true;
    reshard_unit(u);
  }
  exchange_word_grads();
}

void FlatParamGroup::finish_grad_sync() {
  if (!options_.grads_sharded) return;
  // Only no_sync micro-batches ran since the last step: reduce their sum
  // now, every unit in launch order (a unit no gradient reached sends zeros).
  bool pending = false;
  for (int u : launch_order_) pending = pending || grads_[static_cast<size_t>(u)].holds_data;
  if (pending) {
    next_launch_ = 0;
    sync_ = true;
    for (int u : launch_order_) {
      UnitGrads& g = grads_[static_cast<size_t>(u)];
      if (g.state != UnitGrad::kIdle) continue;
      if (!g.holds_data) {
        bind(u);
        c10::NoGradGuard no_grad;
        g.bucket.zero_();
      }
      g.state = UnitGrad::kComplete;
    }
    launch_in_order();
  }
  finish_all();
}

int64_t FlatParamGroup::grad_bytes() const {
  int64_t b = 0;
  for (const auto& s : grad_shards_) b += s.defined() ? s.numel() * static_cast<int64_t>(s.element_size()) : 0;
  if (pool_) return b + pool_->held_bytes() + overflow_bytes_;
  for (const auto& g : grads_) b += g.bucket.defined() ? g.bucket.numel() * static_cast<int64_t>(g.bucket.element_size()) : 0;
  return b;
}

}  // namespace ft
