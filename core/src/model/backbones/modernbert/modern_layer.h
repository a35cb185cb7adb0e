// ModernBERT's layer, private to core/src/model: the family whose layer is
// not BERT's. Names registered are transformers'
// (attn_norm, attn.Wqkv, attn.Wo, mlp_norm, mlp.Wi, mlp.Wo), so weights move
// both ways unchanged.
//
// The layer is pre-norm: x + attn(attn_norm(x)), then h + mlp(mlp_norm(h)),
// with no attn_norm in layer 0 (the embeddings were just normalised). Queries
// and keys are rotated by their positions (RoPE), with one base for global
// layers and another for local ones; local layers see only the tokens within
// local_attention / 2 positions either way. The MLP is GeGLU: Wi makes the
// input and the gate in one product.
#pragma once

#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include <ATen/ATen.h>

#include "ft/model/fused_ops.h"
#include "ft/model/packed_attention.h"
#include "model/module_parts.h"

namespace ft {
namespace model_detail {

// Rotary position embedding's angles, computed as transformers does: inverse
// frequencies 1 / base^(2i/d) in float32, the angles position x frequency in
// float32; rotary_qkv (ft/model/fused_ops.h) rotates q and k by them.
struct Rotary {
  at::Tensor inv_freq;  // [d / 2], float32
  Rotary(double base, int64_t head_dim) {
    const at::Tensor exponent = at::arange(0, head_dim, 2, at::kFloat) / static_cast<double>(head_dim);
    inv_freq = at::pow(base, exponent).reciprocal();
  }
  // cos and sin [T, d] for the tokens' positions.
  std::pair<at::Tensor, at::Tensor> angles(const at::Tensor& positions) const {
    const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq.to(positions.device()).unsqueeze(0);
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    return {emb.cos(), emb.sin()};
  }
};

struct ModernAttentionImpl : torch::nn::Module {
  Linear Wqkv{nullptr}, Wo{nullptr};
  Dropout dropout{nullptr}, out_drop{nullptr};  // both attention_dropout: the probabilities, Wo's output
  int64_t heads, head_dim;                      // this rank's heads, under tensor parallelism
  int64_t window;                               // tokens seen either way; < 0: every token (global)
  Rotary rotary;
  std::shared_ptr<const TensorParallelOps> tp;  // set by shard_tensor_parallel: Wo is row-parallel

  ModernAttentionImpl(const BertConfig& c, bool global)
      : heads(c.num_attention_heads),
        head_dim(c.hidden_size / c.num_attention_heads),
        window(global ? -1 : c.modern.local_attention / 2),
        rotary(global ? c.modern.global_theta : c.modern.local_theta, c.hidden_size / c.num_attention_heads) {
    Wqkv = register_module("Wqkv", Linear(c.hidden_size, 3 * c.hidden_size, c.modern.attention_bias));
    Wo = register_module("Wo", Linear(c.hidden_size, c.hidden_size, c.modern.attention_bias));
    dropout = register_module("dropout", Dropout(c.attention_probs_dropout_prob));
    out_drop = register_module("out_drop", Dropout(c.attention_probs_dropout_prob));
  }

  // [rows, 1, width, width] additive mask of a local layer: the key mask, and
  // every key further than `window` positions from the query masked too.
  // Positions are the tokens' columns, so padded and packed layouts agree.
  at::Tensor local_mask(const TokenLayout& layout, const at::Tensor& positions, const at::Tensor& key_mask) const {
    const at::Tensor p = layout.to_attention(positions.to(at::kFloat).unsqueeze(1)).view({layout.rows, layout.width});
    const at::Tensor near = (p.unsqueeze(2) - p.unsqueeze(1)).abs().le(static_cast<double>(window)).unsqueeze(1);
    // The lowest value, never -inf: a padded query with no key in reach gets
    // a uniform softmax rather than NaNs that its zero gradient would spread.
    return at::where(near, key_mask, at::full({}, std::numeric_limits<float>::lowest(), key_mask.options()));
  }

  // Whether the window reaches every key of every row anyway (rows no longer
  // than window + 1): then a local layer computes what a global one does.
  bool window_covers(const TokenLayout& layout) const { return window < 0 || layout.width <= window + 1; }

