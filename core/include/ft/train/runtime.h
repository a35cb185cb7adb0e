// Process-level facts a worker sets or checks once at start: which BLAS is
// really mapped, how many threads each pool gets, which CPUs a rank runs on.
//
// Why this matters (docs/performance.md): LibTorch runs its intra-op work on
// an OpenMP pool, but fp32 matmul goes through the `libblas.so.3` alternative.
// Debian's pthread build of OpenBLAS keeps a second pool of its own; both
// pools then spin on the same cores and a 2-thread run is slower than a
// 1-thread one. The OpenMP build of OpenBLAS runs on LibTorch's own pool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace ft {

enum class BlasKind {
  OpenBlasOpenMP,   // one pool, shared with LibTorch: the good case
  OpenBlasPthread,  // its own pool beside LibTorch's
  OpenBlasSerial,   // one thread per GEMM
  Reference,        // Debian's netlib BLAS, ~13x slower
  Other,            // e.g. MKL linked into a LibTorch wheel
};

struct BlasInfo {
  BlasKind kind = BlasKind::Other;
  std::string library;  // the library serving sgemm_ ("" when none is mapped separately)
  std::string config;   // openblas_get_config(), when OpenBLAS
  std::string describe() const;
};

// Asks the library that serves sgemm_ in this process (openblas_get_parallel
// through dlsym), not the package list.
BlasInfo detect_blas();

struct ThreadOptions {
  int64_t requested = 0;     // intra-op threads per rank; 0 = this rank's CPUs
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this host
  bool pin = true;           // pin each local rank to its share of the CPUs
};

struct ThreadPlan {
  int torch_threads = 1;  // LibTorch intra-op (OpenMP) threads
  int blas_threads = 0;   // OpenBLAS threads; 0 = not OpenBLAS
  BlasInfo blas;
  std::vector<int> cpus;  // this rank's CPUs when pinned; empty = not pinned
  std::string pin_note;   // why not pinned, when it could have been
  // One warning line naming the package to install; nullopt when all is well.
  std::optional<std::string> warning;
  // For the start line: "2 threads, BLAS ..., rank 0 pinned to CPU 0".
  std::string describe() const;
};

// Sets the thread counts (and the CPU affinity when pinning) for this
// process and returns what was chosen. Call it before any thread is started:
// threads created later inherit the affinity.
//   OpenBLAS OpenMP: LibTorch and OpenBLAS share N threads.
//   OpenBLAS pthread: 1 LibTorch thread, N OpenBLAS threads (two busy pools
//     on N cores are slower than one), plus a warning.
//   serial / reference BLAS: N LibTorch threads, plus a warning.
ThreadPlan configure_threads(const ThreadOptions& options);

// Peak bytes the caching allocator handed out on `device` since start, in
// MiB; 0 on CPU or when ft was built without CUDA.
double peak_device_memory_mb(const c10::Device& device);

}  // namespace ft
