#include "ft/model/packed_attention.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <functional>
#include <numeric>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "compat.h"
#include "model/attention_plan.h"
#include "model/bf16_gemm.h"
#include "ft/model/dropout.h"
#include "ft/base/error.h"

namespace ft {
namespace attention_detail {

void for_each_task(const std::vector<int64_t>& costs, const std::function<void(size_t, Scratch&)>& fn) {
  const size_t n = costs.size();
  const int threads = std::max(1, std::min<int>(at::get_num_threads(), static_cast<int>(n)));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<std::vector<size_t>> lists(static_cast<size_t>(threads));
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  for (size_t task : order) {
    const auto t = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    lists[t].push_back(task);
    load[t] += costs[task];
  }
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t t = begin; t < end; ++t)
      for (size_t task : lists[static_cast<size_t>(t)]) fn(task, scratch);
  });
}

// One row of n floats, in place: a local layer's band, too short for a
// kernel call to pay.
static void softmax_row(float* x, int64_t n) { scale_row(x, n, 1.0f / exp_sum(x, n, row_max(x, n))); }

// In-place softmax of each of `rows` rows of `cols` floats. window >= 0:
// only columns within `window` of the row are kept (the others become 0),
// which also skips their exp().
void softmax_rows(float* s, int64_t rows, int64_t cols, int64_t window) {
  if (window < 0) {
    // ATen's kernel, whose exp is vectorised for the CPU it runs on (a
    // scalar exp loop was a tenth of ft predict's time); ft's row kernels
    // are no faster on whole rows (3 072 x 256, one thread: 0.65 ms against
    // 0.60). In place is safe: each pass reads and writes the same element.
    at::Tensor x = at::from_blob(s, {rows, cols}, at::kFloat);
    at::_softmax_out(x, x, 1, false);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t lo = std::max<int64_t>(0, r - window), hi = std::min(cols, r + window + 1);
    float* x = s + r * cols;
    std::fill(x, x + lo, 0.0f);
    std::fill(x + hi, x + cols, 0.0f);
    softmax_row(x + lo, hi - lo);
  }
}

// Sequences as tasks of the whole schedule, costed by their scores.
std::vector<int64_t> sequence_costs(const Plan& plan) {
  std::vector<int64_t> costs;
  for (size_t b = 0; b < plan.lengths.size(); ++b) costs.push_back(plan.lengths[b] * plan.keys(b) + 1);
  return costs;
}

}  // namespace attention_detail

namespace {

using namespace attention_detail;

// The whole schedule's fp32 kernels: one sequence (all heads) per call,
// operands read in place from the packed [T, heads * d] rows (keys and
// values from their own rows, prefix first); `scratch` holds len x keys floats.
struct WholeKernel {
  const KernelArgs& a;

  // P' = dropout(P) into scratch; returns the matrix to multiply with.
  const float* dropped(const float* p, int64_t elems, int64_t counter, std::vector<float>& scratch) const {
    if (a.keep >= 1.0) return p;
    scratch.resize(static_cast<size_t>(elems));
    apply_dropout_mask(p, scratch.data(), elems, a.seed, counter, a.keep);
    return scratch.data();
  }

  void forward(size_t b, const float* q, const float* k, const float* v, float* probs, float* out,
               std::vector<float>& scratch) const {
    const Plan& plan = a.plan;
    const int64_t len = plan.lengths[b], keys = plan.keys(b), width = a.width, d = a.d;
    const int64_t row0 = plan.offsets[b] * width, key0 = plan.key_offsets[b] * width;
    for (int64_t h = 0; h < plan.heads; ++h) {
      const int64_t col = row0 + h * d, kcol = key0 + h * d, poff = plan.prob_offsets[b] + h * len * keys;
      float* p = probs + poff;
      sgemm_rows(false, true, len, keys, d, a.scale, q + col, width, k + kcol, width, 0.0f, p, keys);  // S = s Q K^T
      softmax_rows(p, len, keys, plan.window);
      const float* pd = dropped(p, len * keys, poff, scratch);
      sgemm_rows(false, false, len, d, keys, 1.0f, pd, keys, v + kcol, width, 0.0f, out + col, width);  // O = P' V
    }
  }

