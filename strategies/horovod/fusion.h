// TensorFusion: Horovod's background thread, tensor queue, negotiation and
// fusion buffer, over ft's ring all-reduce.
//
// Gradients are enqueued one tensor at a time (from GradBuffer hooks, in the
// same order on every rank). One background thread owns all of this rank's
// ring traffic. A *cycle* starts when a tensor lands in an empty queue and
// lasts `cycle` (Horovod's HOROVOD_CYCLE_TIME): the thread waits that long so
// that tensors becoming ready close together share one collective. It ends
// early when the queue holds every tensor the round expects (expect()), so
// a round whose gradients are all ready (reduce at step()) never waits. At
// the end of a cycle the ranks *negotiate*: they all-reduce (Min) how many
// queued tensors each has, and reduce that common prefix, so every
// rank fuses exactly the same tensors even though their backward passes run
// at different speeds (Horovod's coordinator does this with ready lists).
// The prefix is cut into groups of at most `threshold_bytes` (one tensor
// larger than that forms its own group; 0 disables fusion). A group whose
// tensors are adjacent in memory (GradBuffer's flat buffer) is reduced in
// place as one span; otherwise its tensors are copied into the fusion buffer,
// reduced there and copied back (Horovod's FusionBufferManager).
//
// Threading: enqueue()/expect() from any thread; results via the futures.
// The Comm must not be used by another thread while a round is in flight.
// Throwing: a failed collective reaches every future still unfinished, as
// the ft::Error Comm threw.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/comm/comm.h"
#include "ring.h"
#include "ft/observe/trace.h"

namespace ft::horovod {

/// How to fuse and reduce; every field has Horovod's default.
struct FusionOptions {
  /// HOROVOD_FUSION_THRESHOLD: most bytes reduced by one collective.
  int64_t threshold_bytes = 64LL * 1024 * 1024;
  /// HOROVOD_CYCLE_TIME: how long a cycle collects ready tensors.
  std::chrono::microseconds cycle{5000};
  /// Avg, and the wire dtype (fp16 = Compression.fp16).
  RingOptions ring;
  /// Step profiler (nullptr or inactive: nothing recorded): each
  /// negotiation and each fused ring as a range on the comm track.
  Tracer* trace = nullptr;
};

/// Counters since construction (read after the futures are done).
struct FusionStats {
  int64_t cycles = 0;        ///< negotiations
  int64_t collectives = 0;   ///< rings run
  int64_t tensors = 0;       ///< tensors reduced
  int64_t copied_bytes = 0;  ///< bytes staged through the fusion buffer (one way)
  int64_t wire_bytes = 0;    ///< bytes this rank sent
};

/// Groups consecutive tensors of `bytes` (same dtype assumed) so that each
/// group holds at most `threshold` bytes, or one tensor. Returns group sizes.
std::vector<int> fusion_groups(const std::vector<int64_t>& bytes, int64_t threshold);

class TensorFusion {
 public:
  TensorFusion(Comm& comm, FusionOptions options);
  ~TensorFusion();  // finishes queued work, then joins
  TensorFusion(const TensorFusion&) = delete;
  TensorFusion& operator=(const TensorFusion&) = delete;

  /// Announces that `count` more tensors belong to the current round, so a
  /// cycle can end as soon as they are all queued (call before enqueueing).
  void expect(int count);
  /// Queues a contiguous 1-D floating tensor to be averaged in place across
  /// ranks. The tensor must stay alive until the future is ready.
  std::shared_future<void> enqueue(const at::Tensor& flat);
  FusionStats stats() const;

 private:
  struct Entry {
    at::Tensor tensor;
    std::promise<void> done;
  };
  void loop();
  void reduce(std::vector<Entry>& entries);
  void reduce_group(std::vector<Entry>& entries, size_t begin, size_t end);

  Comm& comm_;
  FusionOptions options_;
  at::Tensor fusion_buffer_;  // grown on demand; comm thread only
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> queue_;
  int64_t expected_ = 0;  // tensors of the round not yet taken off the queue
  bool stop_ = false;
  FusionStats stats_;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace ft::horovod
