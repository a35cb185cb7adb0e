// PipelineStrategy: full, HF-named checkpoint state assembled from the
// stages (each unit broadcast from its owner), loading full state saved by
// any strategy, and the bytes this stage holds.
#include <c10/core/GradMode.h>
#include <map>

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/parallel/param_sync.h"
#include "ft/io/saved_state.h"
#include "pipeline_strategy.h"

namespace ft {

namespace {

// One flat fp32 broadcast of `parts` from stage `owner` of the pipeline: the
// owner's values in, everyone's copies out (CPU).
std::vector<at::Tensor> broadcast_parts(Comm& pipe, int owner, const std::vector<at::Tensor>& parts,
                                        const std::vector<std::vector<int64_t>>& shapes) {
  int64_t n = 0;
  for (const auto& s : shapes) n += c10::multiply_integers(s);
  at::Tensor flat;
  if (pipe.rank() == owner) {
    std::vector<at::Tensor> flats;
    for (const auto& p : parts) flats.push_back(p.detach().to(at::kCPU, at::kFloat).reshape({-1}));
    flat = flats.empty() ? at::empty({0}, at::kFloat) : at::cat(flats);
  } else {
    flat = at::empty({n}, at::kFloat);
  }
  if (pipe.world_size() > 1 && n > 0) pipe.broadcast(flat, owner);
  std::vector<at::Tensor> out;
  int64_t off = 0;
  for (const auto& s : shapes) {
    const int64_t k = c10::multiply_integers(s);
    out.push_back(flat.narrow(0, off, k).view(s).clone());
    off += k;
  }
  return out;
}

}  // namespace

TensorList PipelineStrategy::model_state() {
  c10::NoGradGuard no_grad;
  TensorList out;
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u) {
    const auto& params = unit_params_[static_cast<size_t>(u)];
    std::vector<at::Tensor> mine;
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& [name, t] : params) {
      mine.push_back(t);
      shapes.push_back(t.sizes().vec());
    }
    auto full = broadcast_parts(pipe(), owner_of(u), mine, shapes);
    for (size_t i = 0; i < params.size(); ++i) out.emplace_back(params[i].first, std::move(full[i]));
  }
  return out;
}

OptimizerState PipelineStrategy::optimizer_state() {
  c10::NoGradGuard no_grad;
  OptimizerState mine = optimizer_->state();
  std::map<std::string, at::Tensor> by_name(mine.tensors.begin(), mine.tensors.end());
  const auto kinds = optimizer_->buffer_names();
  OptimizerState s;
  s.step = optimizer_->step_count();
  // Every rank knows which parameters train (requires_grad is set from the
  // same plan everywhere), so all agree on each unit's buffer list.
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u) {
    std::vector<std::string> names;
    std::vector<at::Tensor> parts;
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& [name, t] : unit_params_[static_cast<size_t>(u)]) {
      if (!t.requires_grad()) continue;
      for (const auto& k : kinds) {
        const std::string key = name + "." + k;
        names.push_back(key);
        shapes.push_back(t.sizes().vec());
        if (owns(u)) parts.push_back(by_name.at(key));
      }
    }
    auto full = broadcast_parts(pipe(), owner_of(u), parts, shapes);
    for (size_t i = 0; i < names.size(); ++i) s.tensors.emplace_back(names[i], std::move(full[i]));
  }
  return s;
}

void PipelineStrategy::load_state(const TensorList& model, const OptimizerState* optimizer) {
  c10::NoGradGuard no_grad;
  const SavedTensors weights = SavedTensors::weights(model);
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u) {
    if (!holds(u)) continue;
    for (const auto& [name, t] : unit_params_[static_cast<size_t>(u)]) {
      const at::Tensor& w = weights.at(name);
      if (w.sizes() != t.sizes()) {
        fail("checkpoint: '{}' has shape [{}], the model needs [{}]", name, fmt::join(w.sizes(), ", "),
             fmt::join(t.sizes(), ", "));
      }
      t.detach().copy_(w);
    }
  }
  if (!optimizer) return;
  const SavedTensors saved = SavedTensors::optimizer(*optimizer);
  OptimizerState own;
  own.step = optimizer->step;
  for (const auto& slot : optimizer_->slots()) {
    for (const auto& k : optimizer_->buffer_names()) {
      const std::string key = slot.name + "." + k;
      own.tensors.emplace_back(key, saved.at(key));
    }
  }
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
