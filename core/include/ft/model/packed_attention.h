// Attention of each sequence on its own, straight on packed tokens (CPU).
//
// q, k, v are [T, heads * d] with the batch's sequences stacked row after row
// (TokenLayout's packed order; every row a sequence keeps is attended).
// Sequence b's scores are [heads, len_b, len_b]: no padding at all, so the
// attention FLOPs are sum(len_b^2) instead of rows * width^2 (0.45x on the
// mini bench rows, 0.16x on the seeds' Weibo rows). One autograd node runs
// every sequence, in one of two schedules (AttentionSchedule below): whole
// scores with the probabilities saved, or tiles with only a log-sum-exp per
// query saved. The dropout mask on the probabilities is recomputed from its
// seed in backward (ft/model/dropout.h). Work is spread over the intra-op
// threads costliest-first, each thread running its share serially.
//
// Kernels: each head's GEMMs are BLAS `sgemm_` calls reading the packed rows
// in place (row stride heads * d); softmax, dropout and the softmax backward
// are plain (vectorised) loops: no copies and no per-op dispatch, which at ~100 small ops
// per sequence would cost more than the FLOPs. Everything is fp32, also under
// bf16 autocast (inputs are widened once, the result is cast back).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/base/torch_features.h"  // sdpa_available()

namespace ft {

// How a call schedules each sequence's scores:
//   kWhole: a head's len x keys scores at once, the probabilities kept for
//           backward: the fewest FLOPs, fastest on short sequences;
//   kTiled: blocks of 64 queries against tiles of up to 256 keys (only the
//           keys in reach under a window), with an online softmax; backward
//           computes the tiles again from each query's log-sum-exp. Memory is
//           O(T * heads) beyond q, k, v whatever the length; for long inputs.
//           Not with a prefix (which runs kWhole);
//   kAuto:  kTiled where tiled_pays() says so, else kWhole.
// Both draw the same dropout mask and agree to rounding.
enum class AttentionSchedule { kAuto, kWhole, kTiled };

// Whether kAuto tiles a call whose longest sequence has max_len tokens
// under `window` (< 0: none): measured on this project's bench models
// (docs/benchmarks.md, long inputs).
bool tiled_pays(int64_t max_len, int64_t window);

// Whether bf16 q, k, v (autocast) run the whole schedule on bf16 products
// with fp32 sums in this process (docs/performance.md, section 11), checked
// once on known products. Where not (Debian's oneDNN beside a PyPI
// LibTorch may refuse to run), they are widened to fp32 as fp16 inputs are.
bool bf16_attention_available();

// With prefix_k / prefix_v [P, heads * d] (prefix tuning), every sequence's
// queries also attend to those P keys and values, placed before its own
// (scores [heads, len_b, P + len_b]); their gradients sum over the sequences.
//
// window >= 0 (ModernBERT's local layers): query i attends only to keys j of
// its own sequence with |i - j| <= window; the others get probability 0.
// Not with a prefix.
at::Tensor packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& lengths, int64_t heads, double dropout_p, bool train,
                            const at::Tensor& prefix_k = {}, const at::Tensor& prefix_v = {}, int64_t window = -1,
                            AttentionSchedule schedule = AttentionSchedule::kAuto);

// LibTorch's scaled_dot_product_attention (2.0 and newer; sdpa_available()):
// q, k, v [rows, heads, L|S, d], additive_mask broadcastable to
// [rows, heads, L, S] (0 attended, the dtype's lowest not), scores scaled by
// 1/sqrt(d). Dropout on the probabilities is LibTorch's own (its generator),
// not ft's counter-based mask.
at::Tensor sdpa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& additive_mask, double dropout_p);

}  // namespace ft
