#include "ft/base/error.h"

#include "fusion.h"

#include <c10/core/GradMode.h>
#include <exception>
#include <utility>

#include <ATen/ATen.h>

namespace ft::horovod {

std::vector<int> fusion_groups(const std::vector<int64_t>& bytes, int64_t threshold) {
  std::vector<int> groups;
  int64_t group_bytes = 0;
  for (int64_t b : bytes) {
    if (!groups.empty() && group_bytes + b <= threshold) {
      groups.back() += 1;
      group_bytes += b;
    } else {
      groups.push_back(1);
      group_bytes = b;
    }
  }
  return groups;
}

TensorFusion::TensorFusion(Comm& comm, FusionOptions options)
    : comm_(comm), options_(options), thread_([this] { loop(); }) {}

TensorFusion::~TensorFusion() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TensorFusion::expect(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  expected_ += count;
}

std::shared_future<void> TensorFusion::enqueue(const at::Tensor& flat) {
  if (!flat.defined() || flat.dim() != 1 || !flat.is_contiguous() || !at::isFloatingType(flat.scalar_type())) {
    fail("horovod: tensor fusion needs contiguous 1-D floating tensors");
  }
  Entry e{flat, {}};
  std::shared_future<void> done = e.done.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(e));
  }
  wake_.notify_all();
  return done;
}

FusionStats TensorFusion::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void TensorFusion::loop() {
  for (;;) {
    int64_t local = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped and drained
      const auto cycle_end = std::chrono::steady_clock::now() + options_.cycle;
      wake_.wait_until(lock, cycle_end, [this] {
        return stop_ || (expected_ > 0 && static_cast<int64_t>(queue_.size()) >= expected_);
      });
      local = static_cast<int64_t>(queue_.size());
    }
    std::vector<Entry> taken;
    try {
      // Negotiation: the prefix of the queue every rank has ready.
      int64_t common = local;
      if (comm_.world_size() > 1) {
        const auto start = Tracer::Clock::now();
        at::Tensor n = at::full({1}, local, at::kLong);
        comm_.all_reduce(n, ReduceOp::Min);
        common = n.item<int64_t>();
        if (options_.trace) {
          options_.trace->complete("negotiate", "comm", TraceTrack::Comm, start, Tracer::Clock::now());
        }
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (int64_t i = 0; i < common; ++i) {
          taken.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        expected_ = std::max<int64_t>(0, expected_ - common);
        stats_.cycles += 1;
      }
      reduce(taken);
    } catch (...) {
      // Whatever is not done fails with Comm's error; later cycles fail fast
      // because Comm is now poisoned.
      for (auto& e : taken) {
        try {
          e.done.set_exception(std::current_exception());
        } catch (const std::future_error&) {  // already satisfied
        }
      }
      if (taken.empty()) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& e : queue_) e.done.set_exception(std::current_exception());
        queue_.clear();
        expected_ = 0;
      }
    }
  }
}

void TensorFusion::reduce(std::vector<Entry>& entries) {
  std::vector<int64_t> bytes;
  for (const auto& e : entries) bytes.push_back(e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size()));
  size_t begin = 0;
  for (int n : fusion_groups(bytes, options_.threshold_bytes)) {
    // A dtype change inside a group splits it (a fused span has one dtype).
    size_t end = begin + static_cast<size_t>(n);
    size_t start = begin;
    for (size_t i = begin + 1; i <= end; ++i) {
      if (i == end || entries[i].tensor.scalar_type() != entries[start].tensor.scalar_type() ||
          entries[i].tensor.device() != entries[start].tensor.device()) {
        reduce_group(entries, start, i);
        start = i;
      }
    }
    begin = end;
  }
}

void TensorFusion::reduce_group(std::vector<Entry>& entries, size_t begin, size_t end) {
  const at::Tensor& first = entries[begin].tensor;
  int64_t total = 0;
  bool adjacent = true;
  for (size_t i = begin; i < end; ++i) {
    const at::Tensor& t = entries[i].tensor;
    if (i > begin && !(t.storage().is_alias_of(first.storage()) && t.storage_offset() == first.storage_offset() + total)) {
      adjacent = false;
    }
    total += t.numel();
  }
  c10::NoGradGuard no_grad;
  RingTraffic traffic;
  int64_t copied = 0;
  const auto start = Tracer::Clock::now();
  if (adjacent) {
    // Already one flat span (GradBuffer): reduce it in place, zero copies.
    at::Tensor span = at::empty({0}, first.options());
    span.set_(first.storage(), first.storage_offset(), {total}, {1});
    traffic = ring_allreduce(comm_, span, options_.ring);
  } else {
    if (!fusion_buffer_.defined() || fusion_buffer_.numel() < total ||
        fusion_buffer_.scalar_type() != first.scalar_type() || fusion_buffer_.device() != first.device()) {
      fusion_buffer_ = at::empty({total}, first.options());
    }
    at::Tensor span = fusion_buffer_.narrow(0, 0, total);
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const int64_t n = entries[i].tensor.numel();
      span.narrow(0, offset, n).copy_(entries[i].tensor);
      offset += n;
    }
    traffic = ring_allreduce(comm_, span, options_.ring);
    offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const int64_t n = entries[i].tensor.numel();
      entries[i].tensor.copy_(span.narrow(0, offset, n));
      offset += n;
    }
    copied = total * static_cast<int64_t>(first.element_size());
  }
  if (options_.trace) {
    // Bytes as held (on the wire they may be fp16).
    options_.trace->complete("ring allreduce", "comm", TraceTrack::Comm, start, Tracer::Clock::now(), -1,
                             total * static_cast<int64_t>(first.element_size()));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.collectives += 1;
    stats_.tensors += static_cast<int64_t>(end - begin);
    stats_.copied_bytes += copied;
    stats_.wire_bytes += traffic.bytes_sent;
  }
  for (size_t i = begin; i < end; ++i) entries[i].done.set_value();
}

}  // namespace ft::horovod
