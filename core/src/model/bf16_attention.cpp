// Packed attention's whole schedule on bf16 operands. Under autocast q, k and
// v arrive in bf16 from their Linears; widening them, multiplying in fp32
// and narrowing the results cost eight casts of [T, width] per layer, and
// sgemm runs the products at fp32 speed. Here the products take bf16
// operands with fp32 sums (oneDNN, bf16_gemm.h), the outputs and input
// gradients are written in bf16 by the products themselves, and everything
// between the products (softmax, dropout, the softmax gradient) stays fp32.
#include <cstdint>
#include <vector>

#include <c10/util/BFloat16.h>

#include "ft/model/dropout.h"
#include "model/attention_plan.h"
#include "model/bf16_gemm.h"
#include "simd_clones.h"

namespace ft::attention_detail {

namespace {

// dP = dP' * mask / keep in place, the mask read back from P' (bf16 bits):
// P'[j] is 0 exactly where j was dropped, or where P[j] itself is 0 (out of
// a window's reach, or below bf16's range), and there dS = P (...) is 0
// whatever dP[j] is. So backward draws no dropout hashes at all.
FT_SIMD_CLONES void unmask_row(const uint16_t* kept, float* g, int64_t n, float inv_keep) {
  for (int64_t j = 0; j < n; ++j) g[j] = kept[j] != 0 ? g[j] * inv_keep : 0.0f;
}

}  // namespace

void whole_forward_bf16(const KernelArgs& a, const uint16_t* q, const uint16_t* k, const uint16_t* v, float* probs,
                        uint16_t* kept, uint16_t* out) {
  const Plan& plan = a.plan;
  for_each_task(sequence_costs(plan), [&](size_t b, Scratch&) {
    const int64_t len = plan.lengths[b], keys = plan.keys(b), width = a.width, d = a.d;
    if (len == 0) return;
    const int64_t row0 = plan.offsets[b] * width, key0 = plan.key_offsets[b] * width;
    for (int64_t h = 0; h < plan.heads; ++h) {
      const int64_t col = row0 + h * d, kcol = key0 + h * d, poff = plan.prob_offsets[b] + h * len * keys;
      float* p = probs + poff;
      gemm_bf16_rows(false, true, len, keys, d, q + col, width, k + kcol, width, p, false, keys);  // Q K^T
      scale_row(p, len * keys, a.scale);
      softmax_rows(p, len, keys, plan.window);
      uint16_t* pd = kept + poff;  // P' = dropout(P), the product's bf16 operand, kept for backward
      if (a.keep >= 1.0) {
        round_to_bf16(p, pd, len * keys);
      } else {
        apply_dropout_mask(p, reinterpret_cast<at::BFloat16*>(pd), len * keys, a.seed, poff, a.keep);
      }
      gemm_bf16_rows(false, false, len, d, keys, pd, keys, v + kcol, width, out + col, true, width);  // O = P' V
    }
  });
}

void whole_backward_bf16(const KernelArgs& a, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                         const float* probs, const uint16_t* kept, const uint16_t* dout, uint16_t* dq, uint16_t* dk,
                         uint16_t* dv) {
  const auto inv_keep = static_cast<float>(1.0 / a.keep);
  const Plan& plan = a.plan;
  for_each_task(sequence_costs(plan), [&](size_t b, Scratch& scratch) {
    const int64_t len = plan.lengths[b], keys = plan.keys(b), width = a.width, d = a.d;
    if (len == 0) return;
    const int64_t row0 = plan.offsets[b] * width, key0 = plan.key_offsets[b] * width;
    std::vector<float>& dp = scratch.b;
    dp.resize(static_cast<size_t>(len * keys));
    scratch.h.resize(static_cast<size_t>(len * keys));
    for (int64_t h = 0; h < plan.heads; ++h) {
      const int64_t col = row0 + h * d, kcol = key0 + h * d, poff = plan.prob_offsets[b] + h * len * keys;
      const float* p = probs + poff;
      const uint16_t* pd = kept + poff;
      gemm_bf16_rows(true, false, keys, d, len, pd, keys, dout + col, width, dv + kcol, true, width);  // dV = P'^T dO
      gemm_bf16_rows(false, true, len, keys, d, dout + col, width, v + kcol, width, dp.data(), false,
                     keys);  // dP' = dO V^T
      // dP, then s dS = s P * (dP - sum(dP * P)), rounded row by row while it is in cache.
      for (int64_t r = 0; r < len; ++r) {
        const float* pr = p + r * keys;
        float* g = dp.data() + r * keys;
        if (a.keep < 1.0) unmask_row(pd + r * keys, g, keys, inv_keep);
        softmax_grad_row(pr, g, keys, row_dot(g, pr, keys));
        round_to_bf16(g, scratch.h.data() + r * keys, keys, a.scale);
      }
      gemm_bf16_rows(false, false, len, d, keys, scratch.h.data(), keys, k + kcol, width, dq + col, true,
                     width);  // dQ = (s dS) K
      gemm_bf16_rows(true, false, keys, d, len, scratch.h.data(), keys, q + col, width, dk + kcol, true,
                     width);  // dK = (s dS)^T Q
    }
  });
}

}  // namespace ft::attention_detail
