// ft's fp32 matrix product on the CPU, private to core/src/model: oneDNN's
// sgemm, which is faster than OpenBLAS's on the Linear and attention shapes
// ft runs (docs/performance.md, section 6).
#pragma once

#include <cstdint>

namespace ft {

// Row-major C[m x n] = alpha * op(A) op(B) + beta * C, op(X) = X^T where
// ta/tb, with row strides lda/ldb/ldc. Where oneDNN declines the product (a
// LibTorch wheel's own oneDNN, loaded first, has been seen to answer
// "unimplemented" for Debian's), it runs through ATen instead.
void sgemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace ft
