// `fsdp`: FSDP-like flat parameters per unit with sharding modes FULL_SHARD
// (default), SHARD_GRAD_OP and NO_SHARD (strategy.options.sharding_strategy).
// Same engine as zero3 (ft::ShardedStrategy); only the policy differs.
#include "ft/comm.h"
#include "ft/plugin.h"
#include "ft/zero_strategy.h"

namespace {

class FsdpStrategy final : public ft::ShardedStrategy {
 public:
  FsdpStrategy() : ShardedStrategy(ft::ShardingPolicy::fsdp(ft::FsdpSharding::kFullShard, 1)) {}

  void setup(std::shared_ptr<ft::BertForSequenceClassification> model, const ft::OptimizerSpec& optimizer,
             const ft::ParamPlan& plan, ft::StrategyContext& ctx) override {
    const auto& env = ctx.comm->env();
    const int nnodes = env.local_world_size > 0 ? env.world_size / env.local_world_size : 1;
    set_policy(ft::fsdp_policy_from_options(ctx.options, nnodes));
    ShardedStrategy::setup(std::move(model), optimizer, plan, ctx);
  }
};

}  // namespace

FT_STRATEGY_PLUGIN("fsdp", "1.0.0",
                   FT_STRATEGY("fsdp", "FSDP-like flat shards per unit (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD)",
                               [] { return new FsdpStrategy(); }))
