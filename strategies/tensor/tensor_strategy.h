// TensorStrategy: Megatron-LM tensor parallelism of the encoder layers.
//
// In each layer of a tensor-parallel group of t ranks (rank r):
//   query, key, value   column-parallel: rows of heads r*H/t .. (r+1)*H/t,
//                       so attention runs on this rank's heads only
//   attention.output    row-parallel: the matching input columns; partial
//                       products summed over the group (g), then the bias
//   intermediate.dense  column-parallel: rows r*I/t .. (r+1)*I/t
//   output.dense        row-parallel, summed (g), then the bias
// f (identity forward, gradient summed over the group backward) feeds each
// column-parallel block, so one all-reduce runs per block in forward (g) and
// one in backward (f). The word embeddings are vocab-parallel (rank r looks
// up its rows, g sums); a tied MLM decoder scores rank r's slice of the
// vocabulary with them and the slices are gathered. Position and type
// embeddings, LayerNorms and the rest of the heads are replicated: their inputs
// and gradients are the same on every rank of the group, so they need no
// communication and their updates agree.
//
// Ranks form a DeviceMesh {dp: world / t, tp: t} (tp innermost: its
// all-reduces are the most frequent, so they stay on neighbouring ranks).
// The Trainer shards data over dp; dp replicas average all gradients.
// Dropout: ranks of a tensor-parallel group share the data-parallel rank's
// seed, so replicated activations get the same masks.
//
// Checkpoints are full and HF-named: sliced tensors are all-gathered along
// the dimension they were cut on.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ft/parallel/abilities.h"
#include "ft/comm/comm.h"
#include "ft/comm/device_mesh.h"
#include "ft/model/model.h"
#include "ft/optim/optim.h"
#include "ft/parallel/param_sync.h"
#include "ft/parallel/strategy.h"
#include "ft/parallel/state_placement.h"

namespace ft {

/// strategy.options for tensor (all optional):
///   tp_size  (int >= 1, default: the world size) ranks per tensor-parallel
///            group; world / tp_size groups are data-parallel replicas
int tensor_parallel_size_from(const std::map<std::string, std::string>& options, int world_size);

class TensorStrategy final : public Strategy, public DataParallelGroup, public MemoryModel {
 public:
  /// MemoryModel (tensor_theory.cpp): the cut parameters Ψs split over the
  /// group, the rest Ψr whole; `auto` weighs one group of all N ranks.
  std::string memory_formula(const std::map<std::string, std::string>& options) const override;
  int64_t theory_bytes(const TheoryInputs& in) const override;
  std::vector<std::string> memory_options() const override { return {"tp_size"}; }
  std::optional<CandidateEstimate> estimate(const PlanInputs& in, const EncoderModel& model) const override;

  void setup(std::shared_ptr<EncoderModel> model, const OptimizerSpec& optimizer,
             const ParamPlan& plan, StrategyContext& ctx) override;
  at::Tensor forward(const Batch& batch) override;
  void backward(const at::Tensor& loss, bool sync_grads) override;
  StepResult step(const StepOptions& options) override;
  TensorList model_state() override;
  OptimizerState optimizer_state() override;
  void load_state(const TensorList& model, const OptimizerState* optimizer) override;
  StateBytes state_bytes() const override;
  Comm& data_comm() override { return mesh_->comm("dp"); }

 private:
  Comm& tp() { return mesh_->comm("tp"); }
  void report_layout(int64_t tp_size) const;
  StatePlacement placement(bool optimizer);  // every weight or optimizer buffer, sliced or whole

  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Comm> head_comm_;  // ranks sharing an attention head, when tp_size > heads
  std::map<std::string, TensorCut> split_;  // sliced parameter -> how it is cut
  std::set<std::string> partial_;     // whole parameters whose gradients are summed over the group
  std::vector<at::Tensor> partial_grads_;
  std::unique_ptr<SplitOptimizer> optimizer_;
  std::vector<at::Tensor> trainable_;
  std::vector<bool> sliced_;  // per trainable_: its squared norm is summed over the group
};

}  // namespace ft
