// Horovod's ring all-reduce (Baidu/Horovod), walked over core's ft::Ring
// (ft/comm/ring.h, the ring Comm's own reduce-scatter and all-gather use);
// TensorFusion (fusion.h) runs it on its background thread.
//
// The tensor is cut into world_size chunks (the first n % world chunks one
// element longer, so any length works, including fewer elements than
// ranks). The ring's reduce-scatter half leaves rank r with the reduced
// chunk r; its all-gather half passes the reduced chunks around. Each rank
// sends (and receives) 2(N-1)/N of the tensor, independent of N: the
// bandwidth-optimal all-reduce. What is Horovod's here: any length, fp16
// compression on the wire, and Avg finished once by the chunk's owner.
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

#include "ft/comm/comm.h"
#include "ft/comm/ring.h"

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

/// What one ring_allreduce() moved (2(N-1) non-empty sends at most).
using RingTraffic = ft::RingTraffic;

/// In-place ring all-reduce of a contiguous 1-D floating tensor (fp32 or
/// fp64; fp16/bf16 are accepted too and accumulate in their own dtype).
/// Collective over all ranks of `comm`, which must call it with tensors of
/// the same numel and dtype and the same options. World size 1: Avg/Sum
/// leave `flat` unchanged (fp16 wire still rounds, so results do not depend
/// on the world size's code path). Throws ft::Error for a bad tensor or op.
RingTraffic ring_allreduce(Comm& comm, const at::Tensor& flat, const RingOptions& options = {});

}  // namespace ft::horovod
