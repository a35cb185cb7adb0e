// What packed attention's two schedules share, private to core/src/model:
// where each sequence's rows live, sgemm on rows read in place, and the
// spread of independent tasks over the intra-op threads.
//
// The whole schedule (packed_attention.cpp) computes each sequence's scores
// in full and keeps the probabilities for backward. The tiled schedule
// (tiled_attention.cpp) never holds more than one tile of scores: it keeps
// only each query's log-sum-exp, and backward computes the tiles again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/sgemm.h"

namespace ft::attention_detail {

// Where each sequence's rows and probabilities live. Sequence b has
// lengths[b] queries and extra + lengths[b] keys: a prefix's `extra` rows,
// then its own (k and v hold each sequence's prefix copy before its rows).
// prob_offsets number every probability as if all were kept: the whole
// schedule stores them there, and both schedules draw the dropout of
// probability (b, h, i, j) from counter prob_offsets[b] + (h * len + i) * keys + j,
// so the two drop the same elements.
struct Plan {
  std::vector<int64_t> lengths, offsets, key_offsets, prob_offsets;
  int64_t heads = 1, extra = 0, tokens = 0, prob_elems = 0;
  int64_t window = -1;  // >= 0: keys further than this from the query are masked (no prefix then)

  Plan(std::vector<int64_t> lens, int64_t h, int64_t prefix, int64_t window_)
      : lengths(std::move(lens)), heads(h), extra(prefix), window(window_) {
    for (int64_t len : lengths) {
      offsets.push_back(tokens);
      key_offsets.push_back(tokens + extra * static_cast<int64_t>(key_offsets.size()));
      prob_offsets.push_back(prob_elems);
      tokens += len;
      prob_elems += h * len * (len + extra);
    }
  }
  int64_t keys(size_t b) const { return lengths[b] + extra; }
  // Keys query i of a sequence of len can reach: [lo, hi).
  int64_t reach_lo(int64_t i) const { return window < 0 ? 0 : std::max<int64_t>(0, i - window); }
  int64_t reach_hi(int64_t i, int64_t keys) const { return window < 0 ? keys : std::min(keys, i + window + 1); }
};

// Per-thread buffers, reused across the thread's tasks.
struct Scratch {
  std::vector<float> a, b, c;
  std::vector<uint16_t> h;  // bf16 operands (bf16_attention.cpp)
};

// Runs fn(task) for tasks 0..costs.size()-1: costliest first onto the
// least-loaded thread, then each thread its list. BLAS and ATen calls nested
// in the region run serially, so a task never competes with itself.
void for_each_task(const std::vector<int64_t>& costs, const std::function<void(size_t, Scratch&)>& fn);

// Vectorised row kernels (tiled_attention.cpp), shared by both schedules:
// the maximum of x[0, n); x[i] = exp(x[i] - shift) in place, returning their
// sum (shift >= every x[i]); dS = P * (dP - dot) in place in dp; x *= s;
// the dot product of a and b.
float row_max(const float* x, int64_t n);
float exp_sum(float* x, int64_t n, float shift);
void softmax_grad_row(const float* p, float* dp, int64_t n, float dot);
void scale_row(float* x, int64_t n, float s);
float row_dot(const float* a, const float* b, int64_t n);

// One call's operands: q, k, v [T, width] fp32 rows (width = heads * d),
// scores scaled by `scale`, probabilities kept with probability `keep`
// under the dropout stream `seed`.
struct KernelArgs {
  const Plan& plan;
  int64_t d, width;
  float scale;
  double keep;
  uint64_t seed;
};

// The tiled schedule, one task per (sequence, head); no prefix. Forward
// writes out [T, width] and lse [T * heads] (sequence b's head h at
// offsets[b] * heads + h * len). Backward reads them back and writes dq, dk,
// dv, which must start at zero (tiles add into them).
void tiled_forward(const KernelArgs& args, const float* q, const float* k, const float* v, float* out, float* lse);
void tiled_backward(const KernelArgs& args, const float* q, const float* k, const float* v, const float* out,
                    const float* lse, const float* dout, float* dq, float* dk, float* dv);

// The whole schedule (packed_attention.cpp): sequence b's cost as a task;
// in-place softmax of `rows` rows of `cols` scores, window as in Plan.
std::vector<int64_t> sequence_costs(const Plan& plan);
void softmax_rows(float* s, int64_t rows, int64_t cols, int64_t window);

// The whole schedule on bf16 operands (bf16_attention.cpp), autocast's
// dtype: q, k, v, out and their gradients bf16 [T, width] (raw bits); the
// scores, probabilities and their gradients fp32, rounded to bf16 only
// where they become a product's operand, as autocast's eager matmuls round
// them. probs as the fp32 whole schedule keeps them; kept (as many bf16
// values) holds P' = dropout(P), the operand of P' V, which backward reuses
// instead of drawing the mask again.
void whole_forward_bf16(const KernelArgs& args, const uint16_t* q, const uint16_t* k, const uint16_t* v, float* probs,
                        uint16_t* kept, uint16_t* out);
void whole_backward_bf16(const KernelArgs& args, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                         const float* probs, const uint16_t* kept, const uint16_t* dout, uint16_t* dq, uint16_t* dk,
                         uint16_t* dv);

}  // namespace ft::attention_detail
