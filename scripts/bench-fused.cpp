// ModernBERT's element-wise chains, LibTorch op by op against ft's fused
// kernels (ft/model/fused_ops.h), forward + backward, at the bench model's
// width (384, 6 heads, FFN 576) and ModernBERT-base's (768, 12 heads, FFN
// 1 152) on 7 000 tokens (a global batch of 32 rows of ~220 real tokens).
// Wi's forward product is timed beside them for scale. Milliseconds, best of
// 5 after a warm-up. scripts/bench-fused.sh builds and runs it.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ft/model/fused_ops.h"

namespace {

template <typename F>
double best_ms(F&& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Forward, then backward from a fixed upstream gradient; the leaf's gradient reset.
template <typename F>
double step_ms(const at::Tensor& leaf, F&& forward) {
  return best_ms([&] {
    const at::Tensor y = forward();
    y.backward(at::ones_like(y));
    leaf.mutable_grad().reset();
  });
}

at::Tensor rotate_ops(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace

int main() {
  const int64_t t = 7000;
  std::printf("| width, heads, FFN | Wi forward (for scale) | GeGLU ops | GeGLU fused | ops / fused | rotary q, k, v ops | rotary fused | ops / fused |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [h, heads, ffn] : {std::tuple<int64_t, int64_t, int64_t>{384, 6, 576}, {768, 12, 1152}}) {
    at::manual_seed(0);
    const int64_t d = h / heads;
    const at::Tensor x = at::randn({t, h});
    const at::Tensor wi = at::randn({2 * ffn, h}) * 0.05;
    const at::Tensor a = at::randn({t, 2 * ffn}).requires_grad_(true);
    const double gemm = best_ms([&] { at::linear(x, wi); });
    const double geglu_ops = step_ms(a, [&] {
      const auto halves = a.chunk(2, -1);
      return at::gelu(halves[0]) * halves[1];
    });
    const double geglu_fused = step_ms(a, [&] { return ft::geglu(a); });
    const at::Tensor qkv = at::randn({t, 3, heads, d}).requires_grad_(true);
    const at::Tensor angle = at::rand({t, d}) * 100.0;
    const at::Tensor cos = angle.cos(), sin = angle.sin();
    const at::Tensor c3 = cos.unsqueeze(1), s3 = sin.unsqueeze(1);
    const double rot_ops = step_ms(qkv, [&] {
      return at::cat({rotate_ops(qkv.select(1, 0), c3, s3).reshape({t, h}),
                      rotate_ops(qkv.select(1, 1), c3, s3).reshape({t, h}), qkv.select(1, 2).reshape({t, h})});
    });
    const double rot_fused = step_ms(qkv, [&] {
      const auto out = ft::rotary_qkv(qkv, cos, sin);
      return at::cat({out[0], out[1], out[2]});
    });
    std::printf("| %ld, %ld, %ld | %.1f | %.1f | %.1f | **%.2fx** | %.1f | %.1f | **%.2fx** |\n", static_cast<long>(h),
                static_cast<long>(heads), static_cast<long>(ffn), gemm, geglu_ops, geglu_fused, geglu_ops / geglu_fused,
                rot_ops, rot_fused, rot_ops / rot_fused);
  }
}
