// FlatParamGroup: the per-unit engine of ZeRO-2/3 and FSDP, beside the
// FlatParams it drives (FSDP2 keeps the same hooks with FSDPParamGroup).
//
// It owns one FlatParam per model unit and, by policy:
//  - parameters (params_sharded): a UnitRunner the model calls around each
//    unit's forward: wait for the unit's all-gather, prefetch the next
//    `limit_all_gathers` units, run, reshard (reshard_after_forward); a hook
//    on the unit's output gathers it again before its backward and
//    prefetches the previous one; the unit is resharded once its gradients
//    are complete (and its frozen weights read for the last time).
//  - gradients (grads_sharded): the persistent gradient of a unit is this
//    rank's shard only (4Ψ/S over all units). A unit's full gradient exists
//    only while its backward is in flight, in a bucket taken from a
//    persistent pool (GradBucketPool): a pre-hook on each trainable
//    parameter's AccumulateGrad node writes the incoming gradient into the
//    unit's bucket (autograd's own `.grad` stays undefined); when a unit's
//    last gradient has arrived its bucket is reduce-scattered in place,
//    units strictly in launch order (last unit first) so every rank issues
//    the same collectives; once the reduce-scatter is waited on, this rank's
//    chunk is added into the unit's gradient shard and the bucket goes back
//    to the pool.
//
// Gradient accumulation (GradAccumulation):
//  - kReduceEachMicroBatch (DeepSpeed's rule, the default): every
//    micro-batch's unit gradients are reduce-scattered and summed into the
//    shards; memory stays 4Ψ/S + the pool.
//  - kNoSync (FSDP's no_sync): every unit keeps a full-size bucket of its
//    own across micro-batches (4Ψ in all, like DDP) and only the
//    synchronised micro-batch communicates.
//
// The word-embedding table (shard_word_table; a classifier's, whose table no
// head reads): its rows are split over the shard group as a flat param of
// their own, after the model's units (index num_units()), padded to whole
// rows per rank. It is never gathered and has no bucket: the model's lookup
// goes through lookup_words() (flat_param_words.cpp): ZeRO-3 all-gathers the
// token ids, every rank reads the rows it owns and a reduce-scatter sums
// them back to each rank's own tokens; ZeRO-2 reads its full replica. Its
// gradient is row-sparse: at backward end every rank's token ids and output
// gradients are all-gathered and each rank adds the rows it owns into its
// shard. Neither a 4 Ψ_words gathered copy nor a bucket of that size then
// exists; the exchange's scratch is proportional to the batch's tokens,
// like activations. A table some head reads (the tied masked-LM decoder)
// stays in unit 0.
//
// One end-of-backward callback (queued by the first gradient of a
// backward): it completes units whose gradients did not all arrive (unused
// parameters: zeros), launches what is left in order and reshards every
// unit still gathered.
//
// Threading: everything runs on the caller's thread and on autograd's
// thread for the parameters' device, never concurrently (CPU: the same
// thread). Blocking: a bucket taken from a full pool waits for the oldest
// reduce-scatter; finish_grad_sync() waits for all. Throwing: a failed
// collective throws ft::Error from where it is waited on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/model/activation_checkpoint.h"
#include "ft/parallel/flat_shard.h"
#include "ft/parallel/grad_buffer.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ft {

class EncoderModel;
class Tracer;

/// How micro-batches of one optimizer step accumulate sharded gradients.
enum class GradAccumulation {
  kReduceEachMicroBatch,  ///< reduce-scatter every micro-batch, sum into the shard (DeepSpeed)
  kNoSync,                ///< keep full unit gradients, reduce-scatter once (FSDP no_sync; +4Ψ)
};

/// A persistent arena for the full gradients of units in flight (its size:
/// ft::grad_pool_capacity, ft/parallel/cost_model.h): buckets are
/// taken and given back strictly first-in first-out (launch order), at most
/// `max_buckets` at once, inside one buffer of `capacity` elements laid out
/// as a ring. A bucket that does not fit waits (the caller's `wait_oldest`)
/// for the oldest ones. Allocated once, at the first take().
class GradBucketPool {
 public:
  /// `capacity` >= the largest bucket ever taken; `max_buckets` >= 1.
  GradBucketPool(int64_t capacity, int max_buckets);

