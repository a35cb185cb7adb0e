// The one place that knows which LibTorch ft is built against.
//
// ft targets LibTorch 1.13 (Debian's libtorch-dev, CPU) and must also build
// against LibTorch 2.x with CUDA. Everything that differs between those c10d
// APIs is named here once, so comm*.cpp reads the same for both:
//   - header location (very old releases shipped `c10d/...`, 1.13 and 2.x ship
//     `torch/csrc/distributed/c10d/...`);
//   - the async handle (`c10d::ProcessGroup::Work` before 1.13, `c10d::Work`
//     from 1.13 on);
//   - the class a concrete backend derives from (`c10d::ProcessGroup` before
//     2.0, `c10d::Backend` from 2.0 on): ft only ever calls the collective
//     methods, which have the same names and signatures on both;
//   - NCCL, present only when LibTorch was built with it (`USE_C10D_NCCL`);
//   - the autocast API (per-device functions before 2.4, device-typed after);
//   - NVTX ranges through LibTorch's CUDA profiler stubs (header moved in 2.0);
//   - scaled_dot_product_attention (2.0 on): fused attention kernels;
//   - autograd nodes (a leaf's grad accumulator) held in std::shared_ptr up to
//     2.11 at least, in c10::intrusive_ptr by 2.15: shared_node() gives ft's
//     std::shared_ptr either way (found by overload, no version number).
//
// This header is heavy (c10d + gloo, ~4.5 s to compile): include it only from
// sources under core/src/ (comm/, precision, trace, activation checkpoint,
// attention kernels), never from a public header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#if __has_include(<torch/csrc/profiler/stubs/base.h>)
#include <torch/csrc/profiler/stubs/base.h>
#else
#include <torch/csrc/profiler/api.h>
#endif
#include <c10/core/DeviceType.h>
#include <torch/version.h>

#define FT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||     \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#else
#include <c10d/PrefixStore.hpp>
#include <c10d/ProcessGroupGloo.hpp>
#include <c10d/TCPStore.hpp>
#if defined(USE_C10D_NCCL)
#include <c10d/ProcessGroupNCCL.hpp>
#endif
#endif

/// 1 when this LibTorch can run collectives on CUDA tensors.
#if defined(USE_C10D_NCCL)
#define FT_HAVE_NCCL 1
#else
#define FT_HAVE_NCCL 0
#endif

namespace ft::compat {

/// The async handle every c10d collective returns.
#if FT_TORCH_AT_LEAST(1, 13)
using Work = c10d::Work;
#else
using Work = c10d::ProcessGroup::Work;
#endif

/// What ProcessGroupGloo / ProcessGroupNCCL derive from; ft holds groups as this.
#if FT_TORCH_AT_LEAST(2, 0)
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

/// A grad accumulator (torch::autograd::impl::grad_accumulator) as the
/// std::shared_ptr ft keeps: as is where LibTorch returns one; where it returns
/// a c10::intrusive_ptr, a shared_ptr whose deleter owns that reference.
template <class T>
std::shared_ptr<T> shared_node(std::shared_ptr<T> node) {
  return node;
}
template <class T>
std::shared_ptr<T> shared_node(c10::intrusive_ptr<T> node) {
  T* raw = node.get();
  return std::shared_ptr<T>(raw, [keep = std::move(node)](T*) mutable { keep.reset(); });
}

/// A new autograd node, held the way this LibTorch's graph holds nodes: a
/// c10::intrusive_ptr where Node is intrusively counted (2.15), else a
/// std::shared_ptr (1.13). (1.13's own nodes use deleteNode, which only
/// flattens the deletion of long chains; ft's nodes end no chain.)
template <class T, class... Args>
auto make_node(Args&&... args) {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, T>) {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  } else {
    return std::shared_ptr<T>(new T(std::forward<Args>(args)...));
  }
}

// Autocast: 2.4 replaced the per-device functions with device-typed ones.
inline bool autocast_enabled(c10::DeviceType device) {
#if FT_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if FT_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if FT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::kCUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

/// at::scaled_dot_product_attention, from LibTorch 2.0: fused kernels (flash
/// and memory-efficient on CUDA, a flash kernel on CPU) that never store the
/// [heads, L, L] probabilities. Before 2.0 there is none; callers check
/// kHaveSdpa first.
#if FT_TORCH_AT_LEAST(2, 0)
inline constexpr bool kHaveSdpa = true;
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const at::Tensor& additive_mask, double dropout_p) {
  return at::scaled_dot_product_attention(q, k, v, additive_mask, dropout_p);
}
#else
inline constexpr bool kHaveSdpa = false;
inline at::Tensor scaled_dot_product_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, double) {
  TORCH_CHECK(false, "scaled_dot_product_attention needs LibTorch 2.0 or newer");
}
#endif

// NVTX: LibTorch's CUDA stubs push/pop NVTX ranges when libtorch_cuda is
// loaded; without CUDA they are stubs that throw, so check enabled() first.
inline bool nvtx_available() { return torch::profiler::impl::cudaStubs()->enabled(); }

inline void nvtx_push(const char* name) {
  const auto* stubs = torch::profiler::impl::cudaStubs();
  if (stubs->enabled()) stubs->rangePush(name);
}

inline void nvtx_pop() {
  const auto* stubs = torch::profiler::impl::cudaStubs();
  if (stubs->enabled()) stubs->rangePop();
}

}  // namespace ft::compat
