// Comm: the one owner of the process groups a job uses.
//
// Strategies never create process groups; they get a Comm* from the Trainer
// and call the collectives below. Comm hides what c10d cannot do on CPU in
// LibTorch 1.13 (no AVG, no reduce-scatter, no flat all-gather, no bf16 on
// Gloo) so every strategy sees the same semantics on every backend.
//
// Blocking/throwing contract (all collectives):
//   - Every rank must call the same collectives in the same order.
//   - The async form (`*_async`) returns a Work handle at once; tensors passed
//     in must stay alive and untouched until wait() returns. The blocking form
//     (same name without `_async`) is the async form followed by wait().
//   - wait() blocks until the collective is done or the Comm's timeout passes,
//     then throws ft::Error naming the collective and this rank
//     ("rank 1: all_reduce failed: ..."), e.g. when a peer died.
//   - A failed collective poisons the group (c10d's own behaviour): the Comm
//     is marked failed and every later call throws at once, without touching
//     the network. Treat it as fatal for the job: the worker exits non-zero and
//     the launcher stops the others.
//   - World size 1 needs no store and no group: collectives are local no-ops
//     or copies with the same results, and cost nothing.
//
// Threading: a Comm is used from one thread (the worker's main thread or the
// autograd callback it hands work to); collectives are issued in call order.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/comm/dist_env.h"

namespace ft {

/// Reductions every backend supports (Avg is Sum then divide on Gloo).
enum class ReduceOp { Sum, Avg, Max, Min };

/// Which c10d backend carries collectives. Auto: Gloo for CPU tensors, plus
/// NCCL for CUDA tensors when LibTorch has NCCL and a GPU is visible.
enum class CommBackend { Auto, Gloo, Nccl };

/// How to build a Comm.
struct CommOptions {
  /// Rendezvous wait, and the longest any collective may take before wait() throws.
  std::chrono::milliseconds timeout{30000};
  CommBackend backend = CommBackend::Auto;
  /// Network interface for Gloo (like GLOO_SOCKET_IFNAME). Empty: loopback when
  /// every rank is on this host, else the address this host's name resolves to.
  std::string network_interface;
};

/// Shared failure flag of one Comm; Work handles keep it alive after the Comm.
struct CommHealth;
/// The rendezvous store and c10d groups of one Comm (defined in comm_internal.h).
struct CommGroups;
/// The thread that runs ring operations of one Comm (comm_ring.cpp).
class RingWorker;
struct RingWorkerDeleter {
  void operator()(RingWorker* w) const;
};

/// Handle of one async collective (c10d's Work with ft's post-processing).
///
/// wait(): blocks until done or the Comm's timeout; afterwards the output
/// tensors hold the result (casts back from the wire dtype and Avg division
/// happen here, so call it exactly once before reading). Throws ft::Error
/// naming the collective and the rank on failure or timeout, and marks the
/// Comm failed. Calling wait() again is a no-op (or rethrows).
/// completed(): non-blocking; true when wait() will not block.
/// A default-constructed Work is already complete. Dropping a Work without
/// wait() leaves its outputs unspecified.
class Work {
 public:
  struct State;  // defined in core/src/comm/comm_internal.h (holds the c10d handles)
  Work();
  explicit Work(std::shared_ptr<State> state);
  ~Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait();
  bool completed() const;

