// Horovod's ring all-reduce, written over ft::Comm point-to-point send/recv
// (TensorFusion, fusion.h, runs it on its background thread).
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
// Threading/blocking: ring_allreduce() blocks its calling thread; two rings
// on one Comm at once need different tags.
// Throwing: a failed send/recv throws ft::Error naming the rank.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/comm.h"

namespace ft::horovod {

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

}  // namespace ft::horovod
