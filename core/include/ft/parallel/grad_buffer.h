// GradBuffer: gradients of a set of parameters flattened into contiguous
// buffers, split into buckets whose communication starts while backward is
// still running.
//
// One buffer per dtype. Parameters go in REVERSE model order, because
// backward produces gradients roughly last layer first: the first bucket
// fills first and its communication overlaps the rest of backward. Every
// parameter's `.grad` is a view into its buffer, so autograd accumulates
// straight into the buffer and no copy happens before or after a collective.
//
// What is done with a full bucket is a CommHook: all-reduce Avg for DDP, a
// low-precision all-reduce for gradient compression, a reduce-scatter for
// sharded gradients (the unit buckets of ft::FlatParamGroup, ft/parallel/flat_param_group.h).
// This is the c10d Reducer / Megatron param-and-grad-buffer idea, written
// against ft::Comm because c10d::Reducer cannot be used from LibTorch's
// installed headers.
//
// Use per optimizer step:
//   for each micro-batch: start_backward(sync = is_last_micro_batch); loss.backward();
//   finish_sync();          // waits for every bucket; grads are now reduced
//   ...optimizer update...; zero()  (or zero the `.grad` views in place)
//
// Threading: hooks run on autograd's thread for the parameters' device (the
// caller's thread on CPU); start_backward/finish_sync on the caller's thread,
// never concurrently with a backward. Blocking: only finish_sync() blocks.
// Throwing: a failed collective throws ft::Error from finish_sync() (or from
// backward(), when a launch itself fails), as ft::Comm documents.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/comm/comm.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ft {

class Tracer;

/// One bucket handed to a CommHook.
struct GradBucket {
  int index = 0;    ///< launch order (0 = first to fill in backward)
  at::Tensor data;  ///< 1-D view of the buffer: the bucket's params, then padding (zeros)
  /// > 0: the bucket holds one row-sparse parameter (GradBufferOptions::
  /// row_sparse) of rows this many elements wide.
  int64_t row_width = 0;
};

/// A launched bucket communication: wait on `work`, then run `after_wait`
/// (may be empty), e.g. to copy a low-precision wire copy back into the bucket.
struct BucketComm {
  Work work;
  std::function<void()> after_wait;
};

/// Starts the communication of one full bucket and returns at once. Called
/// in bucket index order, identically on every rank (collective order).
/// `bucket.data` must hold the result once `after_wait` has run.
using CommHook = std::function<BucketComm(GradBucket& bucket)>;

/// Default DDP hook: in-place all-reduce Avg of the bucket.
CommHook allreduce_avg_hook(Comm& comm);

/// Row-sparse all-reduce for embedding tables (PyTorch's sparse embedding
/// gradients, without sparse tensors): a row-sparse bucket's gradient is
/// zero outside the rows the ranks' batches looked up, so only the union of
/// the touched rows is averaged (a byte mask all-reduced with Max, then the
/// rows gathered, all-reduced Avg and put back). Exactly the dense result:
/// untouched rows are zero on every rank. On BERT's 21 128-row vocabulary a
/// step touches a few thousand rows: the bucket that backward fills last,
/// and so cannot hide, shrinks several-fold. Buckets that are not row-sparse,
/// and CUDA tensors, go to `dense`. Staging (mask, indices, rows) is kept
/// and only grows.
CommHook row_sparse_allreduce_hook(Comm& comm, CommHook dense);

/// Sharded-gradient hook (ZeRO-2/3, FSDP: ft::FlatParamGroup's unit
/// buckets): in-place reduce-scatter Avg of the bucket
/// (Comm::reduce_scatter_inplace_async). Afterwards this rank's chunk of
/// the bucket (bucket.data.numel() / world elements at rank * that) holds
/// the averaged gradient; the other chunks are unspecified. Needs buckets
/// padded to a multiple of the world size.
CommHook reduce_scatter_avg_hook(Comm& comm);

/// Hybrid sharding (FSDP's HYBRID_SHARD): the reduce-scatter Avg above inside
/// `shard`, then this rank's reduced chunk all-reduced Avg across
/// `replicate` (the ranks holding the same shard in the other groups). The
/// chunk then holds the average over the whole job, as with one
/// reduce-scatter over all ranks; the world-wide traffic is 1/shard-size
/// of a bucket per rank instead of a bucket.
CommHook hybrid_reduce_hook(Comm& shard, Comm& replicate);

