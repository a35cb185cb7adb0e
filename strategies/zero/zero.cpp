// `zero1` / `zero2` / `zero3`: DeepSpeed-style ZeRO stages written in ft.
// The engine is ft::ShardedStrategy (core/include/ft/zero_strategy.h); a
// stage is only a policy, read with its strategy.options at setup.
#include "ft/plugin.h"
#include "ft/zero_strategy.h"

namespace {

class ZeroStrategy final : public ft::ShardedStrategy {
 public:
  explicit ZeroStrategy(ft::ZeroStage stage) : ShardedStrategy(ft::ShardingPolicy::zero(stage)), stage_(stage) {}

  void setup(std::shared_ptr<ft::BertForSequenceClassification> model, const ft::OptimizerSpec& optimizer,
             const ft::ParamPlan& plan, ft::StrategyContext& ctx) override {
    set_policy(ft::zero_policy_from_options(stage_, ctx.options));
    ShardedStrategy::setup(std::move(model), optimizer, plan, ctx);
  }

 private:
  ft::ZeroStage stage_;
};

}  // namespace

FT_STRATEGY_PLUGIN("zero", "1.0.0",
                   FT_STRATEGY("zero1", "ZeRO-1: optimizer state sharded in equal flat shards",
                               [] { return new ZeroStrategy(ft::ZeroStage::kOptimizerStates); }),
                   FT_STRATEGY("zero2", "ZeRO-2: optimizer state and gradients sharded (reduce-scatter)",
                               [] { return new ZeroStrategy(ft::ZeroStage::kGradients); }),
                   FT_STRATEGY("zero3", "ZeRO-3: parameters sharded too, gathered per unit with prefetch",
                               [] { return new ZeroStrategy(ft::ZeroStage::kWeights); }))
