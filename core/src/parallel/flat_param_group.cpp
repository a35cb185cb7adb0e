// FlatParamGroup: construction and the parameter side (gather before use,
// prefetch, reshard). The gradient side is flat_param_grads.cpp.
#include "ft/parallel/flat_param_group.h"

#include <algorithm>
#include <exception>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/observe/trace.h"

namespace ft {

class FlatParamGroup::Runner final : public UnitRunner {
 public:
  explicit Runner(FlatParamGroup* owner) : owner_(owner) {}
  at::Tensor run(int index, RunPass pass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    return owner_->run_unit(index, pass, input, fn);
  }

 private:
  FlatParamGroup* owner_;
};

namespace {
// Moves the word table out of unit 0's parameters when it is to be sharded
// by rows (see the header); empty when it stays.
TensorList take_word_table(const EncoderModel& model, std::vector<TensorList>& unit_params,
                           const FlatParamGroupOptions& options) {
  if (!options.shard_word_table || !options.grads_sharded || unit_params.empty()) return {};
  for (int u = 0; u < model.num_units(); ++u) {
    for (int other : model.units_read_by(u)) {
      if (other == 0) return {};  // a head reads the table (the tied decoder): it is gathered with unit 0
    }
  }
  TensorList& embeddings = unit_params.front();
  const std::string name = model.config().family().word_embeddings();
  for (auto it = embeddings.begin(); it != embeddings.end(); ++it) {
    if (it->first != name) continue;
    TensorList words{*it};
    embeddings.erase(it);
    return words;
  }
  return {};
}
}  // namespace

FlatParamGroup::FlatParamGroup(EncoderModel& model,
                               const std::function<bool(const std::string&)>& trainable, Comm& shard, int world,
                               int rank, FlatParamGroupOptions options, CommHook reduce)
    : model_(model), shard_(shard), options_(options), reduce_(std::move(reduce)) {
  if (options_.limit_all_gathers < 0) fail("strategy.options.limit_all_gathers: must be >= 0");
  if (options_.grad_buckets < 1) fail("strategy.options.grad_buckets: must be >= 1");
  if (options_.params_sharded && !options_.grads_sharded) fail("flat param group: sharded parameters need sharded gradients");
  if (options_.grads_sharded && !reduce_) fail("flat param group: sharded gradients need a reduce hook");
  build_units(model, trainable, world, rank);
  if (options_.grads_sharded) install_grad_hooks();
  if (options_.params_sharded) {
    runner_ = std::make_unique<Runner>(this);
    model_.set_unit_runner(runner_.get());
  }
  if (words_unit_ >= 0) model_.set_word_lookup([this](const at::Tensor& ids) { return lookup_words(ids); });
  note_gathered_bytes();
}

FlatParamGroup::~FlatParamGroup() {
  // In-flight collectives keep their tensors alive; our hooks point at this.
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    auto& hooks = accumulators_[i]->pre_hooks();
    const void* id = hook_ids_[i];
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.get() == id; }), hooks.end());
  }
  // A destructor must not throw: a collective that failed (a rank stalled)
  // threw from here into std::terminate, so the job ended without the line
  // naming the stalled rank. While an error unwinds, the in-flight work is
  // left to itself (it holds its tensors); otherwise its failure is the step's.
  if (std::uncaught_exceptions() == 0) {
    for (auto& g : grads_) {
      if (g.state != UnitGrad::kLaunched) continue;
      try {
        g.comm.work.wait();
      } catch (const std::exception&) {
        break;  // the Comm has failed: the rest would fail the same way, each after the timeout
      }
    }
  }
  if (runner_) model_.set_unit_runner(nullptr);
  if (words_unit_ >= 0) model_.set_word_lookup(nullptr);
}

void FlatParamGroup::build_units(EncoderModel& model,
                                 const std::function<bool(const std::string&)>& trainable, int world, int rank) {
  auto unit_params = model.unit_parameters();
  const int n = static_cast<int>(unit_params.size());
  model_units_ = n;
  TensorList words = take_word_table(model, unit_params, options_);
  c10::NoGradGuard no_grad;
  auto add_unit = [&](int u, const TensorList& params, int64_t row_align) {
    std::vector<bool> flags;
    for (const auto& [name, t] : params) flags.push_back(trainable(name));
    units_.push_back(std::make_unique<FlatParam>(u, params, flags, world, rank, options_.params_sharded, &gather_pool_,
                                                 row_align));
    const int count = static_cast<int>(std::count(flags.begin(), flags.end(), true));
    trainable_count_.push_back(count);
    has_frozen_.push_back(count < static_cast<int>(flags.size()));
  };
  for (int u = 0; u < n; ++u) add_unit(u, unit_params[static_cast<size_t>(u)], 1);
  if (!words.empty()) {
    const at::Tensor& table = words.front().second;
    words_unit_ = n;
    word_width_ = table.size(1);
    pad_row_ = model.config().pad_token_id;
    add_unit(n, words, word_width_);
    word_owned_rows_ = units_.back()->layout().shard_numel() / word_width_;
  }
  for (int u = n - 1; u >= 0; --u) {
    if (trainable_count_[static_cast<size_t>(u)] > 0) launch_order_.push_back(u);
  }
  ready_.assign(static_cast<size_t>(n), false);
  input_grad_done_.assign(static_cast<size_t>(n), false);
  prefetched_unit_.assign(static_cast<size_t>(n), false);
}

