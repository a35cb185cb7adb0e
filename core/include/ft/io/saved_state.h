// What Strategy::load_state() receives, looked up by name: the saved
// weights by HF name and the saved optimizer state by "<param>.<buffer>",
// with one error per missing tensor, worded the same for every strategy.
#pragma once

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "ft/base/types.h"

namespace ft {

/// The HF name of a saved tensor: a DDP-style "module." prefix (a state
/// dict saved from a wrapped model) is dropped, as
/// EncoderModel::load_weights does.
std::string hf_name(const std::string& saved_name);

/// Saved tensors by name. Holds pointers into the list it was made from,
/// which must outlive it.
class SavedTensors {
 public:
  /// Weights by hf_name(); at() throws "checkpoint: missing tensor '<name>'".
  static SavedTensors weights(const TensorList& model);
  /// Optimizer state by key; at() throws "checkpoint optimizer state: no '<key>'".
  static SavedTensors optimizer(const OptimizerState& state);

  /// The tensor saved as `name`; ft::Error (see above) when there is none.
  const at::Tensor& at(const std::string& name) const;

 private:
  SavedTensors(const TensorList& tensors, bool strip_module, std::string missing);

  std::map<std::string, const at::Tensor*> by_name_;
  std::string missing_;  // the error's text before the quoted name
};

}  // namespace ft