  /// Whether a bucket of `numel` can be placed now without releasing any.
  bool fits(int64_t numel) const;
  /// A 1-D view of `numel` elements (contents unspecified). Requires fits().
  at::Tensor take(int64_t numel, const at::TensorOptions& options);
  /// Gives back the oldest bucket taken.
  void give_oldest();
  int live() const { return static_cast<int>(live_.size()); }
  int64_t capacity() const { return capacity_; }
  /// Bytes allocated (0 before the first take).
  int64_t held_bytes() const;

 private:
  struct Span {
    int64_t offset, numel;
  };
  int64_t capacity_;
  int max_buckets_;
  at::Tensor arena_;
  std::vector<Span> live_;  // oldest first
  int64_t cursor_ = 0;      // where the next bucket would start
};

/// How the engine treats its units. One set of defaults: the sharded
/// strategies' policy (ShardingPolicy) derives from this struct rather than
/// copying it.
struct FlatParamGroupOptions {
  bool params_sharded = false;        ///< only the shard lives between uses of a unit
  bool reshard_after_forward = true;  ///< free a unit after its forward (else after its backward)
  bool forward_prefetch = true;       ///< gather the next unit while one runs forward
  bool backward_prefetch = true;      ///< gather the previous unit while one runs backward
  /// Most prefetched all-gathers in flight at once (units gathered ahead of
  /// use), >= 0; 0 disables prefetching. With 1, at most two units are
  /// materialised at a time under FULL_SHARD / zero3.
  int limit_all_gathers = 1;
  bool grads_sharded = false;         ///< gradients as shards + bucket pool (else the caller's GradBuffer)
  /// Sharded grads: most units' full gradients alive at once (the bucket
  /// pool's bound, >= 1; FSDP2 and DeepSpeed keep about two).
  int grad_buckets = 2;
  /// Sharded grads: reduce every micro-batch (DeepSpeed) or keep full
  /// gradients until the synchronised one (FSDP no_sync, +4Ψ).
  GradAccumulation accumulation = GradAccumulation::kReduceEachMicroBatch;
  /// Sharded grads: the word-embedding table is split by rows (see above)
  /// instead of being gathered and bucketed whole. Only where no head reads
  /// the table (a classifier's, not a masked LM's); ignored without
  /// grads_sharded.
  bool shard_word_table = true;
  Tracer* trace = nullptr;
};

class FlatParamGroup {
 public:
  /// Flattens `model`'s units (ft/model/model.h) over `shard` (`world`, `rank`:
  /// the shard group's; 1/0 keeps one full shard). `trainable(name)` says
  /// which parameters get gradients. `reduce` launches a unit bucket's
  /// reduce-scatter (reduce_scatter_avg_hook, hybrid_reduce_hook); needed
  /// with grads_sharded. Installs the runner on the model when
  /// params_sharded or grads_sharded.
  FlatParamGroup(EncoderModel& model, const std::function<bool(const std::string&)>& trainable,
                 Comm& shard, int world, int rank, FlatParamGroupOptions options, CommHook reduce);
  ~FlatParamGroup();
  FlatParamGroup(const FlatParamGroup&) = delete;
  FlatParamGroup& operator=(const FlatParamGroup&) = delete;

  const FlatParamGroupOptions& options() const { return options_; }
  const std::vector<std::unique_ptr<FlatParam>>& units() const { return units_; }

  /// Before each backward: whether this micro-batch ends the accumulation.
  void start_backward(bool sync);
  /// Launches what was not launched and waits for every reduce-scatter: the
  /// gradient shards then hold the averaged sum over the micro-batches.
  void finish_grad_sync();
  /// This rank's gradient shard of `unit` (grads_sharded; undefined for a
  /// unit that trains nothing). Zeroed by the caller after the update.
  const at::Tensor& grad_shard(int unit) const { return grad_shards_[static_cast<size_t>(unit)]; }

  /// Bytes of full units gathered at once, at most, so far (params_sharded).
  int64_t peak_gathered_bytes() const { return peak_full_bytes_; }
  /// Gradient bytes: shards + the bucket pool (+ no_sync's buckets).
  int64_t grad_bytes() const;
  /// Full unit gradients alive at once, at most, so far; buckets that had
  /// to be allocated outside the pool (gradients arriving out of launch
  /// order), which should stay 0.
  int peak_live_buckets() const { return peak_live_buckets_; }
  int overflow_buckets() const { return overflow_; }
  /// The word table's unit index (== the model's num_units()), or -1 when
  /// the table stays in unit 0.
  int word_unit() const { return words_unit_; }
  /// Bytes of the word exchange's scratch (token ids, rows), grown to the
  /// largest batch seen; activation-like, not in grad_bytes().
  int64_t word_scratch_bytes() const;

