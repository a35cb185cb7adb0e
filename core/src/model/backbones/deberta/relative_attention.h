// DeBERTa-v2/v3's disentangled attention terms: the relative-position part
// that BERT's SelfAttentionImpl adds to its scores (RelativeScores,
// backbones/bert/bert_layer.h) in DeBERTa's layers.
//
// Every layer reads one table of relative-position embeddings, [2 span,
// hidden] (normalised once by unit 0 and carried with the activations). A
// pair of tokens i, j at positions p_i, p_j reads the table at row
// bucket(p_i - p_j) + span, clamped to the table: with position_buckets,
// distances up to half of them keep their own row and longer ones share
// log-spaced rows up to max_relative_positions. Two terms join the
// content-to-content score q_i . k_j:
//   c2p  q_i . K_row   (the query against the table's keys, key_proj(table))
//   p2c  k_j . Q_row'  (the key against the table's queries, query_proj(table)),
//        at the row of the reversed distance;
// and all three are divided by sqrt(head_dim * (1 + number of terms)).
#pragma once

#include <cmath>
#include <cstdint>

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/modules/dropout.h>

#include "ft/model/model.h"
#include "ft/model/token_layout.h"
#include "model/backbones/bert/bert_layer.h"
#include "model/backbones/deberta/relative_bias.h"

namespace ft {
namespace model_detail {

// at::gather along the last dimension that keeps only the index for
// backward. LibTorch's own GatherBackward saves its whole input: here that is
// a [rows, heads, width, 2 span] product per term and layer, twice the size
// of the attention scores, held until backward for nothing but its shape.
struct GatherLast : torch::autograd::Function<GatherLast> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, const at::Tensor& index) {
    ctx->saved_data["sizes"] = input.sizes().vec();
    ctx->save_for_backward({index});
    return at::gather(input, -1, index);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor index = ctx->get_saved_variables()[0];
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    return {at::zeros(sizes, grads[0].options()).scatter_add_(-1, index, grads[0]), at::Tensor()};
  }
};

// scale_factor: 1 + the number of relative terms.
struct RelativeAttention : RelativeScores {
  bool c2p, p2c;
  int64_t span;          // the table has 2 span rows
  int64_t buckets;       // position_buckets; <= 0: every distance its own row
  int64_t max_relative;  // max_relative_positions (resolved)

  explicit RelativeAttention(const BertConfig& c)
      : RelativeScores(c.hidden_dropout_prob),
        c2p(c.deberta.c2p),
        p2c(c.deberta.p2c),
        span(c.relative_span()),
        buckets(c.deberta.position_buckets),
        max_relative(c.deberta.max_relative(c.max_position_embeddings)) {
    scale_factor = 1.0 + (c2p ? 1 : 0) + (p2c ? 1 : 0);
  }

  // The bucket of each distance in `distance` (long), as transformers'
  // make_log_bucket_position computes it: in float32, so that the rows at
  // the edges of the log-spaced buckets are the same.
  at::Tensor bucket(const at::Tensor& distance) const {
    if (buckets <= 0 || max_relative <= 0) return distance;
    const int64_t mid = buckets / 2;
    const at::Tensor sign = at::sign(distance);
    const at::Tensor near = distance.lt(mid).logical_and(distance.gt(-mid));
    const at::Tensor abs_pos = at::where(near, at::full({}, mid - 1, distance.options()), distance.abs());
    const at::Tensor log_base = at::log(at::scalar_tensor(static_cast<double>(max_relative - 1) / mid, at::kFloat));
    const at::Tensor log_pos =
        at::ceil(at::log(abs_pos.to(at::kFloat) / static_cast<double>(mid)) / log_base * static_cast<double>(mid - 1)) + mid;
    return at::where(abs_pos.le(mid), distance.to(at::kFloat), log_pos * sign).to(at::kLong);
  }