  // x: [T, hidden] -> [T, hidden].
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout) {
    const int64_t t = x.size(0);
    const at::Tensor qkv = Wqkv(x).view({t, 3, heads, head_dim});
    const at::Tensor positions = layout.positions(x.options().dtype(at::kLong));
    const auto [cos, sin] = rotary.angles(positions);
    const auto [q, k, v] = rotary_qkv(qkv, cos, sin);  // each [T, heads * d]
    at::Tensor context;  // [T, heads * d]
    const bool whole = window_covers(layout);
    const AttentionKernel kind = layout.attention;
    // Packed sequences are whole rows from column 0, so a token's index in
    // its sequence is its position and the kernel can apply the window itself.
    const bool packable = !tp && !layout.sequence_lengths.empty();
    if (packable && packed_chosen(kind)) {
      context = packed_attention(q, k, v, layout.sequence_lengths, heads,
                                 dropout->options.p(), dropout->is_training(), {}, {}, whole ? -1 : window,
                                 packed_schedule(kind));
    } else {
      auto split = [&](const at::Tensor& y) {  // [T, heads * d] -> [rows, heads, width, d]
        return layout.to_attention(y)
            .view({layout.rows, layout.width, heads, head_dim})
            .permute({0, 2, 1, 3});
      };
      const at::Tensor mask = whole ? layout.additive_mask : local_mask(layout, positions, layout.additive_mask);
      const at::Tensor c = sdpa_chosen(kind, dropout, x)  // [rows, heads, width, d]
                               ? sdpa_attention(split(q), split(k), split(v), mask, sdpa_dropout(dropout))
                               : attend(at::matmul(split(q), split(k).transpose(-1, -2)), static_cast<double>(head_dim),
                                        mask, dropout, split(v));
      context = layout.from_attention(c.permute({0, 2, 1, 3}).reshape({layout.rows * layout.width, heads * head_dim}));
    }
    return drop(out_drop, tp ? row_parallel(*Wo, *tp, context) : Wo(context));
  }
};

// GeGLU: Wi's first half is the input, its second the gate.
struct ModernMlpImpl : torch::nn::Module {
  Linear Wi{nullptr}, Wo{nullptr};
  Dropout dropout{nullptr};
  std::shared_ptr<const TensorParallelOps> tp;  // Wo is row-parallel
  explicit ModernMlpImpl(const BertConfig& c) {
    Wi = register_module("Wi", Linear(c.hidden_size, 2 * c.intermediate_size, c.modern.mlp_bias));
    dropout = register_module("drop", Dropout(c.hidden_dropout_prob));
    Wo = register_module("Wo", Linear(c.intermediate_size, c.hidden_size, c.modern.mlp_bias));
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = drop(dropout, geglu(Wi(x)));
    return tp ? row_parallel(*Wo, *tp, h) : Wo(h);
  }
};

struct ModernLayerImpl : EncoderLayer {
  Norm attn_norm{nullptr}, mlp_norm{nullptr};
  std::shared_ptr<ModernAttentionImpl> attn;
  std::shared_ptr<ModernMlpImpl> mlp;
  std::shared_ptr<const TensorParallelOps> tp;  // column-parallel inputs: f
  ModernLayerImpl(const BertConfig& c, int64_t index) {
    if (index > 0) attn_norm = register_module("attn_norm", make_layer_norm(c, c.hidden_size, c.modern.norm_bias));
    attn = register_module("attn", std::make_shared<ModernAttentionImpl>(c, c.modern.is_global(index)));
    mlp_norm = register_module("mlp_norm", make_layer_norm(c, c.hidden_size, c.modern.norm_bias));
    mlp = register_module("mlp", std::make_shared<ModernMlpImpl>(c));
  }
  // Whole heads only (rotary positions rotate pairs across a head's dimensions).
  void set_tensor_parallel(const std::shared_ptr<const TensorParallelOps>& shared, int64_t) override {
    attn->heads /= shared->size;
    tp = attn->tp = mlp->tp = shared;
  }
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout) override {
    const at::Tensor a = attn_norm ? attn_norm(x) : x;
    const at::Tensor h = x + attn->forward(tp ? tp->enter(a) : a, layout);
    const at::Tensor m = mlp_norm(h);
    return h + mlp->forward(tp ? tp->enter(m) : m);
  }
};

}  // namespace model_detail
}  // namespace ft
