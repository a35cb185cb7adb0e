#include "ft/observe/alloc_counter.h"

#include <atomic>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "compat.h"

namespace ft {

struct CpuAllocationCounter::Impl final : c10::Allocator {
  explicit Impl(c10::Allocator* wrapped) : inner(wrapped) {}

  // LibTorch 2.3 made allocate() non-const and added copy_data().
#if FT_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t n) override { return counted(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { inner->copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t n) const override { return counted(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return inner->raw_deleter(); }

  c10::DataPtr counted(size_t n) const {
    if (armed.load(std::memory_order_relaxed)) {
      allocations.fetch_add(1, std::memory_order_relaxed);
      total.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    }
    return inner->allocate(n);
  }

  c10::Allocator* inner;
  std::atomic<bool> armed{false};
  mutable std::atomic<int64_t> allocations{0};
  mutable std::atomic<int64_t> total{0};
};

// Priority 0 replaces the default CPU allocator (registered at 0) and lets
// the destructor put it back at the same priority.
CpuAllocationCounter::CpuAllocationCounter() : impl_(std::make_unique<Impl>(c10::GetCPUAllocator())) {
  c10::SetCPUAllocator(impl_.get(), 0);
}

CpuAllocationCounter::~CpuAllocationCounter() { c10::SetCPUAllocator(impl_->inner, 0); }

void CpuAllocationCounter::arm(bool on) { impl_->armed.store(on); }
int64_t CpuAllocationCounter::count() const { return impl_->allocations.load(); }
int64_t CpuAllocationCounter::bytes() const { return impl_->total.load(); }

}  // namespace ft
