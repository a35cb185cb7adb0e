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
// Layout: one FlatParam per model unit (ft/parallel/flat_shard.h), split into equal
// shards. The optimizer (ft::TensorOptimizer) runs over this rank's pieces
// of each parameter: one slot per (parameter ∩ shard), a view into the fp32
// master shard, so per-parameter weight decay and LR scale (ParamPlan) are
// honoured without grouping parameters.
//
// The per-unit engine (gather, prefetch, reshard, gradients as shards with a
// bounded pool of unit buckets reduce-scattered in place) is core's
// ft::FlatParamGroup (ft/parallel/flat_param_group.h); this class picks its policy.
// All-reduced policies (zero1, NO_SHARD) keep DDP's ft::GradBuffer: full
// gradients, as ZeRO-1 prescribes. The update is ft::update_from_grads
// (ft/parallel/param_sync.h) over the shard's slots, as for every other strategy.
//
// Precision: master shards and optimizer state stay fp32; autocast computes
// in bf16/fp16 from them. Communication stays fp32 (ft::Comm widens 16-bit
// tensors on Gloo anyway, so a 16-bit wire would save nothing on CPU).
// fp16: grads are unscaled on the shard and found_inf is OR-ed across the
// shard group before the loss scaler updates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ft/parallel/flat_param_group.h"
#include "ft/parallel/flat_shard.h"
#include "ft/optim/optim.h"
#include "ft/parallel/param_sync.h"
#include "ft/parallel/abilities.h"
#include "ft/parallel/strategy.h"
#include "ft/parallel/state_placement.h"

namespace ft {

class DeviceMesh;
class GradBuffer;

/// DeepSpeed's stage numbering.
enum class ZeroStage { kDisabled = 0, kOptimizerStates = 1, kGradients = 2, kWeights = 3 };

/// FSDP's sharding modes.
enum class FsdpSharding { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };

/// Everything that makes zero1/2/3 and the FSDP modes differ: the
/// per-unit engine's options (params_sharded, grads_sharded, prefetch,
/// limit_all_gathers, grad_buckets, accumulation, shard_word_table;
/// ft::FlatParamGroupOptions documents them) and what only the strategy
/// decides. build_group() hands the engine its part as it is.
struct ShardingPolicy : FlatParamGroupOptions {
  std::string name = "zero";          ///< registered name, for messages
  bool shard_optimizer = true;        ///< false: every rank holds all optimizer state (NO_SHARD)
  int64_t bucket_bytes = 25LL << 20;  ///< GradBuffer bucket size for all-reduced grads (option bucket_mb)
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
///   grad_buckets       (int >= 1, default 2) zero2/3: units' full gradients alive at once
///   grad_accumulation  (reduce | no_sync, default reduce) zero2/3: see ShardingPolicy::accumulation
///   shard_word_table   (true|false, default true) zero2/3: see ShardingPolicy::shard_word_table
/// Errors (ft::Error) name `strategy.options.<key>`; unknown keys list the known ones.
ShardingPolicy zero_policy_from_options(ZeroStage stage, const std::map<std::string, std::string>& options);

/// strategy.options for fsdp (all optional):
///   sharding_strategy  FULL_SHARD (default) | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | _HYBRID_SHARD_ZERO2
///   shard_group_size   (int, hybrid modes only; default: the ranks per host) ranks that shard one copy
///   forward_prefetch   (true|false, default true)
///   backward_prefetch  (BACKWARD_PRE (default) | NONE; true/false accepted)
///   limit_all_gathers  (int >= 0, default 1), grad_buckets, grad_accumulation, shard_word_table,
///                      bucket_mb (NO_SHARD) as for zero.
/// `world_size` and `local_world_size`: the job's, for the hybrid modes' group size.
ShardingPolicy fsdp_policy_from_options(const std::map<std::string, std::string>& options, int world_size,
                                        int local_world_size);

class ShardedStrategy : public Strategy, public ShardedCheckpointing, public MemoryModel {
 public:
  explicit ShardedStrategy(ShardingPolicy policy);
  ~ShardedStrategy() override;

  /// The policy `options` make of this strategy on `world_size` ranks
  /// (`local_world_size` per host); the base class's is the constructor's.
  /// setup() and the memory theory both read it, so they cannot drift.
  virtual ShardingPolicy read_policy(const std::map<std::string, std::string>& options, int world_size,
                                     int local_world_size) const;

  /// MemoryModel (sharded_theory.cpp): ZeRO's formula of the policy's stage,
  /// and what this engine holds: units padded to whole shards, the bucket
  /// pool, the gathered units, the row-split word table.
  std::string memory_formula(const std::map<std::string, std::string>& options) const override;
  int64_t theory_bytes(const TheoryInputs& in) const override;
  std::vector<std::string> memory_options() const override;
  std::optional<CandidateEstimate> estimate(const PlanInputs& in, const EncoderModel& model) const override;

  void setup(std::shared_ptr<EncoderModel> model, const OptimizerSpec& optimizer,
             const ParamPlan& plan, StrategyContext& ctx) override;
  at::Tensor forward(const Batch& batch) override;
  void backward(const at::Tensor& loss, bool sync_grads) override;
  StepResult step(const StepOptions& options) override;
  TensorList model_state() override;
  OptimizerState optimizer_state() override;
  void load_state(const TensorList& model, const OptimizerState* optimizer) override;
  /// params: persistent flat storage (shards, or full buffers) plus, for
  /// sharded params, the most full-unit bytes gathered at once so far;
  /// grads: shards + the bucket pool (sharded grads) or the GradBuffer;
  /// optimizer: TensorOptimizer state.
  StateBytes state_bytes() const override;
  void teardown() override;
  void save_sharded(const std::filesystem::path& dir) override;

  const ShardingPolicy& policy() const { return policy_; }
  /// The units' flat parameters (for tests and tools).
  const std::vector<std::unique_ptr<FlatParam>>& flat_params() const { return group_->units(); }
  /// The per-unit engine (for tests and tools).
  const FlatParamGroup& group() const { return *group_; }

 private:
  struct SlotRef {
    int unit;
    int entry;
    FlatPiece piece;
  };

  void build_group(const ParamPlan& plan);
  void build_grad_buffer();
  std::vector<at::Tensor> slot_grads() const;
  int shard_world() const;
  int shard_rank() const;
  Comm& shard_comm();  // where parameters and optimizer state are sharded
  bool writes_shards() const;  // this rank's shard is not a replica's copy
  StatePlacement placement(size_t unit, int buffer);  // sharded_state.cpp
  StatePlacement whole_values(size_t unit);           // a unit's full buffer, entry by entry
  const std::vector<std::unique_ptr<FlatParam>>& units() const { return group_->units(); }

  ShardingPolicy policy_;
  std::unique_ptr<DeviceMesh> mesh_;  // hybrid sharding only
  std::unique_ptr<FlatParamGroup> group_;
  std::unique_ptr<SplitOptimizer> optimizer_;
  std::vector<SlotRef> slots_;               // slots_[i] describes optimizer slot i
  std::unique_ptr<GradBuffer> grad_buffer_;  // all-reduced policies; null when nothing trains
};

}  // namespace ft
