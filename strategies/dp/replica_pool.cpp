#include "replica_pool.h"

#include <ATen/Parallel.h>

namespace ft::dp {

ReplicaPool::ReplicaPool(int workers, int intra_op_threads) {
  // at::set_num_threads in a worker also changes the count that threads
  // created later start with; put the caller's count back once all workers
  // have set theirs, so the pool leaves the rest of the process as it was.
  const int caller_threads = at::get_num_threads();
  errors_.resize(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i, intra_op_threads] { loop(i, intra_op_threads); });
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return started_ == workers; });
  }
  at::set_num_threads(caller_threads);
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::run(int n, const std::function<void(int)>& fn) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &fn;
    active_ = n;
    pending_ = n;
    for (auto& e : errors_) e = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }
  for (int i = 0; i < n; ++i)
    if (errors_[static_cast<size_t>(i)]) std::rethrow_exception(errors_[static_cast<size_t>(i)]);
}

void ReplicaPool::loop(int index, int intra_op_threads) {
  at::set_num_threads(intra_op_threads);
  int64_t seen = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++started_;
    seen = generation_;
  }
  work_done_.notify_all();
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= active_) continue;
      job = job_;
    }
    std::exception_ptr error;
    try {
      (*job)(index);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[static_cast<size_t>(index)] = error;
      --pending_;
    }
    work_done_.notify_all();
  }
}

}  // namespace ft::dp
