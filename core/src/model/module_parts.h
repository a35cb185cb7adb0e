// What every backbone's and head's modules are made of, private to
// core/src/model: BERT's post-norm layer (backbones/bert/bert_layer.h, shared
// by the families built on it), ModernBERT's pre-norm rotary layer
// (backbones/modernbert/) and the heads (heads/) all build on these.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/modules/dropout.h>

#include "ft/model/dropout.h"
#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/model/packed_attention.h"
#include "ft/model/token_layout.h"

namespace ft {
namespace model_detail {

using torch::nn::Dropout;
using Linear = AdaptableLinear;  // LoRA can wrap any of them

// Every dropout of the model goes through ft's counter-based kernel.
inline at::Tensor drop(const Dropout& d, const at::Tensor& x) { return fast_dropout(x, d->options.p(), d->is_training()); }

// LayerNorm over the last dimension, with or without its bias: ModernBERT's
// norms have none (norm_bias false), which LibTorch 1.13's LayerNorm cannot
// express. Registered as "weight" and "bias", as torch's LayerNorm is.
struct NormImpl : torch::nn::Module {
  at::Tensor weight, bias;
  double eps;
  NormImpl(int64_t width, double eps_, bool with_bias) : eps(eps_) {
    weight = register_parameter("weight", at::ones({width}));
    if (with_bias) bias = register_parameter("bias", at::zeros({width}));
  }
  at::Tensor forward(const at::Tensor& x) const { return at::layer_norm(x, {weight.size(0)}, weight, bias, eps); }
};
TORCH_MODULE(Norm);

inline Norm make_layer_norm(const BertConfig& c, int64_t width, bool with_bias = true) {
  return Norm(width, c.layer_norm_eps, with_bias);
}
inline Norm make_layer_norm(const BertConfig& c) { return make_layer_norm(c, c.hidden_size); }

// Whether a layer's padded-width attention runs LibTorch's SDPA
// (AttentionKernel): where it exists, and under auto only where ft's own
// dropout is not needed (on CPU SDPA would draw LibTorch's slower
// per-element Bernoulli mask).
inline bool sdpa_chosen(AttentionKernel kind, const Dropout& dropout, const at::Tensor& x) {
  const bool dropping = dropout->is_training() && dropout->options.p() > 0.0;
  return sdpa_available() &&
         (kind == AttentionKernel::kSdpa || (kind == AttentionKernel::kAuto && (!dropping || !x.device().is_cpu())));
}
// Whether a layer runs ft's packed kernel where it applies, and which
// schedule it asks for.
inline bool packed_chosen(AttentionKernel kind) {
  return kind == AttentionKernel::kAuto || kind == AttentionKernel::kPacked || kind == AttentionKernel::kTiled;
}
inline AttentionSchedule packed_schedule(AttentionKernel kind) {
  if (kind == AttentionKernel::kPacked) return AttentionSchedule::kWhole;
  if (kind == AttentionKernel::kTiled) return AttentionSchedule::kTiled;
  return AttentionSchedule::kAuto;
}
// The probability SDPA drops with: the module's, in training only.
inline double sdpa_dropout(const Dropout& dropout) { return dropout->is_training() ? dropout->options.p() : 0.0; }

// Eager attention's tail over raw scores [rows, heads, width, width]:
// softmax(scores / sqrt(scale_dim) + mask), ft's dropout, times v.
inline at::Tensor attend(const at::Tensor& scores, double scale_dim, const at::Tensor& mask, const Dropout& dropout,
                         const at::Tensor& v) {
  return at::matmul(drop(dropout, at::softmax(scores / std::sqrt(scale_dim) + mask, -1)), v);
}

// One encoder layer (units 1..L): [T + carried rows, hidden] in and out.
struct EncoderLayer : torch::nn::Module {
  virtual at::Tensor forward(const at::Tensor& in, const TokenLayout& layout) = 0;
  // The output at each row's first token alone, [rows, hidden], for a head
  // that reads nothing else. A layer may skip what only the other tokens'
  // outputs need; this one computes every token and selects.
  virtual at::Tensor forward_first_tokens(const at::Tensor& in, const TokenLayout& layout) {
    return layout.first_tokens(forward(in, layout).narrow(0, 0, layout.tokens));
  }
  // After its weights were cut (ft/model/model.h, shard_tensor_parallel): compute
  // with `tp`, each head's dimensions split over `ranks_per_head` ranks
  // (1: this rank holds whole heads).
  virtual void set_tensor_parallel(const std::shared_ptr<const TensorParallelOps>& tp, int64_t ranks_per_head) = 0;
  // Prefix tuning's keys and values [P, hidden], in the layer's attention;
  // only layers that take past key values (EncoderFamily::prefix_tuning) have them.
  virtual void add_prefix(const at::Tensor& key, const at::Tensor& value) {
    (void)key, (void)value;
    fail("model: this layer takes no attention prefix");
  }
};

// A row-parallel Linear under tensor parallelism: partial products summed,
// then the bias once. LoRA's term is a partial product too (its A holds this
// rank's input columns), so it joins the same sum; a bottleneck adapter reads
// the summed output.
inline at::Tensor row_parallel(AdaptableLinearImpl& dense, const TensorParallelOps& tp, const at::Tensor& x) {
  at::Tensor part = at::linear(x, dense.weight);
  if (dense.adapter) part = part + dense.adapter(x);
  at::Tensor y = tp.reduce(part);
  if (dense.bias.defined()) y = y + dense.bias;
  return dense.output_adapter ? y + dense.output_adapter(y) : y;
}

// Registers `module` at a dotted path below `root` ("cls.predictions",
// "transformer.layer"), making the holder modules between them, or reusing
// those already there: HF's names nest modules that hold no parameters.
template <typename M>
std::shared_ptr<M> register_at(torch::nn::Module& root, const std::string& path, std::shared_ptr<M> module) {
  torch::nn::Module* parent = &root;
  std::string rest = path;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    const std::string part = rest.substr(0, dot);
    const auto children = parent->named_children();
    const auto* child = children.find(part);
    parent = child ? child->get() : parent->register_module(part, std::make_shared<torch::nn::Module>()).get();
    rest = rest.substr(dot + 1);
  }
  return parent->register_module(rest, std::move(module));
}

}  // namespace model_detail
}  // namespace ft
