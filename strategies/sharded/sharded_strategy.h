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
//
// Layout: one FlatParam per model unit (ft/flat_shard.h), split into equal
// shards. The optimizer (ft::TensorOptimizer) runs over this rank's pieces
// of each parameter: one slot per (parameter ∩ shard), a view into the fp32
// master shard, so per-parameter weight decay and LR scale (ParamPlan) are
// honoured without grouping parameters.
//
// Gradients:
//  - all-reduced policies reuse ft::GradBuffer (DDP's bucketed all-reduce,
//    overlapped with backward): full grads are kept, as ZeRO-1 prescribes.
//  - reduce-scattered policies do NOT use GradBuffer: it keeps the full
//    gradient buffer alive as every `.grad`, which is exactly the 4Ψ ZeRO-2
//    removes, and its buckets (reverse order, by bytes) do not line up with
//    the shards. Instead a post-accumulate hook per parameter notices when a
//    whole unit's grads are ready, copies them into a padded staging buffer,
//    frees the `.grad`s and launches an async reduce-scatter (Avg) into the
//    unit's persistent grad shard. Units launch strictly last to first, so
//    every rank issues collectives in the same order.
//  - Accumulation micro-batches (sync_grads=false) accumulate full local
//    `.grad`s with no communication (like DDP's no_sync); the sync
//    micro-batch reduces the sum. This holds for zero3 too: its memory
//    between accumulation micro-batches includes the full grads.
//
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
#include <deque>
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

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ft {

class GradBuffer;

/// DeepSpeed's stage numbering.
enum class ZeroStage { kDisabled = 0, kOptimizerStates = 1, kGradients = 2, kWeights = 3 };

/// FSDP's sharding modes. kHybridShard is refused (see ShardingPolicy::fsdp).
enum class FsdpSharding { kFullShard, kShardGradOp, kNoShard, kHybridShard };

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
  int max_inflight_reduces = 2;       ///< reduce-scatters in flight before the oldest is waited on

  static ShardingPolicy zero(ZeroStage stage);
  /// Throws ft::Error for kHybridShard (needs per-node process groups).
  static ShardingPolicy fsdp(FsdpSharding mode, int nnodes);
};

/// strategy.options for zero1/zero2/zero3 (all optional):
///   bucket_mb          (> 0, default 25)  zero1: GradBuffer bucket size for the all-reduce
///   prefetch           (true|false, default true) zero3: gather the next unit ahead (forward and backward)
///   limit_all_gathers  (int >= 0, default 1) zero3: prefetched all-gathers in flight at most
///   max_inflight_reduces (int >= 1, default 2) zero2/3: reduce-scatters in flight before waiting
/// Errors (ft::Error) name `strategy.options.<key>`; unknown keys list the known ones.
ShardingPolicy zero_policy_from_options(ZeroStage stage, const std::map<std::string, std::string>& options);

/// strategy.options for fsdp (all optional):
///   sharding_strategy  FULL_SHARD (default) | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD (refused)
///   forward_prefetch   (true|false, default true)
///   backward_prefetch  (BACKWARD_PRE (default) | NONE; true/false accepted)
///   limit_all_gathers  (int >= 0, default 1), max_inflight_reduces, bucket_mb (NO_SHARD) as for zero.
ShardingPolicy fsdp_policy_from_options(const std::map<std::string, std::string>& options, int nnodes);

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
  /// "gathered unit in flight"); grads: grad shards or the GradBuffer;
  /// optimizer: TensorOptimizer state.
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
  void on_grad_accumulated(int unit);
  void on_backward_end();

 protected:
  /// For plugins that parse strategy.options in setup() before calling ours.
  void set_policy(ShardingPolicy policy) { policy_ = std::move(policy); }

 private:
  class Runner;
  class GradHook;
  struct SlotRef {
    int unit;
    int entry;
    FlatPiece piece;
  };
  struct InflightReduce {
    int unit;
    Work work;
    at::Tensor staging, out;
  };

  void build_units(const ParamPlan& plan);
  void install_grad_hooks();
  void prefetch(int unit);
  void reshard_unit(int unit);
  void launch_ready_reduces();
  void reshard_if_backward_done(int unit);
  void launch_reduce(int unit);
  void wait_oldest_reduce();
  void finish_grad_sync();
  std::vector<at::Tensor> slot_grads() const;
  void note_gathered_bytes();
  int shard_world() const;
  int shard_rank() const;

  ShardingPolicy policy_;
  StrategyContext* ctx_ = nullptr;
  std::vector<std::unique_ptr<FlatParam>> units_;
  std::unique_ptr<TensorOptimizer> optimizer_;
  std::vector<SlotRef> slots_;          // slots_[i] describes optimizer slot i
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<GradBuffer> grad_buffer_;  // all-reduced policies
  std::vector<at::Tensor> grad_shards_;      // reduce-scattered policies: one per unit

  // Backward bookkeeping (reduce-scattered and/or sharded-params policies).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<int> trainable_count_;  // per unit
  std::vector<int> pending_;          // per unit: grads not yet accumulated in this backward
  std::vector<bool> ready_;           // per unit: all grads accumulated in this backward
  std::vector<bool> has_frozen_;      // per unit: some weight needs no grad but backward still reads it
  std::vector<bool> input_grad_done_; // per unit: the grad of its input is complete in this backward
  int next_reduce_ = 0;               // index into reduce order (last unit first)
  bool sync_ = true;                  // this backward reduces
  bool callback_queued_ = false;
  std::deque<InflightReduce> inflight_;
  int prefetched_ = 0;                // gathers issued ahead of use, not yet consumed
  std::vector<bool> prefetched_unit_;
  int64_t peak_full_bytes_ = 0;
};

}  // namespace ft