  void backward(size_t b, const float* q, const float* k, const float* v, const float* probs, const float* dout,
                float* dq, float* dk, float* dv, std::vector<float>& scratch, std::vector<float>& dp) const {
    const Plan& plan = a.plan;
    const int64_t len = plan.lengths[b], keys = plan.keys(b), width = a.width, d = a.d;
    const int64_t row0 = plan.offsets[b] * width, key0 = plan.key_offsets[b] * width;
    dp.resize(static_cast<size_t>(len * keys));
    for (int64_t h = 0; h < plan.heads; ++h) {
      const int64_t col = row0 + h * d, kcol = key0 + h * d, poff = plan.prob_offsets[b] + h * len * keys;
      const float* p = probs + poff;
      const float* pd = dropped(p, len * keys, poff, scratch);
      sgemm_rows(true, false, keys, d, len, 1.0f, pd, keys, dout + col, width, 0.0f, dv + kcol, width);  // dV = P'^T dO
      sgemm_rows(false, true, len, keys, d, 1.0f, dout + col, width, v + kcol, width, 0.0f, dp.data(), keys);  // dP' = dO V^T
      if (a.keep < 1.0) apply_dropout_mask(dp.data(), dp.data(), len * keys, a.seed, poff, a.keep);  // dP = mask(dP')
      for (int64_t r = 0; r < len; ++r) {  // dS = P * (dP - sum(dP * P))
        const float* pr = p + r * keys;
        float* g = dp.data() + r * keys;
        softmax_grad_row(pr, g, keys, row_dot(g, pr, keys));
      }
      sgemm_rows(false, false, len, d, keys, a.scale, dp.data(), keys, k + kcol, width, 0.0f, dq + col, width);  // dQ = s dS K
      sgemm_rows(true, false, keys, d, len, a.scale, dp.data(), keys, q + col, width, 0.0f, dk + kcol, width);  // dK = s dS^T Q
    }
  }
};

class PackedAttentionFunction : public torch::autograd::Function<PackedAttentionFunction> {
 public:
  // bf16 operands (autocast) on the whole schedule: bf16 products with fp32
  // sums, scores and probabilities in fp32 (bf16_attention.cpp). Otherwise
  // fp32 throughout: the inputs widened once, the results cast back.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, std::vector<int64_t> lengths, int64_t heads, int64_t extra,
                            double keep, int64_t window, bool tiled) {
    const Plan plan(std::move(lengths), heads, extra, window);
    const uint64_t seed = keep < 1.0 ? draw_dropout_seed() : 0;
    const bool bf16 = !tiled && q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
                      v.scalar_type() == at::kBFloat16 && bf16_gemm_works();
    ctx->saved_data["bf16"] = bf16;
    if (bf16) {
      const at::Tensor qb = q.contiguous(), kb = k.contiguous(), vb = v.contiguous();
      at::Tensor out = at::empty(qb.sizes(), qb.options());
      at::Tensor probs = at::empty({plan.prob_elems}, qb.options().dtype(at::kFloat));
      at::Tensor kept = at::empty({plan.prob_elems}, qb.options());
      whole_forward_bf16(make_args(plan, qb.size(1), keep, seed), bits(qb), bits(kb), bits(vb),
                         probs.data_ptr<float>(), bits(kept), bits(out));
      ctx->save_for_backward({qb, kb, vb, probs, kept});
      save_plan(ctx, plan, keep, seed, q.scalar_type(), tiled);
      return out;
    }
    const at::Tensor qf = q.to(at::kFloat).contiguous(), kf = k.to(at::kFloat).contiguous(),
                     vf = v.to(at::kFloat).contiguous();
    at::Tensor out = at::empty(qf.sizes(), qf.options());
    const KernelArgs args = make_args(plan, qf.size(1), keep, seed);
    const float *qp = qf.data_ptr<float>(), *kp = kf.data_ptr<float>(), *vp = vf.data_ptr<float>();
    if (tiled) {
      at::Tensor lse = at::empty({plan.tokens * plan.heads}, qf.options());
      tiled_forward(args, qp, kp, vp, out.data_ptr<float>(), lse.data_ptr<float>());
      ctx->save_for_backward({qf, kf, vf, out, lse});
    } else {
      at::Tensor probs = at::empty({plan.prob_elems}, qf.options());
      const WholeKernel kernel{args};
      for_each_task(sequence_costs(plan), [&](size_t b, Scratch& scratch) {
        kernel.forward(b, qp, kp, vp, probs.data_ptr<float>(), out.data_ptr<float>(), scratch.a);
      });
      ctx->save_for_backward({qf, kf, vf, probs});
    }
    save_plan(ctx, plan, keep, seed, q.scalar_type(), tiled);
    return out.to(v.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const Plan plan(ctx->saved_data["lengths"].toIntVector(), ctx->saved_data["heads"].toInt(),
                    ctx->saved_data["extra"].toInt(), ctx->saved_data["window"].toInt());
    const KernelArgs args = make_args(plan, q.size(1), ctx->saved_data["keep"].toDouble(),
                                      static_cast<uint64_t>(ctx->saved_data["seed"].toInt()));
    if (ctx->saved_data["bf16"].toBool()) {
      const at::Tensor grad = grads[0].to(at::kBFloat16).contiguous();
      at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
      whole_backward_bf16(args, bits(q), bits(k), bits(v), saved[3].data_ptr<float>(), bits(saved[4]), bits(grad),
                          bits(dq), bits(dk), bits(dv));
      return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    const at::Tensor grad = grads[0].to(at::kFloat).contiguous();
    const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>(),
                *gp = grad.data_ptr<float>();
    at::Tensor dq, dk, dv;
    if (ctx->saved_data["tiled"].toBool()) {
      dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);  // tiles add into them
      tiled_backward(args, qp, kp, vp, saved[3].data_ptr<float>(), saved[4].data_ptr<float>(), gp,
                     dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>());
    } else {
      dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
      const WholeKernel kernel{args};
      const float* probs = saved[3].data_ptr<float>();
      for_each_task(sequence_costs(plan), [&](size_t b, Scratch& scratch) {
        kernel.backward(b, qp, kp, vp, probs, gp, dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>(),
                        scratch.a, scratch.b);
      });
    }
    // The inputs' dtype (bf16 under autocast): grads match what they flow into.
    const auto dtype = ctx->saved_data["dtype"].toScalarType();
    return {dq.to(dtype), dk.to(dtype), dv.to(dtype), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }

 private:
  static void save_plan(torch::autograd::AutogradContext* ctx, const Plan& plan, double keep, uint64_t seed,
                        at::ScalarType dtype, bool tiled) {
    ctx->saved_data["lengths"] = plan.lengths;
    ctx->saved_data["heads"] = plan.heads;
    ctx->saved_data["extra"] = plan.extra;
    ctx->saved_data["window"] = plan.window;
    ctx->saved_data["keep"] = keep;
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    ctx->saved_data["dtype"] = dtype;
    ctx->saved_data["tiled"] = tiled;
  }
  // A contiguous bf16 tensor's elements as raw bits.
  static uint16_t* bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }
  static KernelArgs make_args(const Plan& plan, int64_t width, double keep, uint64_t seed) {
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(width / plan.heads)));
    return KernelArgs{plan, width / plan.heads, width, scale, keep, seed};
  }
};

}  // namespace

