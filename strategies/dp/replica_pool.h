// ReplicaPool: one long-lived worker thread per DataParallel replica.
//
// Threads live for the whole run so that each keeps its own intra-op thread
// count (ATen's OpenMP setting is per thread) and nothing is spawned per step.
// run(n, fn) calls fn(i) on worker i for i < n, all at once, and returns when
// every call returned; the first exception thrown (by replica index) is
// rethrown on the caller's thread. Not reentrant: one run() at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ft::dp {

class ReplicaPool {
 public:
  /// `workers` threads, each running ATen ops with `intra_op_threads`.
  ReplicaPool(int workers, int intra_op_threads);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  /// Runs fn(0..n-1) in parallel on workers 0..n-1 (n <= size()); blocks.
  void run(int n, const std::function<void(int)>& fn);

 private:
  void loop(int index, int intra_op_threads);

  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  const std::function<void(int)>* job_ = nullptr;
  int active_ = 0;           // workers taking part in the current run
  int64_t generation_ = 0;   // bumped per run so each worker runs it once
  int pending_ = 0;          // workers of this run still busy
  int started_ = 0;          // workers that finished their thread setup
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace ft::dp
