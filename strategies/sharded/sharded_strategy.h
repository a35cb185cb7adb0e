// ShardedStrategy: the one engine behind zero1, zero2, zero3 and fsdp.
//
// What differs between those names is policy (ShardingPolicy), not code:
//
//   name / mode            optimizer  grads            params at rest   params freed
//   zero1                  sharded    all-reduced      full             never
//   zero2                  sharded    reduce-scattered full             never
//   zero3                  sharded    reduce-scattered shard            after forward and after backward
//   fsdp FULL_SHARD        sharded    reduce-scattered shard            after forward and after backward
//   fsdp SHARD_GRAD_OP     sharded    reduce-scattered shard            after backward
//   fsdp NO_SHARD          full       all-reduced      full             never
//   fsdp HYBRID_SHARD      FULL_SHARD inside a shard group of shard_group_size ranks;
//                          grads then all-reduced across the groups (replicas)
//   fsdp _HYBRID_SHARD_ZERO2  the same with SHARD_GRAD_OP inside the group
//
// Hybrid sharding uses a DeviceMesh {replicate: world / S, shard: S}: every
// collective on parameters and on optimizer state runs in the shard group,
// and each unit's reduce-scattered gradient chunk is averaged across the
// replicate group, so every replica's shard sees the gradient of the whole
// global batch (the same update as FULL_SHARD over the whole world).
//
// Layout: one FlatParam per model unit (ft/flat_shard.h), split into equal
// shards. The optimizer (ft::TensorOptimizer) runs over this rank's pieces
// of each parameter: one slot per (parameter ∩ shard), a view into the fp32
// master shard, so per-parameter weight decay and LR scale (ParamPlan) are
// honoured without grouping parameters.
//
// Gradients live in ft::GradBuffer, as for DDP: one persistent buffer whose
// views are the `.grad`s, filled by autograd, launched bucket by bucket
// from autograd hooks while backward runs.
//  - all-reduced policies (zero1, NO_SHARD): DDP's buckets and all-reduce;
//    full grads are kept, as ZeRO-1 prescribes.
//  - reduce-scattered policies: one bucket per unit, laid out exactly like
//    the unit's FlatLayout (frozen weights are zero gaps, padding included),
//    last unit first, reduced in place by a reduce-scatter (Avg): chunk r of
//    a unit's bucket then holds the averaged gradient of shard r, which is
//    what this rank's optimizer reads. This is Megatron's distributed
//    optimizer: the full gradient buffer stays (4Ψ), nothing is allocated or
//    copied per step, and no staging buffer exists.
//  - Accumulation micro-batches (sync_grads=false) accumulate locally with
//    no communication (DDP's no_sync); the sync micro-batch reduces the sum.
// Parameters (params_sharded): a UnitRunner wraps each unit's forward:
// wait_for_unshard(unit), prefetch the next unit(s) (limit_all_gathers),
// run, reshard if reshard_after_forward; a hook on the unit's output
// re-gathers the unit before its backward (and prefetches the previous
// one); once all of its grads are accumulated the unit is resharded.
//
// Precision: master shards and optimizer state stay fp32; autocast computes
// in bf16/fp16 from them. Communication stays fp32 (ft::Comm widens 16-bit
// tensors on Gloo anyway, so a 16-bit wire would save nothing on CPU).
// fp16: grads are unscaled on the shard and found_inf is OR-ed across ranks
// (all_reduce Max) before the loss scaler updates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ft/activation_checkpoint.h"
#include "ft/flat_shard.h"
#include "ft/optim.h"
#include "ft/abilities.h"
#include "ft/strategy.h"

namespace ft {

class DeviceMesh;
class GradBuffer;

/// DeepSpeed's stage numbering.
enum class ZeroStage { kDisabled = 0, kOptimizerStates = 1, kGradients = 2, kWeights = 3 };

/// FSDP's sharding modes.
enum class FsdpSharding { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };

/// Everything that makes zero1/2/3 and the FSDP modes differ.
struct ShardingPolicy {
  std::string name = "zero";          ///< registered name, for messages
  bool shard_optimizer = true;        ///< false: every rank holds all optimizer state (NO_SHARD)
  bool shard_grads = false;           ///< reduce-scatter grads per unit; false: all-reduce (GradBuffer)
  bool shard_params = false;          ///< only the shard lives between uses of a unit
  bool reshard_after_forward = true;  ///< free a unit after its forward (else after its backward)
  bool forward_prefetch = true;       ///< gather the next unit while one runs forward
  bool backward_prefetch = true;      ///< gather the previous unit while one runs backward
  /// Most prefetched all-gathers in flight at once (units gathered ahead of
  /// use), >= 0; 0 disables prefetching. With 1, at most two units are
  /// materialised at a time under FULL_SHARD / zero3.
  int limit_all_gathers = 1;
  double bucket_mb = 25.0;            ///< GradBuffer bucket size for all-reduced grads
  /// Hybrid sharding: shard inside groups of this many neighbouring ranks and
  /// replicate across the groups; 0 shards over the whole world.
  int shard_group_size = 0;

