#include "ft/model/fused_ops.h"

#include <algorithm>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "compat.h"
#include "model/vec_math.h"
#include "simd_clones.h"

namespace ft {

namespace {

using vec_math::Floats8;

constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // the normal density at 0

// Eight floats from p, the lanes past n (a row's tail) zero. Inlined into
// the clones, the whole-block copy is one vector load or store.
__attribute__((always_inline)) inline Floats8 load8(const float* p, int64_t n) {
  Floats8 v = {};
  if (n >= 8) {
    std::memcpy(&v, p, sizeof v);
  } else {
    std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
  }
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, Floats8 v, int64_t n) {
  if (n >= 8) {
    std::memcpy(p, &v, sizeof v);
  } else {
    std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float));
  }
}

// One row of GeGLU: a = in[0, n), b = in[n, 2n).
FT_SIMD_CLONES void geglu_row(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t w = n - i;
    const Floats8 a = load8(in + i, w), b = load8(in + n + i, w);
    store8(out + i, a * vec_math::normal_cdf8(a) * b, w);
  }
}

// d/da gelu(a) * b = g b (Phi(a) + a phi(a)); d/db = g gelu(a).
FT_SIMD_CLONES void geglu_grad_row(const float* in, const float* g, float* gin, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t w = n - i;
    const Floats8 a = load8(in + i, w), b = load8(in + n + i, w), gy = load8(g + i, w);
    const Floats8 cdf = vec_math::normal_cdf8(a);
    const Floats8 density = vec_math::exp8(-0.5f * a * a) * kInvSqrt2Pi;
    store8(gin + i, gy * b * (cdf + a * density), w);
    store8(gin + n + i, gy * a * cdf, w);
  }
}

// Rows of a [rows, width] problem over the intra-op threads.
template <typename F>
void for_rows(int64_t rows, int64_t width, const F& f) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) f(r);
  });
}

struct GegluFunction : torch::autograd::Function<GegluFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    const at::Tensor in = x.contiguous();
    ctx->save_for_backward({in});
    const int64_t n = in.size(-1) / 2, rows = in.numel() / std::max<int64_t>(2 * n, 1);
    std::vector<int64_t> sizes = in.sizes().vec();
    sizes.back() = n;
    at::Tensor out = at::empty(sizes, in.options());
    const float* src = in.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for_rows(rows, 3 * n, [&](int64_t r) { geglu_row(src + r * 2 * n, dst + r * n, n); });
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor in = ctx->get_saved_variables()[0];
    const at::Tensor g = grads[0].contiguous();
    const int64_t n = in.size(-1) / 2, rows = in.numel() / std::max<int64_t>(2 * n, 1);
    at::Tensor gin = at::empty_like(in);
    const float* src = in.data_ptr<float>();
    const float* gy = g.data_ptr<float>();
    float* dst = gin.data_ptr<float>();
    for_rows(rows, 5 * n, [&](int64_t r) { geglu_grad_row(src + r * 2 * n, gy + r * n, dst + r * 2 * n, n); });
    return {gin};
  }
};

// y = x cos + rotate_half(x) sin over one head's d values, rotate_half(x) =
// (-x[h:], x[:h]).
FT_SIMD_CLONES void rotate_head(const float* x, const float* c, const float* s, float* y, int64_t d) {
  const int64_t h = d / 2;
  for (int64_t j = 0; j < h; ++j) y[j] = x[j] * c[j] - x[j + h] * s[j];
  for (int64_t j = h; j < d; ++j) y[j] = x[j] * c[j] + x[j - h] * s[j];
}

// The transpose of rotate_head: dx[j] = g[j] c[j] + g[j + h] s[j + h] for
// j < h, g[j] c[j] - g[j - h] s[j - h] above (sin is indexed by the output).
FT_SIMD_CLONES void rotate_head_grad(const float* g, const float* c, const float* s, float* dx, int64_t d) {
  const int64_t h = d / 2;
  for (int64_t j = 0; j < h; ++j) dx[j] = g[j] * c[j] + g[j + h] * s[j + h];
  for (int64_t j = h; j < d; ++j) dx[j] = g[j] * c[j] - g[j - h] * s[j - h];
}

