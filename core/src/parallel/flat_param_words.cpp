// FlatParamGroup, the vocabulary-sharded word table (see the header): the
// model's lookup, the row-sparse gradient and its exchange at backward end.
//
// Rank r owns rows [r R, (r + 1) R) of the table, R = shard_numel / width
// (the unit is padded to whole rows per rank). Every collective here runs on
// the shard group in the same order on every rank: a forward's lookup sits
// at the same place in every rank's forward, and the gradient exchange runs
// from the one end-of-backward callback, after the units' reduce-scatters
// were launched, never from inside autograd's graph walk, whose order of
// independent nodes is not a contract.
#include <c10/core/GradMode.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "compat.h"
#include "ft/base/error.h"
#include "ft/parallel/flat_param_group.h"

namespace ft {

// The lookup's backward: takes the output gradient for the exchange and
// gives autograd nothing, so no dense [vocab, width] gradient is ever made.
class FlatParamGroup::WordGradNode final : public torch::autograd::Node {
 public:
  explicit WordGradNode(FlatParamGroup* owner) : owner_(owner) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!grads.empty() && grads[0].defined()) owner_->stash_word_grad(grads[0]);
    return {};
  }
  std::string name() const override { return "ft::ShardedWordLookupBackward"; }

 private:
  FlatParamGroup* owner_;  // outlives every graph it is in: the strategy's
};

namespace {
// Grows `t` to at least `numel` elements (kept between steps), returns the first `numel`.
at::Tensor scratch(at::Tensor& t, int64_t numel, const at::TensorOptions& options) {
  if (!t.defined() || t.numel() < numel) t = at::empty({numel}, options);
  return t.narrow(0, 0, numel);
}
}  // namespace

// Every rank's token ids into words_.all_ids ([world * cap], -1 past a
// rank's own tokens); returns cap, the most tokens any rank has.
int64_t FlatParamGroup::gather_word_ids(const at::Tensor& ids) {
  const int64_t world = shard_.world_size();
  const auto longs = ids.options().dtype(at::kLong);
  if (!words_.count.defined()) words_.count = at::empty({1}, longs);
  words_.count.fill_(ids.numel());
  shard_.all_reduce(words_.count, ReduceOp::Max);
  const int64_t cap = std::max<int64_t>(1, words_.count.item<int64_t>());
  at::Tensor all = scratch(words_.all_ids, world * cap, longs);
  at::Tensor mine = all.narrow(0, shard_.rank() * cap, cap);
  mine.fill_(-1);
  mine.narrow(0, 0, ids.numel()).copy_(ids);
  shard_.all_gather_inplace_async(all).wait();
  return cap;
}

at::Tensor FlatParamGroup::lookup_words(const at::Tensor& ids) {
  const FlatParam& f = *units_[static_cast<size_t>(words_unit_)];
  const bool trains = trainable_count_[static_cast<size_t>(words_unit_)] > 0 && at::GradMode::is_enabled();
  const at::Tensor flat_ids = ids.reshape({-1});
  const int64_t tokens = flat_ids.numel();
  at::Tensor rows;
  {
    c10::NoGradGuard no_grad;
    if (!f.params_sharded()) {
      rows = at::embedding(f.params().front().detach(), flat_ids);  // ZeRO-2: the full replica
    } else {
      // Each rank reads the rows it owns for every rank's tokens; the
      // reduce-scatter then sums each token's one nonzero contribution
      // into the chunk of the rank the token came from.
      const int64_t world = shard_.world_size(), owned = word_owned_rows_;
      const int64_t cap = gather_word_ids(flat_ids);
      const at::Tensor local = words_.all_ids.narrow(0, 0, world * cap) - shard_.rank() * owned;
      const at::Tensor elsewhere = local.lt(0).logical_or(local.ge(owned));
      at::Tensor read = scratch(words_.rows, world * cap * word_width_, f.shard().options()).view({world * cap, word_width_});
      at::index_select_out(read, f.shard().view({owned, word_width_}), 0, local.clamp(0, owned - 1));
      read.masked_fill_(elsewhere.unsqueeze(1), 0.0);
      at::Tensor flat = read.view({-1});
      shard_.reduce_scatter_inplace_async(flat, ReduceOp::Sum).wait();
      rows = read.narrow(0, shard_.rank() * cap, tokens).clone();  // an activation of its own, as embedding's
    }
  }
  if (trains) {
    words_.saved_ids = flat_ids;
    torch::autograd::create_gradient_edge(rows, compat::make_node<WordGradNode>(this));
  }
  if (ids.dim() == 1) return rows;
  std::vector<int64_t> shape = ids.sizes().vec();
  shape.push_back(word_width_);
  return rows.view(shape);
}

void FlatParamGroup::stash_word_grad(const at::Tensor& grad) {
  queue_backward_end();
  if (words_.grad.defined()) fail("flat param group: the word table was looked up twice in one backward");
  words_.grad = grad;
}

// Row-sparse gradient: every rank's tokens and output gradients, gathered;
// each rank adds the rows it owns (not the padding row, as nn.Embedding's
// padding_idx) into its shard, averaged over the shard group like the
// units' reduce-scatters.
void FlatParamGroup::exchange_word_grads() {
  if (!words_.grad.defined()) return;
  c10::NoGradGuard no_grad;
  const FlatParam& f = *units_[static_cast<size_t>(words_unit_)];
  const int64_t world = shard_.world_size(), owned = word_owned_rows_;
  const int64_t tokens = words_.saved_ids.numel(), cap = gather_word_ids(words_.saved_ids);
  at::Tensor all = scratch(words_.rows, world * cap * word_width_, f.shard().options());
  at::Tensor mine = all.narrow(0, shard_.rank() * cap * word_width_, cap * word_width_);
  mine.narrow(0, 0, tokens * word_width_).copy_(words_.grad.reshape({-1}));
  mine.narrow(0, tokens * word_width_, (cap - tokens) * word_width_).zero_();
  words_.saved_ids = at::Tensor();
  words_.grad = at::Tensor();
  shard_.all_gather_inplace_async(all).wait();
  const at::Tensor gathered_ids = words_.all_ids.narrow(0, 0, world * cap);
  const at::Tensor local = gathered_ids - shard_.rank() * owned;
  at::Tensor keep = local.ge(0).logical_and(local.lt(owned));
  if (pad_row_ >= 0) keep = keep.logical_and(gathered_ids.ne(pad_row_));
  const at::Tensor index = keep.nonzero().squeeze(1);
  grad_shards_[static_cast<size_t>(words_unit_)].view({owned, word_width_}).index_add_(
      0, local.index_select(0, index), all.view({world * cap, word_width_}).index_select(0, index),
      1.0 / static_cast<double>(world));
}

int64_t FlatParamGroup::word_scratch_bytes() const {
  int64_t b = 0;
  for (const at::Tensor* t : {&words_.count, &words_.all_ids, &words_.rows}) {
    if (t->defined()) b += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return b;
}

}  // namespace ft