  static ShardingPolicy zero(ZeroStage stage);
  /// Hybrid modes shard in groups of `shard_group_size` ranks (a divisor of
  /// `world_size`, neither 1 nor the world: those are NO_SHARD-like
  /// replication and FULL_SHARD); ft::Error names the option otherwise.
  static ShardingPolicy fsdp(FsdpSharding mode, int world_size = 1, int shard_group_size = 0);
};

/// strategy.options for zero1/zero2/zero3 (all optional):
///   bucket_mb          (> 0, default 25)  zero1: GradBuffer bucket size for the all-reduce
///   prefetch           (true|false, default true) zero3: gather the next unit ahead (forward and backward)
///   limit_all_gathers  (int >= 0, default 1) zero3: prefetched all-gathers in flight at most
/// Errors (ft::Error) name `strategy.options.<key>`; unknown keys list the known ones.
ShardingPolicy zero_policy_from_options(ZeroStage stage, const std::map<std::string, std::string>& options);

/// strategy.options for fsdp (all optional):
///   sharding_strategy  FULL_SHARD (default) | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | _HYBRID_SHARD_ZERO2
///   shard_group_size   (int, hybrid modes only; default: the ranks per host) ranks that shard one copy
///   forward_prefetch   (true|false, default true)
///   backward_prefetch  (BACKWARD_PRE (default) | NONE; true/false accepted)
///   limit_all_gathers  (int >= 0, default 1), bucket_mb (NO_SHARD) as for zero.
/// `world_size` and `local_world_size`: the job's, for the hybrid modes' group size.
ShardingPolicy fsdp_policy_from_options(const std::map<std::string, std::string>& options, int world_size,
                                        int local_world_size);

class ShardedStrategy : public Strategy, public ShardedCheckpointing {
 public:
  explicit ShardedStrategy(ShardingPolicy policy);
  ~ShardedStrategy() override;

  void setup(std::shared_ptr<BertForSequenceClassification> model, const OptimizerSpec& optimizer,
             const ParamPlan& plan, StrategyContext& ctx) override;
  at::Tensor forward(const Batch& batch) override;
  void backward(const at::Tensor& loss, bool sync_grads) override;
  StepResult step(const StepOptions& options) override;
  TensorList model_state() override;
  OptimizerState optimizer_state() override;
  void load_state(const TensorList& model, const OptimizerState* optimizer) override;
  /// params: persistent flat storage (shards, or full buffers) plus, for
  /// sharded params, the most full-unit bytes held at once so far (the
  /// "gathered unit in flight"); grads: the GradBuffer; optimizer:
  /// TensorOptimizer state.
  StateBytes state_bytes() const override;
  void teardown() override;
  void save_sharded(const std::filesystem::path& dir) override;

  const ShardingPolicy& policy() const { return policy_; }
  /// The units' flat parameters (for tests and tools).
  const std::vector<std::unique_ptr<FlatParam>>& flat_params() const { return units_; }

  // --- called by the unit runner and the autograd hooks (implementation detail) ---
  at::Tensor run_unit(int unit, RunPass pass, const at::Tensor& input,
                      const std::function<at::Tensor(const at::Tensor&)>& fn);
  void pre_backward(int unit);
  void on_unit_grads_ready(int unit);
  void on_backward_end();

 protected:
  /// For plugins that parse strategy.options in setup() before calling ours.
  void set_policy(ShardingPolicy policy) { policy_ = std::move(policy); }

 private:
  class Runner;
  struct SlotRef {
    int unit;
    int entry;
    FlatPiece piece;
  };

  void build_units(const ParamPlan& plan);
  void build_grad_buffer();
  void prefetch(int unit);
  void release_prefetch(int unit);  // a prefetched unit is used or freed: no longer counts as ahead
  void gather_for_use(int unit);    // the unit's weights are needed now
  void reshard_unit(int unit);
  void reshard_if_backward_done(int unit);
  std::vector<at::Tensor> slot_grads() const;
  void note_gathered_bytes();
  int shard_world() const;
  int shard_rank() const;
  Comm& shard_comm();  // where parameters and optimizer state are sharded
  bool writes_shards() const;  // this rank's shard is not a replica's copy

  ShardingPolicy policy_;
  StrategyContext* ctx_ = nullptr;
  std::unique_ptr<DeviceMesh> mesh_;  // hybrid sharding only
  GatherPool gather_pool_;  // before units_: they hand storage back to it
  std::vector<std::unique_ptr<FlatParam>> units_;
  std::unique_ptr<TensorOptimizer> optimizer_;
  std::vector<SlotRef> slots_;          // slots_[i] describes optimizer slot i
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<GradBuffer> grad_buffer_;  // every trainable gradient; null when nothing trains
  std::vector<at::Tensor> grad_shards_;      // reduce-scattered policies: per unit, this rank's chunk of its bucket

  // Backward bookkeeping (sharded-params policies).
  std::vector<int> trainable_count_;  // per unit
  std::vector<bool> ready_;           // per unit: all grads accumulated in this backward
  std::vector<bool> has_frozen_;      // per unit: some weight needs no grad but backward still reads it
  std::vector<bool> input_grad_done_; // per unit: the grad of its input is complete in this backward
  bool callback_queued_ = false;
  int prefetched_ = 0;                // gathers issued ahead of use, not yet consumed
  std::vector<bool> prefetched_unit_;
  int64_t peak_full_bytes_ = 0;
  at::Tensor norm_buf_;  // the squared grad norm's all-reduce
};

}  // namespace ft
