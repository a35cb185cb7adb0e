#include "model/sgemm.h"

#include <dlfcn.h>

#include <string>

#include <ATen/ATen.h>
#include <oneapi/dnnl/dnnl.h>

namespace ft {

namespace {

at::Tensor view_rows(const float* data, bool transposed, int64_t rows, int64_t cols, int64_t ld) {
  // op(X) is rows x cols; X itself is stored row-major with stride ld.
  auto* p = const_cast<float*>(data);  // read only: the tensor is an operand
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  return transposed ? at::from_blob(p, {cols, rows}, {ld, 1}, f32).t() : at::from_blob(p, {rows, cols}, {ld, 1}, f32);
}

// OpenBLAS's kernel family ("Haswell", "SkylakeX", ...); empty where no
// OpenBLAS is loaded (beside a LibTorch wheel, whose mm runs its own MKL).
// The symbol lives in the libopenblas that the libblas.so.3 alternative
// depends on, in the process's global scope.
std::string openblas_core() {
  using CoreName = char* (*)();
  auto get = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = get ? get() : nullptr;
  return name ? name : "";
}

bool avx512_kernels(const std::string& core) {
  for (const char* wide : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == wide) return true;
  }
  return false;
}

}  // namespace

bool weight_grads_on_onednn() {
  static const bool here = [] {
    if (!__builtin_cpu_supports("avx512f")) return false;  // not measured there: LibTorch's mm as before
    const std::string core = openblas_core();
    return !core.empty() && !avx512_kernels(core);
  }();
  return here;
}

void sgemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == dnnl_success) return;
  at::Tensor out = at::from_blob(c, {m, n}, {ldc, 1}, at::TensorOptions().dtype(at::kFloat));
  out.addmm_(view_rows(a, ta, m, k, lda), view_rows(b, tb, k, n, ldb), beta, alpha);  // beta 0: C is not read
}

}  // namespace ft
