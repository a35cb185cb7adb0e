// In-place t *= s and t /= s for the gradient path. ATen's Scalar overloads
// wrap the scalar in a fresh 0-d tensor and cast it on every call: two
// allocations per bucket or parameter per step, which the one-buffer design
// promises not to make (tests/unit/test_alloc.cpp). CPU fp32/fp64 contiguous
// tensors get a plain loop; anything else falls back to ATen.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace ft {

enum class ScaleOp { kMul, kDiv };

template <typename T>
void scale_loop(const at::Tensor& t, T s, ScaleOp op) {
  T* x = t.data_ptr<T>();
  at::parallel_for(0, t.numel(), 32768, [&](int64_t begin, int64_t end) {
    if (op == ScaleOp::kDiv) {
      for (int64_t i = begin; i < end; ++i) x[i] = x[i] / s;
    } else {
      for (int64_t i = begin; i < end; ++i) x[i] = x[i] * s;
    }
  });
}

inline void scale_inplace(const at::Tensor& t, double s, ScaleOp op) {
  if (t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == at::kFloat) {
    scale_loop<float>(t, static_cast<float>(s), op);
  } else if (t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == at::kDouble) {
    scale_loop<double>(t, s, op);
  } else if (op == ScaleOp::kDiv) {
    t.div_(s);
  } else {
    t.mul_(s);
  }
}

}  // namespace ft
