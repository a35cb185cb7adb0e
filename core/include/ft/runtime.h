// Process-level facts a worker sets or checks once at start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <c10/core/Device.h>

namespace ft {

// Intra-op threads for this rank: `requested` if > 0, else the host's cores
// divided by the ranks on this host (so every benchmark row gets the same
// CPU). LibTorch starts at 1 thread under OpenMP, so this always sets it.
// Returns the number set.
int configure_threads(int64_t requested, int local_world_size);

// Which BLAS library is mapped into this process (path from /proc/self/maps).
std::string mapped_blas_library();

// A warning line when fp32 matmul goes through Debian's reference BLAS
// (~13x slower than OpenBLAS); nullopt when a fast BLAS is mapped.
std::optional<std::string> slow_blas_warning();

// Peak bytes the caching allocator handed out on `device` since start, in
// MiB; 0 on CPU or when ft was built without CUDA.
double peak_device_memory_mb(const c10::Device& device);

}  // namespace ft
