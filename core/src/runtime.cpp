#include "ft/runtime.h"

#include <algorithm>
#include <fstream>
#include <thread>

#include <ATen/Parallel.h>
#if FT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ft {

int configure_threads(int64_t requested, int local_world_size) {
  int threads = static_cast<int>(requested);
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, local_world_size));
  }
  at::set_num_threads(threads);
  return threads;
}

std::string mapped_blas_library() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const auto base = path.substr(path.rfind('/') + 1);
    if (base.rfind("libblas.so", 0) == 0 || base.rfind("libopenblas", 0) == 0 || base.rfind("libmkl_rt", 0) == 0) {
      return path;
    }
  }
  return "";
}

std::optional<std::string> slow_blas_warning() {
  const std::string lib = mapped_blas_library();
  // Debian's reference BLAS lives in .../blas/; OpenBLAS in .../openblas-*/.
  if (lib.find("/blas/libblas.so") != std::string::npos) {
    return "ft: warning: fp32 matmul uses the reference BLAS (" + lib +
           "), ~13x slower; install libopenblas0-pthread (scripts/setup.sh does)";
  }
  return std::nullopt;
}

double peak_device_memory_mb(const c10::Device& device) {
#if FT_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0);  // [0]: all pools
  }
#endif
  (void)device;
  return 0.0;
}

}  // namespace ft
