// Ring all-reduce written over ft::Comm point-to-point send/recv, and the
// comm hooks built on it (plain and fp16-compressed), usable by any
// GradBuffer user (horovod; ddp with strategy.options.comm_hook=ring).
//
// Algorithm (Baidu/Horovod ring): the tensor is cut into world_size chunks
// (the first n % world chunks one element longer, so any length works,
// including fewer elements than ranks). N-1 reduce-scatter steps: rank r
// sends chunk (r - s) mod N to its right neighbour and adds the chunk
// (r - s - 1) mod N it receives from its left one; afterwards rank r holds
// the reduced chunk (r + 1) mod N. Then N-1 all-gather steps pass the
// reduced chunks around. Each rank sends (and receives) 2(N-1)/N of the
// tensor, independent of N: the bandwidth-optimal all-reduce.
//
// Every reduced chunk is produced by exactly one rank and copied verbatim to
// the others, so all ranks end with bit-identical results (Avg divides the
// owned chunk once, before the all-gather; fp16 wire rounds it once there).
//
// Threading/blocking: ring_allreduce() blocks its calling thread and must not
// run concurrently with any other use of the same Comm. The hooks run rings
// on one background thread per hook (the "comm thread"), in submission order,
// so a hook called from autograd returns at once and backward continues.
// Throwing: a failed send/recv throws ft::Error naming the rank (from
// ring_allreduce, or from BucketComm::after_wait for the hooks).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/comm.h"
#include "ft/grad_buffer.h"

namespace ft {

/// Point-to-point tag the ring uses unless told otherwise (keeps ring
/// traffic apart from any other send/recv a strategy does).
constexpr int kRingTag = 0x52494e;  // "RIN"

/// How to run one ring all-reduce.
struct RingOptions {
  /// Sum or Avg (Max/Min are refused: they do not commute with compression).
  ReduceOp op = ReduceOp::Avg;
  /// What travels on the wire: at::kFloat (or Undefined: the tensor's own
  /// dtype) or at::kHalf (fp16 compression, Horovod's Compression.fp16).
  /// Accumulation always happens in the tensor's dtype; each hop rounds to
  /// the wire dtype. On CPU/Gloo fp16 travels as raw 16-bit words, so it
  /// really halves the bytes (ft::Comm would widen a kHalf tensor to fp32).
  at::ScalarType wire = at::ScalarType::Undefined;
  int tag = kRingTag;
};

/// What one ring_allreduce() moved, for tests and logs.
struct RingTraffic {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int messages_sent = 0;  ///< non-empty sends (2(N-1) at most)
};

/// Sizes of the world_size chunks a ring cuts `numel` elements into: the
/// first numel % world chunks hold one element more. world >= 1.
std::vector<int64_t> ring_chunk_sizes(int64_t numel, int world);

/// In-place ring all-reduce of a contiguous 1-D floating tensor (fp32 or
/// fp64; fp16/bf16 are accepted too and accumulate in their own dtype).
/// Collective over all ranks of `comm`, which must call it with tensors of
/// the same numel and dtype and the same options. World size 1: Avg/Sum
/// leave `flat` unchanged (fp16 wire still rounds, so results do not depend
/// on the world size's code path). Throws ft::Error for a bad tensor or op.
RingTraffic ring_allreduce(Comm& comm, const at::Tensor& flat, const RingOptions& options = {});

/// One background thread that runs jobs (usually rings) one at a time in
/// submission order. The order is the collective order, so every rank must
/// submit the same jobs in the same order. The destructor finishes queued
/// jobs, then joins.
class CommThread {
 public:
  CommThread();
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  /// Queues `job`; the future becomes ready when it ran, and get() rethrows
  /// what it threw. Thread-safe.
  std::shared_future<void> submit(std::function<void()> job);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

/// GradBuffer comm hook: each bucket is ring-all-reduced (Avg) on the hook's
/// own CommThread while backward goes on; `after_wait` blocks until that
/// bucket is done. `wire` = at::kFloat for exact results, at::kHalf for fp16
/// compression. The returned Work is already complete (the ring is many
/// point-to-point messages, not one c10d Work), so GradBuffer's overlap
/// statistics count only the time spent in after_wait.
/// ddp plugs it as: `ft::ring_allreduce_hook(comm, at::kFloat)`.
CommHook ring_allreduce_hook(Comm& comm, at::ScalarType wire = at::kFloat);

}  // namespace ft