 private:
  std::shared_ptr<State> state_;
};

/// A connected group of ranks. Create once per process with Comm::create().
class Comm {
 public:
  /// Joins the job described by `env`. Rank 0 hosts a TCPStore on
  /// env.master_addr:env.master_port; all ranks wait up to options.timeout for
  /// the others. Throws ft::Error when the port is in use ("master port N on
  /// ADDR is in use; pass --master-port"), when not all ranks joined in time
  /// ("... K of W ranks joined"), or when the requested backend is missing.
  /// World size 1 returns at once without any network.
  static std::unique_ptr<Comm> create(const DistEnv& env, const CommOptions& options = {});

  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }
  int local_world_size() const { return env_.local_world_size; }
  const DistEnv& env() const { return env_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  /// Empty while healthy; else why the group is unusable.
  std::string failure() const;

  // ---- async collectives (see the contract at the top) ----

  /// In place: every rank ends with op over all ranks' `t`.
  Work all_reduce_async(at::Tensor& t, ReduceOp op = ReduceOp::Sum);
  /// In place: every rank ends with root's `t` (same shape and dtype on all ranks).
  Work broadcast_async(at::Tensor& t, int root);
  /// out[r] = rank r's `in`. `out` either empty (allocated here, world_size
  /// tensors like `in`) or world_size tensors shaped like `in`.
  Work all_gather_async(std::vector<at::Tensor>& out, const at::Tensor& in);
  /// flat_out (world_size * n elements, 1-D, contiguous) = concat over ranks of
  /// `in` (n elements). Undefined flat_out is allocated here.
  Work all_gather_flat_async(at::Tensor& flat_out, const at::Tensor& in);
  /// out (n elements) = op over ranks of chunk `rank` of `in` (world_size * n
  /// elements). Undefined out is allocated here (1-D).
  Work reduce_scatter_flat_async(at::Tensor& out, const at::Tensor& in, ReduceOp op = ReduceOp::Sum);
  /// Equal-split all-to-all over flat tensors: chunk j of `in` goes to rank j,
  /// chunk i of `out` comes from rank i (both world_size * n elements).
  Work all_to_all_async(at::Tensor& out, const at::Tensor& in);
  /// In-place reduce-scatter (the gradient buffer's): `flat` (contiguous
  /// 1-D, floating, length a multiple of world_size) is cut into world_size
  /// equal chunks; afterwards chunk rank() holds the reduced chunk and the
  /// others hold partial sums (unspecified). Sum or Avg. Gloo: a ring over
  /// send/recv on this Comm's ring thread, nothing allocated after the first
  /// call; NCCL: reduce_scatter into the input's own chunk.
  Work reduce_scatter_inplace_async(at::Tensor& flat, ReduceOp op = ReduceOp::Sum);
  /// In-place all-gather: chunk rank() of `flat` (contiguous 1-D, length a
  /// multiple of world_size) is this rank's part; afterwards every chunk
  /// holds its rank's part. Gloo: the ring thread, no staging copy; NCCL:
  /// all-gather from the tensor's own chunk.
  Work all_gather_inplace_async(at::Tensor& flat);
  /// Point to point: `t` to rank `dst`; matched by a recv on dst with the same tag.
  Work send_async(const at::Tensor& t, int dst, int tag = 0);
  /// Point to point: fills `t` (shape and dtype agreed with the sender) from rank `src`.
  Work recv_async(at::Tensor& t, int src, int tag = 0);
  Work barrier_async();

  // ---- blocking conveniences: the async form followed by wait() ----
  void all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op).wait(); }
  void broadcast(at::Tensor& t, int root) { broadcast_async(t, root).wait(); }
  void all_gather(std::vector<at::Tensor>& out, const at::Tensor& in) { all_gather_async(out, in).wait(); }
  void all_gather_flat(at::Tensor& flat_out, const at::Tensor& in) { all_gather_flat_async(flat_out, in).wait(); }
  void reduce_scatter_flat(at::Tensor& out, const at::Tensor& in, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_flat_async(out, in, op).wait();
  }
  void all_to_all(at::Tensor& out, const at::Tensor& in) { all_to_all_async(out, in).wait(); }
  void send(const at::Tensor& t, int dst, int tag = 0) { send_async(t, dst, tag).wait(); }
  void recv(at::Tensor& t, int src, int tag = 0) { recv_async(t, src, tag).wait(); }
  /// Blocks until every rank arrived, or throws after the timeout.
  void barrier() { barrier_async().wait(); }

  /// Blocking: every rank's 1-D int64 tensor, whatever its length (sizes are
  /// exchanged first). Used to gather eval predictions of uneven shards.
  std::vector<at::Tensor> all_gather_varlen(const at::Tensor& in);

  // ---- sub-groups (the dimensions of a device mesh, ft/comm/device_mesh.h) ----

  /// The Comm of the group, among `groups`, that holds this rank. `groups` is a
  /// partition of 0 .. world_size-1 (ranks of this Comm); every rank calls
  /// split with the same `name` and `groups`, in the same order relative to
  /// other splits (a collective, though only a group's own members connect).
  /// In the result, rank() is this rank's position in its group and every
  /// collective involves that group alone: Gloo on CPU and NCCL on CUDA, with
  /// this Comm's timeout, failure reporting and stall report. Messages keep
  /// naming ranks of the whole job. A group of one is local, like world size 1.
  /// Throws ft::Error naming `name` when `groups` is not such a partition.
  std::unique_ptr<Comm> split(const std::string& name, const std::vector<std::vector<int>>& groups);
  /// The job rank (the launcher's RANK) of rank `r` of this Comm.
  int job_rank(int r) const;

 private:
  Comm(DistEnv env, CommOptions options);
  RingWorker& ring_worker();  // started by the first ring operation

  DistEnv env_;
  CommOptions options_;
  std::shared_ptr<CommHealth> health_;
  std::unique_ptr<CommGroups> groups_;  // null at world size 1
  std::unique_ptr<RingWorker, RingWorkerDeleter> ring_;  // started by the first ring operation
  DistEnv job_env_;  // the launcher's view (a sub-group's env_ is group-local)
};

}  // namespace ft