/// Gradient compression (c10d's FP16CompressCommHook): pre-divides by the
/// world size, casts to `wire` (kHalf or kBFloat16), all-reduces Sum and
/// casts back. Halves the bytes on NCCL; on Gloo ft::Comm widens 16-bit
/// tensors to fp32 on the wire, so there it only costs precision. The
/// low-precision copy of each bucket is kept from one step to the next.
CommHook compressed_allreduce_hook(Comm& comm, at::ScalarType wire);

/// How to lay out the buffer; every field has a usable default.
struct GradBufferOptions {
  /// Target bucket size in bytes (c10d default 25 MiB). A bucket closes
  /// before the parameter that would make it exceed this; a parameter never
  /// straddles two buckets, so one larger than this gets a bucket of its own.
  int64_t bucket_bytes = 25LL * 1024 * 1024;
  /// Size cap of the first bucket to fill (c10d's 1 MiB): backward's first
  /// gradients then go on the wire while most of backward is still ahead.
  /// 0: the same as bucket_bytes.
  int64_t first_bucket_bytes = 1024 * 1024;
  /// Each bucket's element count is rounded up to a multiple of this
  /// (e.g. the world size, so a reduce-scatter splits it evenly). >= 1.
  int64_t align_elements = 1;
  /// When set, the layout is rebuilt once, at the start_backward() after the
  /// first synchronised backward, in the order gradients really became ready
  /// there (c10d's "rebuild buckets"): model order is only a guess, e.g.
  /// BERT's small embedding tensors come first in reverse model order but
  /// their grads arrive last, holding back the bucket they share with the
  /// last encoder layer. The order is broadcast from rank 0 (a collective
  /// inside start_backward) so every rank lays out alike. Leave null when
  /// others depend on a fixed layout (e.g. shards cut from buffers()).
  Comm* rebuild_with = nullptr;
  /// 2-D params whose gradient is row-sparse (an embedding table): each gets
  /// a bucket of its own, marked with its row width (GradBucket::row_width)
  /// for row_sparse_allreduce_hook.
  std::vector<int> row_sparse;
  /// Records each bucket's communication ("allreduce bucket k", launch to
  /// completion) on the trace's comm track while it is active, from
  /// finish_sync(). A watcher thread, started the first time a synced
  /// backward runs with the trace active, notes completions as they happen
  /// rather than when next looked at; it never calls the Tracer.
  Tracer* trace = nullptr;
  /// The name of a bucket's communication on the trace's comm track.
  const char* trace_name = "allreduce bucket";
};

/// Where one bucket lives; fixed at construction.
struct BucketInfo {
  int buffer = 0;                   ///< index into buffers() (one per dtype)
  int64_t offset = 0;               ///< first element in that buffer
  int64_t numel = 0;                ///< elements of its params (no padding)
  int64_t padded_numel = 0;         ///< numel rounded up to align_elements
  std::vector<int> params;          ///< indices into the constructor's params, in layout order
  int64_t row_width = 0;            ///< > 0: one row-sparse param (GradBufferOptions::row_sparse)
};

/// Where one parameter's gradient lives.
struct ParamSlot {
  int bucket = 0;
  int buffer = 0;
  int64_t offset = 0;  ///< first element in the buffer
  int64_t numel = 0;
};

/// How much gradient communication backward hid, summed over finish_sync()
/// calls that had something in flight.
struct OverlapStats {
  int64_t syncs = 0;         ///< finish_sync() calls that waited on buckets
  double in_flight_s = 0.0;  ///< union of [launch, observed done] over buckets
  double waited_s = 0.0;     ///< time finish_sync() blocked (incl. after_wait)
  /// Fraction of in-flight time not spent blocked in finish_sync (0..1).
  double hidden_fraction() const {
    return in_flight_s > 0 ? std::max(0.0, 1.0 - waited_s / in_flight_s) : 0.0;
  }
};

class GradBuffer {
 public:
  /// `params`: leaf tensors that require grad, in MODEL order (the layout
  /// reverses it, until a rebuild; see GradBufferOptions::rebuild_with). Any existing `.grad` is copied into the buffer, then each
  /// `.grad` becomes a view of it. Installs one post-accumulate hook per
  /// parameter; they are removed in the destructor. Throws ft::Error on an
  /// empty list, a parameter without requires_grad, or bad options.
  GradBuffer(const std::vector<at::Tensor>& params, GradBufferOptions options, CommHook hook);
  ~GradBuffer();
  GradBuffer(const GradBuffer&) = delete;
  GradBuffer& operator=(const GradBuffer&) = delete;

