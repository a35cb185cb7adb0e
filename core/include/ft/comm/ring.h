// The ring over the ranks of a Comm, written once: Comm's in-place
// reduce-scatter and all-gather (core/src/comm/comm_ring.cpp) and Horovod's
// all-reduce with fp16 compression (strategies/horovod/ring.cpp) both walk
// it. A flat tensor is cut into one chunk per rank; the reduce-scatter half
// passes partial sums to the right neighbour N-1 times until chunk r of
// rank r holds every rank's sum, and the all-gather half passes the finished
// chunks around until every rank has all of them. Each rank sends (N-1)/N of
// the tensor per half: the bandwidth-optimal schedule.
//
// Threading/blocking: exchange() blocks its calling thread until both sides
// of the hop completed; two rings on one Comm at once need different tags.
// Throwing: a failed send/recv throws ft::Error naming the rank.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ft {

class Comm;

/// Sizes of the `world` chunks a ring cuts `numel` elements into: the first
/// numel % world chunks hold one element more. world >= 1.
std::vector<int64_t> ring_chunk_sizes(int64_t numel, int world);

/// What hops moved, for tests and logs.
struct RingTraffic {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int messages_sent = 0;  ///< non-empty sends
};

/// A contiguous 1-D tensor cut into ring_chunk_sizes(numel, N) chunks, seen
/// from this rank of `comm`. Chunk indices are taken mod N.
///
/// Schedule, at step s = 0 .. N-2: the reduce-scatter half sends chunk
/// reduce_send(s) and adds what arrives into chunk reduce_recv(s) (the chunk
/// the left neighbour sent at that step), so chunk rank() is complete after
/// the last step; the all-gather half sends chunk gather_send(s) and receives
/// chunk gather_recv(s), which the next step passes on.
class Ring {
 public:
  /// `tag` keeps this ring's point-to-point traffic apart from any other.
  Ring(Comm& comm, const at::Tensor& flat, int tag);

  int rank() const { return rank_; }
  int world() const { return world_; }
  const at::Tensor& chunk(int i) const { return chunks_[static_cast<size_t>(((i % world_) + world_) % world_)]; }
  int reduce_send(int s) const { return rank_ - s - 1; }
  int reduce_recv(int s) const { return rank_ - s - 2; }
  int gather_send(int s) const { return rank_ - s; }
  int gather_recv(int s) const { return rank_ - s - 1; }

  /// One hop: `out` to the right neighbour while `in` is filled from the
  /// left one. An empty side is skipped, which both ends agree on because
  /// chunk sizes are the same on every rank. On CPU, 16-bit floats travel as
  /// their raw words (Comm would widen them to fp32 for Gloo). Counts into
  /// `traffic` when given.
  void exchange(const at::Tensor& out, const at::Tensor& in, RingTraffic* traffic = nullptr) const;

 private:
  Comm* comm_;
  std::vector<at::Tensor> chunks_;
  int rank_, world_, tag_;
};

}  // namespace ft
