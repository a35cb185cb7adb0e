#include "ft/parallel/strategy.h"

#include "ft/parallel/abilities.h"

#include "ft/model/model.h"
#include "ft/optim/param_plan.h"

namespace ft {

// Out of line on purpose: as Strategy's first non-inline virtual it anchors
// the vtable and type_info in ft_core, so every plugin shares one
// ft::Strategy type (dynamic_cast and exceptions across the .so boundary).
void Strategy::set_training(bool training) {
  if (model_) model_->train(training);
}

void Strategy::adopt(std::shared_ptr<EncoderModel> model, const ParamPlan& plan,
                     StrategyContext& ctx) {
  ctx_ = &ctx;
  model_ = std::move(model);
  model_->to(ctx.device);
  apply_trainable(*model_, plan);
}

ShardedCheckpointing::~ShardedCheckpointing() = default;
DataParallelGroup::~DataParallelGroup() = default;
MemoryModel::~MemoryModel() = default;
OneProcess::~OneProcess() = default;

}  // namespace ft