  /// Call before each backward. sync=false (an accumulation micro-batch):
  /// grads accumulate, nothing is launched. sync=true: buckets launch as
  /// they fill and any left after backward are launched when it ends.
  /// Throws ft::Error if a synced backward's buckets were never waited on.
  /// Collective once when a bucket rebuild is due.
  void start_backward(bool sync);

  /// Blocks until every bucket's communication is done (launching the ones
  /// not launched yet, e.g. when backward ran without start_backward(true)),
  /// so the `.grad` views hold reduced gradients. No-op when already synced.
  /// Collective when it has to launch.
  void finish_sync();

  /// Zeroes every buffer (all `.grad` views) and forgets the last sync.
  void zero();

  /// The flat buffers, one per dtype in first-seen order (padding included).
  const std::vector<at::Tensor>& buffers() const { return buffers_; }
  const std::vector<BucketInfo>& buckets() const { return buckets_; }
  /// Slot of params[i] (constructor order).
  const ParamSlot& slot(int i) const { return slots_[static_cast<size_t>(i)]; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const OverlapStats& overlap() const { return overlap_; }

 private:
  using Clock = std::chrono::steady_clock;
  class Hook;
  friend class Hook;

  enum class State {
    kIdle,       // nothing accumulated since the last finish_sync()/zero()
    kNoSync,     // local grads accumulated by no-sync backwards, not reduced
    kSyncing,    // a sync backward started: buckets launch as they fill
    kSynced,     // finish_sync() done: the buffer holds reduced grads
  };

  void layout(const std::vector<int>& order);  // fills buckets_, slots_, buffers_
  void reset_bucket_state();                   // sizes the per-bucket vectors
  void rebuild();                              // re-layout in ready_order_
  void attach_views();
  void on_grad_ready(int param);  // from a hook
  void on_backward_end();         // autograd callback after the last hook
  void launch_ready_in_order();   // launches buckets next_launch_.. that are ready
  void launch(int bucket);
  void observe_completions();
  void note_done(int bucket, Clock::time_point when);  // first time bucket's Work is seen done
  void watch_completions();                             // the watcher thread (see GradBufferOptions::trace)
  void record_sync_stats(Clock::time_point wait_start, Clock::time_point wait_end);

  // Fixed at construction (buffers_, buckets_, slots_: until a rebuild).
  GradBufferOptions options_;
  CommHook hook_;
  std::vector<at::Tensor> params_;       // constructor order; leaves requiring grad
  std::vector<at::Tensor> buffers_;      // one contiguous 1-D tensor per dtype; padding stays 0
  std::vector<BucketInfo> buckets_;      // index order == launch order == layout order
  // Rebuild: params in the order their hooks fired in the first sync
  // backward (recorded while !rebuilt_); rebuilt_ is true once done or when
  // no rebuild is wanted. Only layout-changing fields change on rebuild.
  std::vector<int> ready_order_;
  bool rebuilt_ = true;
  std::vector<ParamSlot> slots_;         // slots_[i] for params_[i]
  // Grad accumulators of params_ (the variables hold them only weakly: if
  // these die, the hooks die with them) and the keys of our hooks on them.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  // Per backward / per sync; guarded by mutex_ (hooks of params on
  // different devices may run on different autograd threads).
  std::mutex mutex_;
  State state_ = State::kIdle;
  bool callback_queued_ = false;         // on_backward_end queued for the running backward
  std::vector<int> pending_;             // params of bucket b not yet ready in this sync backward
  std::vector<bool> param_ready_;        // param i's hook fired in this sync backward
  int next_launch_ = 0;                  // buckets [0, next_launch_) are launched, in order
  std::vector<BucketComm> comms_;        // comms_[b] valid for b < next_launch_ until finish_sync
  // For OverlapStats: when bucket b was launched in this sync, and the first
  // time its Work was seen completed (meaningful once seen_done_[b]).
  std::vector<Clock::time_point> launched_at_, done_at_;
  std::vector<bool> seen_done_;
  OverlapStats overlap_;
  // Completion watcher (tracing only): waits on watch_cv_ under mutex_ and
  // polls while tracing_ (this sync started with the trace active).
  bool tracing_ = false;
  std::thread watcher_;
  std::condition_variable watch_cv_;
  bool stop_watching_ = false;
};

}  // namespace ft
