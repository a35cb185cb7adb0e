// `zero1` / `zero2` / `zero3` / `fsdp`: one plugin, one engine
// (ShardedStrategy, sharded_strategy.h), four names. A name is only a
// policy, refined by its strategy.options at setup.
#include <map>
#include <string>

#include "ft/plugin/plugin.h"
#include "sharded_strategy.h"

namespace {

class ZeroStrategy final : public ft::ShardedStrategy {
 public:
  explicit ZeroStrategy(ft::ZeroStage stage) : ShardedStrategy(ft::ShardingPolicy::zero(stage)), stage_(stage) {}

  ft::ShardingPolicy read_policy(const std::map<std::string, std::string>& options, int, int) const override {
    return ft::zero_policy_from_options(stage_, options);
  }

 private:
  ft::ZeroStage stage_;
};

class FsdpStrategy final : public ft::ShardedStrategy {
 public:
  FsdpStrategy() : ShardedStrategy(ft::ShardingPolicy::fsdp(ft::FsdpSharding::kFullShard)) {}

  ft::ShardingPolicy read_policy(const std::map<std::string, std::string>& options, int world_size,
                                 int local_world_size) const override {
    return ft::fsdp_policy_from_options(options, world_size, local_world_size);
  }
};

}  // namespace

FT_STRATEGY_PLUGIN("sharded", "1.0.0",
                   FT_STRATEGY("zero1", "ZeRO-1: optimizer state sharded in equal flat shards",
                               [] { return new ZeroStrategy(ft::ZeroStage::kOptimizerStates); }),
                   FT_STRATEGY("zero2", "ZeRO-2: optimizer state and gradients sharded (reduce-scatter)",
                               [] { return new ZeroStrategy(ft::ZeroStage::kGradients); }),
                   FT_STRATEGY("zero3", "ZeRO-3: parameters sharded too, gathered per unit with prefetch",
                               [] { return new ZeroStrategy(ft::ZeroStage::kWeights); }),
                   FT_STRATEGY("fsdp", "FSDP-like flat shards per unit (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)",
                               [] { return new FsdpStrategy(); }))
