// CpuAllocationCounter: counts CPU tensor allocations while armed.
//
// Evidence for "this path allocates nothing" (a strategy's step after the
// first: persistent buffers, in-place collectives) that a test can assert.
// It installs itself as LibTorch's CPU allocator for its lifetime, wrapping
// the one that was there, so every at::empty in any thread counts: Gloo's
// and the ring thread's included. One instance at a time per process.
#pragma once

#include <cstdint>
#include <memory>

namespace ft {

class CpuAllocationCounter {
 public:
  CpuAllocationCounter();
  ~CpuAllocationCounter();  // puts the previous allocator back
  CpuAllocationCounter(const CpuAllocationCounter&) = delete;
  CpuAllocationCounter& operator=(const CpuAllocationCounter&) = delete;

  /// Counting happens only between arm(true) and arm(false). Thread-safe.
  void arm(bool on);
  int64_t count() const;  ///< allocations seen while armed
  int64_t bytes() const;  ///< their total size

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft
