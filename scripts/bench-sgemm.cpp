// OpenBLAS's sgemm (the libblas.so.3 alternative LibTorch 1.13 calls) against
// oneDNN's dnnl_sgemm on the products ft's fp32 training and inference run:
// a Linear's forward (x W^T: NT), its input gradient (dy W: NN) and weight
// gradient (dy^T x: TN) at MiniLM's and ModernBERT-base's sizes on 8 192
// tokens, the modernbert peer model's on 4 096, and packed attention's
// per-(sequence, head) products. Row-major, best of 3 timed runs, GFLOP/s.
// scripts/bench-sgemm.sh builds and runs it.
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

// The C BLAS interface, declared here: Debian installs cblas.h only with a
// -dev package of one BLAS, and libblas.so.3 serves whichever is chosen.
extern "C" void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda,
                            const float* b, int ldb, float beta, float* c, int ldc);

namespace {

struct Shape {
  const char* what;
  int m, n, k;
  char ta, tb;
};

template <typename F>
double best_seconds(F&& f, int reps) {
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return best;
}

}  // namespace

int main() {
  const Shape shapes[] = {
      {"MiniLM q|k|v forward", 8192, 1152, 384, 'N', 'T'},   {"MiniLM FFN in forward", 8192, 1536, 384, 'N', 'T'},
      {"MiniLM FFN out forward", 8192, 384, 1536, 'N', 'T'}, {"MiniLM FFN in dx", 8192, 384, 1536, 'N', 'N'},
      {"MiniLM FFN out dx", 8192, 1536, 384, 'N', 'N'},      {"MiniLM FFN in dW", 1536, 384, 8192, 'T', 'N'},
      {"ModernBERT Wqkv forward", 8192, 2304, 768, 'N', 'T'}, {"ModernBERT Wqkv dx", 8192, 768, 2304, 'N', 'N'},
      {"ModernBERT Wqkv dW", 2304, 768, 8192, 'T', 'N'},     {"attention Q K^T (256, d 64)", 256, 256, 64, 'N', 'T'},
      {"attention P V (256, d 64)", 256, 64, 256, 'N', 'N'},  {"attention dS^T Q (256, d 64)", 256, 64, 256, 'T', 'N'},
      {"tiled Q K^T (64 x 256)", 64, 256, 64, 'N', 'T'},
      // The modernbert peer workload (12 x 384, intermediate 576), 4 096 tokens a rank.
      {"ModernBERT-384 Wqkv dW", 1152, 384, 4096, 'T', 'N'}, {"ModernBERT-384 Wo dW", 384, 384, 4096, 'T', 'N'},
      {"ModernBERT-384 mlp Wo dW", 384, 576, 4096, 'T', 'N'}, {"ModernBERT-384 Wqkv forward", 4096, 1152, 384, 'N', 'T'},
      {"ModernBERT-384 Wqkv dx", 4096, 384, 1152, 'N', 'N'},
  };
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // OpenBLAS picks its kernels by CPU model: 0.3.21 serves AMD's Zen 4 with Haswell's (AVX2).
  if (auto core = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
    std::printf("OpenBLAS kernels: %s\n\n", core());
  }
  std::printf("| product | m x n x k | op | OpenBLAS GFLOP/s | oneDNN GFLOP/s | oneDNN / OpenBLAS |\n|---|---|---|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n), c(static_cast<size_t>(s.m) * s.n);
    for (float& x : a) x = dist(gen);
    for (float& x : b) x = dist(gen);
    const int lda = s.ta == 'N' ? s.k : s.m, ldb = s.tb == 'N' ? s.n : s.k;
    const double flops = 2.0 * s.m * s.n * s.k;
    const int reps = std::max(3, static_cast<int>(2e9 / flops));
    const double blas = best_seconds(
        [&] {
          cblas_sgemm(101, s.ta == 'N' ? 111 : 112, s.tb == 'N' ? 111 : 112, s.m, s.n, s.k, 1.0f, a.data(), lda,
                      b.data(), ldb, 0.0f, c.data(), s.n);
        },
        reps);
    const double dnnl = best_seconds(
        [&] { dnnl_sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n); }, reps);
    std::printf("| %s | %d x %d x %d | %c%c | %.0f | %.0f | %.2f |\n", s.what, s.m, s.n, s.k, s.ta, s.tb,
                flops / blas / 1e9, flops / dnnl / 1e9, blas / dnnl);
  }
}
