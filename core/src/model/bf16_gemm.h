// bf16 matrix products for ft's CPU attention kernels, private to
// core/src/model. Under autocast the packed attention multiplies bf16
// operands (as the eager path's autocast matmuls do) and accumulates in
// fp32; on the per-(sequence, head) shapes, read in place from the packed
// rows, oneDNN's bf16 GEMM runs 1.1x its sgemm on Q K^T and 1.6x on P V
// (docs/performance.md, section 11).
#pragma once

#include <cstdint>
#include <cstring>

namespace ft {

// f rounded to bf16's bits as c10::BFloat16 rounds: to nearest even, any NaN
// to 0x7FC0. Written on the bits so that loops over it vectorise.
__attribute__((always_inline)) inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const auto rounded = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  return f != f ? uint16_t{0x7FC0} : rounded;
}

// Row-major C[m x n] = op(A) op(B), op(X) = X^T where ta/tb; A and B
// bf16 (raw bits) with row strides lda/ldb; C fp32, or bf16 rounded once
// from the fp32 result where c_bf16, row stride ldc. C is written, never
// read. Where oneDNN declines a product, it runs widened to fp32 through
// sgemm_rows: the same sums, only slower.
// (No scale factor: oneDNN's output scales took its bf16 GEMM off its fast
// path, 7x slower on Q K^T; the callers scale in fp32.)
void gemm_bf16_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, void* c, bool c_bf16, int64_t ldc);

// Whether oneDNN's bf16 products run in this process (checked once, on two
// known products laid out as the attention kernels' are); where they do
// not, the callers keep their fp32 kernels.
bool bf16_gemm_works();

// dst[i] = bf16_bits(src[i] * scale).
void round_to_bf16(const float* src, uint16_t* dst, int64_t n, float scale = 1.0f);

}  // namespace ft
