// ft's fp32 matrix product on the CPU, private to core/src/model: oneDNN's
// sgemm, which is faster than OpenBLAS's on the Linear and attention shapes
// ft runs (docs/performance.md, section 6).
#pragma once

#include <cstdint>

namespace ft {

// Row-major C[m x n] = alpha * op(A) op(B) + beta * C, op(X) = X^T where
// ta/tb, with row strides lda/ldb/ldc. Where oneDNN declines the product, it
// runs through ATen instead. That is every product beside a PyPI LibTorch: its
// libtorch_cpu, loaded first, exports its own oneDNN's std::call_once
// instantiations, the dynamic linker binds Debian libdnnl's sgemm JIT set-up
// to them, Debian's kernel table stays empty, and dnnl_sgemm answers
// "unimplemented" (seen with LD_DEBUG=bindings and gdb, torch 2.15). ATen
// sends those products to the MKL the wheel carries.
void sgemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Whether a Linear's weight gradient dy^T x runs here rather than on
// LibTorch's mm (OpenBLAS). OpenBLAS wins that transposed product only where
// it runs its AVX-512 kernels (oneDNN reached 0.82-0.87x of its speed on
// MiniLM's shapes on an AMX Xeon). OpenBLAS 0.3.21 does not know AMD's Zen 4
// and serves it with its Haswell (AVX2) kernels at half oneDNN's speed (121
// against 245 GFLOP/s, one thread), so there the product comes here. Decided
// once per process from the CPU's flags and OpenBLAS's core name, never by
// timing, so that a machine always computes the same sums
// (docs/performance.md, section 6).
bool weight_grads_on_onednn();

}  // namespace ft