struct RotaryQkvFunction : torch::autograd::Function<RotaryQkvFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv,
                                                const at::Tensor& cos, const at::Tensor& sin) {
    const at::Tensor in = qkv.contiguous();
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    ctx->save_for_backward({c, s});
    const int64_t t = in.size(0), heads = in.size(2), d = in.size(3), width = heads * d;
    ctx->saved_data["heads"] = heads;
    at::Tensor q = at::empty({t, width}, in.options()), k = at::empty_like(q), v = at::empty_like(q);
    const float* src = in.data_ptr<float>();
    const float* cp = c.data_ptr<float>();
    const float* sp = s.data_ptr<float>();
    float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    for_rows(t, 4 * width, [&](int64_t r) {
      const float* row = src + r * 3 * width;
      for (int64_t hd = 0; hd < heads; ++hd) {
        rotate_head(row + hd * d, cp + r * d, sp + r * d, qp + r * width + hd * d, d);
        rotate_head(row + width + hd * d, cp + r * d, sp + r * d, kp + r * width + hd * d, d);
      }
      std::memcpy(vp + r * width, row + 2 * width, static_cast<size_t>(width) * sizeof(float));
    });
    return {q, k, v};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& c = saved[0];
    const at::Tensor& s = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const int64_t t = c.size(0), d = c.size(1), width = heads * d;
    // An output nothing used has no gradient: it counts as zeros.
    std::array<at::Tensor, 3> g;
    for (size_t i = 0; i < 3; ++i)
      g[i] = grads[i].defined() ? grads[i].contiguous() : at::zeros({t, width}, c.options());
    at::Tensor dqkv = at::empty({t, 3, heads, d}, c.options());
    const float* cp = c.data_ptr<float>();
    const float* sp = s.data_ptr<float>();
    const float *gq = g[0].data_ptr<float>(), *gk = g[1].data_ptr<float>(), *gv = g[2].data_ptr<float>();
    float* dst = dqkv.data_ptr<float>();
    for_rows(t, 4 * width, [&](int64_t r) {
      float* row = dst + r * 3 * width;
      for (int64_t hd = 0; hd < heads; ++hd) {
        rotate_head_grad(gq + r * width + hd * d, cp + r * d, sp + r * d, row + hd * d, d);
        rotate_head_grad(gk + r * width + hd * d, cp + r * d, sp + r * d, row + width + hd * d, d);
      }
      std::memcpy(row + 2 * width, gv + r * width, static_cast<size_t>(width) * sizeof(float));
    });
    return {dqkv, at::Tensor(), at::Tensor()};
  }
};

// LibTorch's ops for what the kernels do, for every other case; rotation in
// fp32 and back to the input's dtype, as transformers computes it.
at::Tensor rotate_reference(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor f = x.to(at::kFloat);
  const int64_t half = f.size(-1) / 2;
  const at::Tensor rotated = at::cat({-f.narrow(-1, half, half), f.narrow(-1, 0, half)}, -1);
  return (f * cos + rotated * sin).to(x.scalar_type());
}

}  // namespace

bool fused_applies(const at::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == at::kFloat && x.numel() > 0 && !compat::autocast_enabled(c10::kCPU);
}

at::Tensor geglu(const at::Tensor& x) {
  if (!fused_applies(x)) {
    const auto halves = x.chunk(2, -1);
    return at::gelu(halves[0]) * halves[1];
  }
  return GegluFunction::apply(x);
}

std::array<at::Tensor, 3> rotary_qkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t t = qkv.size(0), width = qkv.size(2) * qkv.size(3);
  if (!fused_applies(qkv) || cos.scalar_type() != at::kFloat || qkv.size(3) % 2 != 0) {
    const at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // [T, 1, d] over the heads
    return {rotate_reference(qkv.select(1, 0), c, s).reshape({t, width}),
            rotate_reference(qkv.select(1, 1), c, s).reshape({t, width}), qkv.select(1, 2).reshape({t, width})};
  }
  const auto out = RotaryQkvFunction::apply(qkv, cos, sin);
  return {out[0], out[1], out[2]};
}

}  // namespace ft
