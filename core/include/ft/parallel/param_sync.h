// Whole-model synchronisation that strategies splitting the model share
// (pipeline, tensor): one flat collective each, fp32 on the wire.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/base/types.h"
#include "ft/optim/optim.h"

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

/// The optimizer of a strategy whose ranks hold disjoint parts of the model
/// (flat shards, tensor slices, pipeline stages), with the one reduction of
/// the global gradient norm they all need: a persistent double all-reduced
/// over the group that splits the parameters, so a step allocates nothing.
/// A TensorOptimizer otherwise (state, buffers, load_state).
class SplitOptimizer : public TensorOptimizer {
 public:
  SplitOptimizer(const OptimizerSpec& spec, std::vector<OptimSlot> slots);

  /// update_from_grads over this rank's `grads`, with the overflow flag
  /// OR-ed over `group` and the global norm's square: `split` (the parts
  /// this rank alone holds) summed over `group`, plus `whole` (the parts
  /// every rank of the group holds alike) once. `around` runs the norm's
  /// all-reduce (the pipeline counts the wait as its bubble); null group or
  /// a group of one: no communication.
  StepResult update(const std::vector<at::Tensor>& grads, Precision& precision, const StepOptions& options,
                    Comm* group, const std::vector<at::Tensor>& split, const std::vector<at::Tensor>& whole = {},
                    const std::function<void(const std::function<void()>&)>& around = {});

 private:
  at::Tensor norm_buf_;
};

/// Model-state bytes of a rank holding `params` whole: their values, the
/// grads they have, and the optimizer's state.
StateBytes held_state_bytes(const std::vector<at::Tensor>& params, const TensorOptimizer& optimizer);

}  // namespace ft
