// PipelineStrategy: full, HF-named checkpoint state assembled from the
// stages (each stage's units broadcast from it, through StatePlacement),
// loading full state saved by any strategy, and the bytes this stage holds.
#include <map>

#include <ATen/ATen.h>

#include "ft/io/saved_state.h"
#include "ft/parallel/param_sync.h"
#include "ft/parallel/state_placement.h"
#include "pipeline_strategy.h"

namespace ft {

// Every unit's tensors, whole on the stages that hold it and saved from its
// owner: the values (`optimizer` false), or every optimizer buffer kind of
// the trainable ones, per parameter. requires_grad is set from the same plan
// on every rank, so all agree on the list.
StatePlacement PipelineStrategy::placement(bool optimizer) {
  std::map<std::string, size_t> slot_of;
  for (size_t i = 0; i < optimizer_->slots().size(); ++i) slot_of[optimizer_->slots()[i].name] = i;
  const auto kinds = optimizer_->buffer_names();
  StatePlacement out(pipe());
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u) {
    const Placement where = Placement::stage(owner_of(u));
    for (const auto& [name, t] : unit_params_[static_cast<size_t>(u)]) {
      if (!optimizer) {
        out.add(name, t.sizes().vec(), holds(u) ? t : at::Tensor(), where);
        continue;
      }
      if (!t.requires_grad()) continue;
      auto slot = slot_of.find(name);
      for (size_t k = 0; k < kinds.size(); ++k) {
        out.add(name + "." + kinds[k], t.sizes().vec(),
                slot == slot_of.end() ? at::Tensor() : optimizer_->buffers()[slot->second][k], where);
      }
    }
  }
  return out;
}

TensorList PipelineStrategy::model_state() { return placement(false).gather(); }

OptimizerState PipelineStrategy::optimizer_state() {
  OptimizerState s;
  s.step = optimizer_->step_count();
  s.tensors = placement(true).gather();
  return s;
}

void PipelineStrategy::load_state(const TensorList& model, const OptimizerState* optimizer) {
  placement(false).load(SavedTensors::weights(model), "checkpoint", ShapeCheck::kShape);
  if (!optimizer) return;
  OptimizerState own;
  own.step = optimizer->step;
  own.tensors = placement(true).parts(SavedTensors::optimizer(*optimizer), "checkpoint optimizer state",
                                      ShapeCheck::kElements);
  optimizer_->load_state(own, "checkpoint optimizer state");
}

StateBytes PipelineStrategy::state_bytes() const {
  std::vector<at::Tensor> own;
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u)
    if (holds(u))
      for (const auto& [name, t] : unit_params_[static_cast<size_t>(u)]) own.push_back(t);
  return held_state_bytes(own, *optimizer_);
}

}  // namespace ft
