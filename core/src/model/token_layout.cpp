#include "ft/model/token_layout.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include <ATen/ATen.h>

namespace ft {
namespace {

// HF's extended mask: (1 - attended) * finfo(float32).min, broadcast over
// heads and queries.
at::Tensor additive_key_mask(const at::Tensor& attended, int64_t rows, int64_t width) {
  return (1.0 - attended.to(at::kFloat)).view({rows, 1, 1, width}) * std::numeric_limits<float>::lowest();
}

}  // namespace

AttentionKernel attention_kernel(const std::string& name) {
  if (name == "packed") return AttentionKernel::kPacked;
  if (name == "tiled") return AttentionKernel::kTiled;
  if (name == "sdpa") return AttentionKernel::kSdpa;
  if (name == "eager") return AttentionKernel::kEager;
  return AttentionKernel::kAuto;
}

TokenLayout TokenLayout::padded(const at::Tensor& attention_mask) {
  TokenLayout l;
  l.rows = attention_mask.size(0);
  l.seq = attention_mask.size(1);
  l.width = l.seq;
  l.tokens = l.rows * l.seq;
  l.additive_mask = additive_key_mask(attention_mask.ne(0), l.rows, l.width);
  return l;
}

TokenLayout TokenLayout::packed(const at::Tensor& attention_mask) {
  const int64_t rows = attention_mask.size(0), seq = attention_mask.size(1);
  if (rows == 0 || seq == 0) return padded(attention_mask);
  const at::Tensor attended = attention_mask.ne(0);
  at::Tensor keep = attended.clone();
  keep.select(1, 0).fill_(true);
  const at::Tensor lengths = keep.sum(1);
  // One host copy for every fact needed on the host (a sync on CUDA).
  const at::Tensor host = at::cat({lengths, attended.sum().view({1})}).to(at::kCPU);
  const int64_t* h = host.data_ptr<int64_t>();
  const std::vector<int64_t> row_lengths(h, h + rows);
  const int64_t width = *std::max_element(row_lengths.begin(), row_lengths.end());
  const int64_t tokens = std::accumulate(row_lengths.begin(), row_lengths.end(), int64_t{0});
  // Every kept token attended: each row is one sequence, attention can run per sequence.
  const bool per_sequence = h[rows] == tokens && attention_mask.device().is_cpu();
  if (tokens == rows * seq) {  // nothing to drop; attention still runs per sequence where it can
    TokenLayout l = padded(attention_mask);
    if (per_sequence) l.sequence_lengths = row_lengths;
    return l;
  }

  TokenLayout l;
  l.rows = rows;
  l.seq = seq;
  l.width = width;
  l.tokens = tokens;
  if (per_sequence) l.sequence_lengths = row_lengths;
  l.keep_index = keep.reshape(-1).nonzero().squeeze(1);
  const at::Tensor rank_in_row = keep.cumsum(1).sub_(1).reshape(-1).index_select(0, l.keep_index);
  l.first = lengths.cumsum(0).sub_(lengths);
  at::Tensor key_attended = attended.reshape(-1).index_select(0, l.keep_index);
  if (tokens == rows * width) {
    // Every row keeps `width` tokens: slot j of row r is token r * width + j,
    // so the token matrix already is the attention buffer.
    l.additive_mask = additive_key_mask(key_attended, rows, width);
    return l;
  }
  l.slot = at::floor_divide(l.keep_index, seq).mul_(width).add_(rank_in_row);
  at::Tensor slot_attended = at::zeros({rows * width}, attended.options());
  slot_attended.index_put_({l.slot}, key_attended);
  l.additive_mask = additive_key_mask(slot_attended, rows, width);
  return l;
}

at::Tensor TokenLayout::gather_tokens(const at::Tensor& per_position) const {
  const at::Tensor flat = per_position.reshape(-1);
  return keep_index.defined() ? flat.index_select(0, keep_index) : flat;
}

at::Tensor TokenLayout::positions(const c10::TensorOptions& options) const {
  if (keep_index.defined()) return keep_index.remainder(seq).to(options);
  return at::arange(seq, options).repeat({rows});
}

at::Tensor TokenLayout::to_attention(const at::Tensor& x) const {
  const int64_t features = x.size(-1);
  if (!slot.defined()) return x.view({rows, width, features});
  return at::zeros({rows * width, features}, x.options()).index_copy(0, slot, x).view({rows, width, features});
}

at::Tensor TokenLayout::from_attention(const at::Tensor& y) const {
  return slot.defined() ? y.index_select(0, slot) : y;
}

at::Tensor TokenLayout::token_index(const at::Tensor& flat_positions) const {
  // keep_index is ascending (row-major), so a kept position's rank in it is its row of the token matrix.
  return keep_index.defined() ? at::searchsorted(keep_index, flat_positions) : flat_positions;
}

at::Tensor TokenLayout::first_tokens(const at::Tensor& x) const {
  if (first.defined()) return x.index_select(0, first);
  return x.view({rows, tokens / rows, x.size(-1)}).select(1, 0);
}

TokenLayout TokenLayout::first_tokens_only() const {
  TokenLayout out;
  out.rows = rows;
  out.seq = out.width = 1;
  out.tokens = rows;
  out.attention = attention;
  return out;
}

}  // namespace ft
