// Eight-lane float math for ft's own CPU kernels (the tiled attention's
// softmax, the fused GeGLU), written with GCC vector types: the scalar forms
// do not vectorise under IEEE semantics, and these stay inline inside the
// callers' target_clones bodies (AVX-512, AVX2 or plain SSE code alike).
// Private to core/src/model.
#pragma once

#include <cstdint>

namespace ft::vec_math {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // always inlined: no call passes a vector
#endif
typedef float Floats8 __attribute__((vector_size(32)));
typedef int32_t Ints8 __attribute__((vector_size(32)));

// exp(x) for x <= 0 (a little above 0 is fine too) to ~7e-8 relative:
// x = n ln2 + r (ln2 split in two so that n ln2 is exact enough), e^r by its
// Taylor series to r^7, 2^n from the exponent bits. Below -87 the result
// stays e^-87 (~1.6e-38, lost in any sum it joins).
__attribute__((always_inline)) inline Floats8 exp8(Floats8 x) {
  const Floats8 c = x > -87.0f ? x : Floats8{} - 87.0f;
  const Ints8 n = __builtin_convertvector(c * 1.44269504088896341f - 0.5f, Ints8);  // round to nearest (c <= 0)
  const Floats8 nf = __builtin_convertvector(n, Floats8);
  const Floats8 r = (c - nf * 0.693359375f) + nf * 2.12194440e-4f;
  Floats8 p = Floats8{} + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * reinterpret_cast<Floats8>((n + 127) << 23);
}

// erfc(z) for z >= 0 to ~1.2e-7 relative everywhere (Numerical Recipes'
// Chebyshev fit, erfc = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2)): relative,
// not absolute, accuracy, so that the normal CDF far out in its lower tail
// (GELU of a large negative input) keeps its digits; Abramowitz and Stegun's
// 7.1.26 (1.5e-7 absolute) lost a few there.
__attribute__((always_inline)) inline Floats8 erfc8(Floats8 z) {
  const Floats8 t = 1.0f / (1.0f + 0.5f * z);
  Floats8 p = Floats8{} + 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp8(p - z * z);
}

// The standard normal CDF Phi(a) = erfc(-a / sqrt 2) / 2.
__attribute__((always_inline)) inline Floats8 normal_cdf8(Floats8 a) {
  const Floats8 u = a * -0.70710678118654752f;
  const Floats8 half_erfc = 0.5f * erfc8(u < 0.0f ? -u : u);
  return u >= 0.0f ? half_erfc : 1.0f - half_erfc;
}

}  // namespace ft::vec_math