bool bf16_attention_available() { return bf16_gemm_works(); }

bool tiled_pays(int64_t max_len, int64_t window) {
  // Measured on the bench models, samples/s of ft run (docs/benchmarks.md):
  // a local layer's band is 1.10x faster tiled already at 256 tokens
  // (ModernBERT); global layers tie at 256 and 512 (MiniLM) and gain 1.13x
  // at 2 048, holding less memory at every length.
  return window >= 0 || max_len >= 512;
}

at::Tensor packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& lengths, int64_t heads, double dropout_p, bool train,
                            const at::Tensor& prefix_k, const at::Tensor& prefix_v, int64_t window,
                            AttentionSchedule schedule) {
  if (!q.device().is_cpu()) fail("packed_attention: CPU tensors only (got {})", q.device().str());
  if (q.sizes() != k.sizes() || q.sizes() != v.sizes() || q.dim() != 2 || q.size(1) % heads != 0)
    fail("packed_attention: q, k, v must be [T, heads * d] alike");
  if (std::accumulate(lengths.begin(), lengths.end(), int64_t{0}) != q.size(0))
    fail("packed_attention: sequence lengths do not add up to the {} packed rows", q.size(0));
  const int64_t extra = prefix_k.defined() ? prefix_k.size(0) : 0;
  if (extra > 0 && (prefix_k.dim() != 2 || prefix_k.size(1) != q.size(1) || prefix_v.sizes() != prefix_k.sizes()))
    fail("packed_attention: the prefix keys and values must be [P, heads * d] alike");
  if (extra > 0 && window >= 0) fail("packed_attention: a sliding window with a prefix is not supported");
  const double keep = train ? 1.0 - dropout_p : 1.0;
  if (keep <= 0.0) return v * 0;  // p = 1: every probability dropped
  if (extra == 0) {
    const bool tiled = schedule == AttentionSchedule::kTiled ||
                       (schedule == AttentionSchedule::kAuto && !lengths.empty() &&
                        tiled_pays(*std::max_element(lengths.begin(), lengths.end()), window));
    return PackedAttentionFunction::apply(q.contiguous(), k.contiguous(), v.contiguous(), lengths, heads, 0, keep, window,
                                          tiled);
  }
  // Each sequence's keys become [prefix; its own], one gather from [prefix; k]
  // whose backward sums the prefix's gradient over the sequences.
  std::vector<int64_t> rows;
  int64_t offset = 0;
  for (int64_t len : lengths) {
    for (int64_t j = 0; j < extra; ++j) rows.push_back(j);
    for (int64_t j = 0; j < len; ++j) rows.push_back(extra + offset + j);
    offset += len;
  }
  const at::Tensor index = at::tensor(rows, at::kLong);
  const at::Tensor keys = at::cat({prefix_k.to(k.scalar_type()), k}).index_select(0, index);
  const at::Tensor values = at::cat({prefix_v.to(v.scalar_type()), v}).index_select(0, index);
  return PackedAttentionFunction::apply(q.contiguous(), keys, values, lengths, heads, extra, keep, -1, false);
}

at::Tensor sdpa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& additive_mask, double dropout_p) {
  // The mask in the query's dtype, as the kernels require; fp16 has no
  // float-lowest, so a masked key gets fp16's (still exp() == 0).
  at::Tensor mask = additive_mask;
  if (q.scalar_type() == at::kHalf) mask = mask.clamp_min(-65504.0);
  return compat::scaled_dot_product_attention(q, k, v, mask.to(q.scalar_type()), dropout_p);
}

}  // namespace ft