// ---------------------------------------------------------------- parameters

void FlatParamGroup::note_gathered_bytes() {
  if (!options_.params_sharded) return;
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

void FlatParamGroup::prefetch(int unit) {
  if (unit < 0 || unit >= model_units_) return;
  FlatParam& f = *units_[static_cast<size_t>(unit)];
  if (f.state() != ShardedState::kSharded || prefetched_ >= options_.limit_all_gathers) return;
  if (options_.trace) options_.trace->begin_async("all-gather unit", unit);
  f.unshard(shard_);
  prefetched_unit_[static_cast<size_t>(unit)] = true;
  ++prefetched_;
  note_gathered_bytes();
}

void FlatParamGroup::release_prefetch(int unit) {
  if (!prefetched_unit_[static_cast<size_t>(unit)]) return;
  prefetched_unit_[static_cast<size_t>(unit)] = false;
  --prefetched_;
}

void FlatParamGroup::gather_for_use(int unit) {
  release_prefetch(unit);
  traced_wait_for_unshard(*units_[static_cast<size_t>(unit)], unit, shard_, options_.trace);
  note_gathered_bytes();
}

void FlatParamGroup::reshard_unit(int unit) {
  FlatParam& f = *units_[static_cast<size_t>(unit)];
  if (!f.params_sharded()) return;
  // An all-gather still writing into the storage must finish before it goes.
  if (f.state() == ShardedState::kUnsharding) traced_wait_for_unshard(f, unit, shard_, options_.trace);
  release_prefetch(unit);
  f.reshard();
}

// Activation checkpointing runs a layer twice: kNoGraph in forward (freed
// afterwards as any training forward, per reshard_after_forward) and
// kRecompute in backward, whose own backward follows at once: its weights
// stay gathered for it (pre_backward finds them there) instead of being
// freed and gathered a third time, and no forward-order prefetch is issued
// from inside backward.
at::Tensor FlatParamGroup::run_unit(int unit, RunPass pass, const at::Tensor& input,
                                    const std::function<at::Tensor(const at::Tensor&)>& fn) {
  gather_for_use(unit);
  const std::vector<int> reads = model_.units_read_by(unit);  // the tied decoder reads unit 0
  for (int other : reads) gather_for_use(other);
  if (options_.forward_prefetch && pass != RunPass::kRecompute) {
    for (int k = 1; k <= options_.limit_all_gathers; ++k) prefetch(unit + k);
  }
  at::Tensor out = fn(input);
  const bool training = at::GradMode::is_enabled() || pass == RunPass::kNoGraph;
  const bool keep = pass == RunPass::kRecompute || (training && !options_.reshard_after_forward);
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

void FlatParamGroup::pre_backward(int unit) {
  // Also from here, not only from the first gradient: a model that trains
  // nothing still has units to reshard at the end. The head's hook, in the
  // outer backward, always comes first (a checkpointed layer's recompute
  // runs hooks inside a nested one).
  queue_backward_end();
  // The grad of this unit's output is the grad of the next unit's input:
  // that unit's backward has read its frozen weights for the last time.
  if (unit + 1 < model_units_) {
    input_grad_done_[static_cast<size_t>(unit) + 1] = true;
    reshard_if_backward_done(unit + 1);
  }
  gather_for_use(unit);
  // A unit read here stays gathered until its own grads are done.
  for (int other : model_.units_read_by(unit)) gather_for_use(other);
  if (options_.backward_prefetch) {
    for (int k = 1; k <= options_.limit_all_gathers; ++k) prefetch(unit - k);
  }
}

// All trainable grads of a unit have arrived; its frozen weights may still be
// needed for the grad of its input (a frozen query weight under LoRA), so a
// unit that has some waits for that too. Units left over go at backward end.
void FlatParamGroup::reshard_if_backward_done(int unit) {
  const auto u = static_cast<size_t>(unit);
  const bool grads_done = ready_[u] || trainable_count_[u] == 0;
  if (grads_done && (!has_frozen_[u] || input_grad_done_[u])) reshard_unit(unit);
}

}  // namespace ft
