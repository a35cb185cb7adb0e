// Whole-model synchronisation that strategies splitting the model share
// (pipeline, tensor): one flat collective each, fp32 on the wire.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/base/types.h"

namespace ft {

class Comm;
class Precision;
class TensorOptimizer;

/// Every tensor takes `root`'s values (copied in place). Collective over
/// `comm`; the tensors must have the same shapes on every rank.
void broadcast_tensors(Comm& comm, const std::vector<at::Tensor>& tensors, int root);

/// Each parameter's .grad becomes the average over `comm` (a missing grad
/// counts as zeros and is created). Collective; no-op on a world of one.
void average_grads(Comm& comm, const std::vector<at::Tensor>& params);
/// As average_grads, but the sum: for gradients each rank holds a share of.
void sum_grads(Comm& comm, const std::vector<at::Tensor>& params);

/// The update once this rank's gradients are complete: unscale them (fp16)
/// with the overflow flag OR-ed over `overflow_comm` (the ranks holding
/// other parts of the model; null when every rank holds the same grads), then clip to the global norm
/// sqrt(global_norm_squared()) and step; zero the grads and update the loss
/// scale either way. The caller decides what the global norm sums.
StepResult update_from_grads(const std::vector<at::Tensor>& grads, Precision& precision, TensorOptimizer& optimizer,
                             const StepOptions& options, Comm* overflow_comm,
                             const std::function<double()>& global_norm_squared);

/// Model-state bytes of a rank holding `params` whole: their values, the
/// grads they have, and the optimizer's state.
StateBytes held_state_bytes(const std::vector<at::Tensor>& params, const TensorOptimizer& optimizer);

}  // namespace ft
