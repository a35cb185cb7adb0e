// Element-wise chains of ModernBERT's layer as one pass each, forward and
// backward (CPU, fp32). LibTorch runs them op by op: GeGLU's gelu(a) * b over
// a chunk of Wi's output is four passes forward and six backward, the rotary
// embedding of q and k a cat, a negation and three products each way. At 256
// tokens those chains took about a quarter of a ModernBERT layer's time on
// two cores, as much as the Linears they sit between (docs/performance.md).
//
// Each function checks fused_applies() itself and otherwise computes the
// same values with LibTorch's ops (autocast, bf16, CUDA), so callers need no
// second path.
#pragma once

#include <array>

#include <ATen/core/Tensor.h>

namespace ft {

// CPU, fp32, no autocast: where the fused kernels run.
bool fused_applies(const at::Tensor& x);

// GeGLU on x [..., 2n]: gelu(x[..., :n]) * x[..., n:] (exact, erf GELU) ->
// [..., n]. The fused backward writes both halves' gradients in one tensor.
at::Tensor geglu(const at::Tensor& x);

// Rotary position embedding of a fused projection. qkv: [T, 3, heads, d]
// (Wqkv's output viewed so); cos, sin: [T, d] for each token's position.
// Returns q and k rotated (pairs (j, j + d/2)) and v, each [T, heads * d]
// contiguous, as the attention kernels take them.
std::array<at::Tensor, 3> rotary_qkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace ft
