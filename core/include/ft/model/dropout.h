// Dropout whose mask is a function of (seed, element index).
//
// PyTorch's CPU dropout draws one Bernoulli per element from mt19937
// (`bernoulli_`), ~8 ns an element on one core, and keeps a float mask of
// the input's size for backward: on the mini workload that was 15 % of a
// step. Here the seed is one 64-bit draw from LibTorch's default CPU
// generator (so seeding, resume and activation-checkpoint replay behave as
// before), each element's keep/drop is a counter-based hash of (seed, index)
// compared against keep_prob * 2^32, the kernel runs on the intra-op pool,
// and backward recomputes the mask from the seed: no mask is stored.
//
// The masks are not PyTorch's bit for bit (different generator); the
// distribution is the same. CUDA tensors use LibTorch's fused dropout.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace ft {

// x * mask / (1 - p), mask ~ Bernoulli(1 - p); x itself when !train or p == 0.
at::Tensor fast_dropout(const at::Tensor& x, double p, bool train);

// The kernel for fused callers (packed attention): out = in * mask / keep for
// contiguous CPU tensors of one dtype, element i decided by global index
// counter + i. Same (seed, counter) -> same mask, so backward replays it.
void apply_dropout_mask(const at::Tensor& in, at::Tensor& out, uint64_t seed, int64_t counter, double keep);
// The same mask on n floats, serially on the calling thread: for kernels that
// drop one tile row at a time (tiled attention), where a tensor and a
// parallel region per row would cost more than the row.
void apply_dropout_mask(const float* in, float* out, int64_t n, uint64_t seed, int64_t counter, double keep);
// The same mask on n fp32 values, kept in bf16 (rounded once from in * mask
// / keep): the operand of a bf16 product.
void apply_dropout_mask(const float* in, at::BFloat16* out, int64_t n, uint64_t seed, int64_t counter, double keep);
// One draw from LibTorch's default CPU generator.
uint64_t draw_dropout_seed();

}  // namespace ft