 private:
  class Runner;
  class GradHook;
  enum class UnitGrad { kIdle, kFilling, kComplete, kLaunched };
  struct UnitGrads {
    int position = -1;          // in launch order; -1: trains nothing
    at::Tensor bucket;          // bound while kFilling..kLaunched (no_sync: always)
    bool from_pool = false;
    bool holds_data = false;    // no_sync: earlier micro-batches accumulated here
    std::vector<bool> arrived;  // per entry, this backward
    int pending = 0;            // trainable entries still to arrive this backward
    UnitGrad state = UnitGrad::kIdle;
    BucketComm comm;
  };

  void build_units(EncoderModel& model, const std::function<bool(const std::string&)>& trainable,
                   int world, int rank);
  void install_grad_hooks();

  // Parameters (flat_param_group.cpp).
  at::Tensor run_unit(int unit, RunPass pass, const at::Tensor& input,
                      const std::function<at::Tensor(const at::Tensor&)>& fn);
  void pre_backward(int unit);
  void prefetch(int unit);
  void release_prefetch(int unit);
  void gather_for_use(int unit);
  void reshard_unit(int unit);
  void reshard_if_backward_done(int unit);
  void note_gathered_bytes();

  // Gradients (flat_param_grads.cpp).
  void on_grad(int unit, int entry, const at::Tensor& grad);
  void bind(int unit);
  void complete(int unit);
  void launch_in_order();
  void launch(int unit);
  void finish_oldest();
  void finish(int unit);
  void finish_through(int unit);  // and every pool bucket older than it
  void finish_all();
  void on_backward_end();
  void queue_backward_end();

  // The vocabulary-sharded word table (flat_param_words.cpp). Scratch grows
  // to the largest batch and is then reused.
  struct WordScratch {
    at::Tensor count;       // [1] int64: the most tokens any rank has
    at::Tensor all_ids;     // [world * cap] int64; -1 past a rank's tokens
    at::Tensor rows;        // [world * cap * width]: rows read (forward), gradients gathered (backward)
    at::Tensor saved_ids;   // the last forward-with-grad's token ids
    at::Tensor grad;        // their output gradient, autograd's, held until backward end (undefined: none)
  };
  class WordGradNode;
  at::Tensor lookup_words(const at::Tensor& ids);
  int64_t gather_word_ids(const at::Tensor& ids);
  void stash_word_grad(const at::Tensor& grad);
  void exchange_word_grads();

  EncoderModel& model_;
  Comm& shard_;
  FlatParamGroupOptions options_;
  CommHook reduce_;
  GatherPool gather_pool_;  // before units_: they hand storage back to it
  std::vector<std::unique_ptr<FlatParam>> units_;  // the model's units, then the word table's
  int model_units_ = 0;                             // the model's num_units()
  std::unique_ptr<Runner> runner_;

  int words_unit_ = -1;
  int64_t word_owned_rows_ = 0, word_width_ = 0, pad_row_ = -1;  // owned: rows per rank
  WordScratch words_;

  // Per unit, fixed at construction.
  std::vector<int> trainable_count_;
  std::vector<bool> has_frozen_;
  std::vector<int> launch_order_;  // units that train, last first

  // Parameters, per backward.
  std::vector<bool> ready_;            // all trainable grads accumulated this backward
  std::vector<bool> input_grad_done_;  // the grad of the unit's input is complete
  std::vector<bool> prefetched_unit_;
  int prefetched_ = 0;
  int64_t peak_full_bytes_ = 0;

  // Gradients.
  std::vector<at::Tensor> grad_shards_;
  std::vector<UnitGrads> grads_;
  std::unique_ptr<GradBucketPool> pool_;
  std::vector<int> in_pool_;  // units holding pool buckets, oldest first
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<const void*> hook_ids_;
  bool sync_ = true;
  bool callback_queued_ = false;
  int next_launch_ = 0;  // index into launch_order_
  int peak_live_buckets_ = 0;
  int overflow_ = 0;
  int64_t overflow_bytes_ = 0;
};

}  // namespace ft
