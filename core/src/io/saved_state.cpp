#include "ft/io/saved_state.h"

#include <string_view>
#include <utility>

#include "ft/base/error.h"

namespace ft {

std::string hf_name(const std::string& saved_name) {
  constexpr std::string_view kPrefix = "module.";
  return saved_name.rfind(kPrefix, 0) == 0 ? saved_name.substr(kPrefix.size()) : saved_name;
}

SavedTensors::SavedTensors(const TensorList& tensors, bool strip_module, std::string missing)
    : missing_(std::move(missing)) {
  for (const auto& [name, t] : tensors) by_name_[strip_module ? hf_name(name) : name] = &t;
}

SavedTensors SavedTensors::weights(const TensorList& model) {
  return SavedTensors(model, /*strip_module=*/true, "checkpoint: missing tensor");
}

SavedTensors SavedTensors::optimizer(const OptimizerState& state) {
  return SavedTensors(state.tensors, /*strip_module=*/false, "checkpoint optimizer state: no");
}

const at::Tensor& SavedTensors::at(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) fail("{} '{}'", missing_, name);
  return *it->second;
}

}  // namespace ft