  // The table row of each distance -(reach - 1) ... reach - 1, [2 reach - 1]:
  // clamp(bucket(d) + span). bucket is odd, so the reversed distance's row
  // is this read backwards.
  at::Tensor rows_by_distance(int64_t reach, const at::TensorOptions& longs) const {
    return (bucket(at::arange(-(reach - 1), reach, longs)) + span).clamp(0, 2 * span - 1);
  }

  // [rows or 1, width, width] table rows: clamp(sign * bucket(p_i - p_j) + span).
  // Positions are the tokens' columns, as in the padded model, where slot j
  // is column j in every row and one matrix serves them all.
  std::pair<at::Tensor, at::Tensor> rows_read(const TokenLayout& layout, const c10::Device& device) const {
    const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
    at::Tensor pos = layout.is_packed()
                         ? layout.to_attention(layout.positions(longs).unsqueeze(1)).view({layout.rows, layout.width})
                         : at::arange(layout.width, longs).unsqueeze(0);
    const int64_t reach = layout.seq;  // |p_i - p_j| < seq
    const at::Tensor forward_rows = rows_by_distance(reach, longs);
    const at::Tensor reverse_rows = forward_rows.flip(0);
    const at::Tensor index = (pos.unsqueeze(2) - pos.unsqueeze(1)) + (reach - 1);
    return {forward_rows.index({index}), reverse_rows.index({index})};
  }

  // Whether every kept token's position is its column in the attention
  // buffer: always padded, and packed when no row has a hole before its
  // last kept token. Then pair (i, j) reads the row of i - j in every row.
  static bool positions_are_columns(const TokenLayout& layout) {
    if (!layout.is_packed()) return true;
    const auto longs = at::TensorOptions().dtype(at::kLong).device(layout.keep_index.device());
    const at::Tensor slots = layout.slot.defined() ? layout.slot : at::arange(layout.tokens, longs);
    return at::equal(layout.positions(longs), slots.remainder(layout.width));
  }

  // The c2p and p2c terms for q, k [rows, heads, width, d] and the table
  // projected into this rank's heads, pos_query and pos_key [heads, 2 span, d]:
  // [rows, heads, width, width], unscaled.
  at::Tensor bias(const at::Tensor& q, const at::Tensor& k, const at::Tensor& pos_query, const at::Tensor& pos_key,
                  const TokenLayout& layout) const override {
    // The blocked kernel (relative_bias.h) on CPU in fp32; "eager" keeps
    // Hugging Face's gather, which is also the path for other layouts.
    const bool floats = q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                        pos_query.scalar_type() == at::kFloat && pos_key.scalar_type() == at::kFloat;
    if ((c2p || p2c) && layout.attention != AttentionKernel::kEager && floats && q.device().is_cpu() &&
        positions_are_columns(layout)) {
      const auto dense = [](const at::Tensor& x) { return x.stride(-1) == 1 ? x : x.contiguous(); };
      return banded_relative_bias(dense(q), dense(k), dense(pos_query), dense(pos_key),
                                  rows_by_distance(layout.width, at::TensorOptions().dtype(at::kLong)), c2p, p2c);
    }
    const auto [c2p_rows, p2c_rows] = rows_read(layout, q.device());
    const std::vector<int64_t> shape = {q.size(0), q.size(1), q.size(2), q.size(2)};
    at::Tensor out = at::zeros({}, q.options());
    if (c2p) {
      const at::Tensor by_row = at::matmul(q, pos_key.transpose(-1, -2));  // [rows, heads, width, 2 span]
      out = out + GatherLast::apply(by_row, c2p_rows.unsqueeze(1).expand(shape));
    }
    if (p2c) {
      // Key j against the table's query at the reversed distance, gathered
      // per key and turned to [query, key].
      const at::Tensor by_row = at::matmul(k, pos_query.transpose(-1, -2));
      out = out + GatherLast::apply(by_row, p2c_rows.unsqueeze(1).expand(shape)).transpose(-1, -2);
    }
    return out;
  }
};

}  // namespace model_detail
}  // namespace ft
