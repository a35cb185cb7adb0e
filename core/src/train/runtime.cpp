#include "ft/train/runtime.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#if FT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ft {
namespace {

// OpenBLAS's C API, looked up at run time: which build is mapped is only
// known then (the libblas.so.3 alternative), and a LibTorch wheel maps none.
template <typename Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::string cpu_list(const std::vector<int>& cpus) {
  if (cpus.empty()) return "";
  if (cpus.size() == 1) return fmt::format("CPU {}", cpus.front());
  const bool contiguous = cpus.back() - cpus.front() + 1 == static_cast<int>(cpus.size());
  return contiguous ? fmt::format("CPUs {}-{}", cpus.front(), cpus.back())
                    : fmt::format("CPUs {}", fmt::join(cpus, ","));
}

}  // namespace

BlasInfo detect_blas() {
  BlasInfo info;
  // The library that serves fp32 GEMM calls, whatever else is mapped (an
  // OpenBLAS can be mapped for LAPACK while sgemm_ comes from another BLAS).
  Dl_info where{};
  void* gemm = dlsym(RTLD_DEFAULT, "sgemm_");
  if (!gemm || !dladdr(gemm, &where) || !where.dli_fname) return info;  // none mapped: LibTorch's own
  info.library = where.dli_fname;
  void* handle = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  // dlsym on the handle also searches that library's own dependencies.
  auto get_parallel = handle ? reinterpret_cast<int (*)()>(dlsym(handle, "openblas_get_parallel")) : nullptr;
  if (get_parallel) {
    const int mode = get_parallel();  // OpenBLAS: 0 sequential, 1 pthreads, 2 OpenMP
    info.kind = mode == 2 ? BlasKind::OpenBlasOpenMP : mode == 1 ? BlasKind::OpenBlasPthread : BlasKind::OpenBlasSerial;
    if (auto get_config = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_config"))) info.config = get_config();
  } else if (info.library.find("/blas/libblas.so") != std::string::npos) {
    info.kind = BlasKind::Reference;  // Debian's netlib alternative
  }
  if (handle) dlclose(handle);  // drops the reference NOLOAD took; the library stays mapped
  return info;
}

std::string BlasInfo::describe() const {
  switch (kind) {
    case BlasKind::OpenBlasOpenMP: return "OpenBLAS (OpenMP build, shares LibTorch's pool)";
    case BlasKind::OpenBlasPthread: return "OpenBLAS (pthread build, its own pool)";
    case BlasKind::OpenBlasSerial: return "OpenBLAS (serial build)";
    case BlasKind::Reference: return "reference BLAS";
    case BlasKind::Other: break;
  }
  return library.empty() ? "LibTorch's own BLAS" : library;
}

ThreadPlan configure_threads(const ThreadOptions& o) {
  ThreadPlan plan;
  std::vector<int> cpus = allowed_cpus();
  const int ranks = std::max(1, o.local_world_size);
  if (o.pin && ranks > 1) {
    if (static_cast<int>(cpus.size()) >= ranks) {
      // Contiguous equal shares; spare CPUs (cpus % ranks) stay unused so
      // every rank gets the same compute, as the bench rows assume.
      const size_t share = cpus.size() / static_cast<size_t>(ranks);
      std::vector<int> mine(cpus.begin() + static_cast<long>(share) * o.local_rank,
                            cpus.begin() + static_cast<long>(share) * (o.local_rank + 1));
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : mine) CPU_SET(c, &set);
      if (sched_setaffinity(0, sizeof(set), &set) == 0) {
        plan.cpus = mine;
      } else {
        plan.pin_note = "not pinned (sched_setaffinity refused)";
      }
    } else {
      plan.pin_note = fmt::format("not pinned ({} ranks share {} CPUs)", ranks, cpus.size());
    }
  }
  const int available = static_cast<int>(std::max<size_t>(1, plan.cpus.empty() ? cpus.size() / ranks : plan.cpus.size()));
  const int n = o.requested > 0 ? static_cast<int>(o.requested) : std::max(1, available);

  plan.blas = detect_blas();
  auto set_blas_threads = plan.blas.kind == BlasKind::OpenBlasOpenMP || plan.blas.kind == BlasKind::OpenBlasPthread
                              ? openblas_symbol<void (*)(int)>("openblas_set_num_threads")
                              : nullptr;
  const std::string fix = "install libopenblas0-openmp (scripts/setup.sh does) so OpenBLAS shares LibTorch's thread pool";
  switch (plan.blas.kind) {
    case BlasKind::OpenBlasOpenMP:
      plan.torch_threads = plan.blas_threads = n;
      break;
    case BlasKind::OpenBlasPthread:
      // Two busy pools on the same cores fight: give the threads to BLAS,
      // where the FLOPs are, and keep LibTorch's pool at one.
      plan.torch_threads = 1;
      plan.blas_threads = n;
      if (n > 1)
        plan.warning = fmt::format("ft: warning: {} is the pthread build of OpenBLAS, a second thread pool beside LibTorch's; "
                                   "running 1 LibTorch + {} OpenBLAS threads; {}", plan.blas.library, n, fix);
      break;
    case BlasKind::OpenBlasSerial:
      plan.torch_threads = n;
      plan.blas_threads = 1;
      if (n > 1) plan.warning = fmt::format("ft: warning: {} is the serial build of OpenBLAS (fp32 matmul on one thread); {}",
                                            plan.blas.library, fix);
      break;
    case BlasKind::Reference:
      plan.torch_threads = n;
      plan.warning = fmt::format("ft: warning: fp32 matmul uses the reference BLAS ({}), ~13x slower; {}",
                                 plan.blas.library, fix);
      break;
    case BlasKind::Other:
      plan.torch_threads = n;
      break;
  }
  at::set_num_threads(plan.torch_threads);
  if (set_blas_threads && plan.blas_threads > 0) set_blas_threads(plan.blas_threads);
  return plan;
}

std::string ThreadPlan::describe() const {
  std::string s = fmt::format("{} thread(s) per rank, BLAS {}", torch_threads, blas.describe());
  if (blas.kind == BlasKind::OpenBlasPthread) s += fmt::format(" with {} thread(s)", blas_threads);
  if (!cpus.empty()) s += fmt::format(", local ranks pinned ({} here)", cpu_list(cpus));
  if (!pin_note.empty()) s += ", " + pin_note;
  return s;
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
