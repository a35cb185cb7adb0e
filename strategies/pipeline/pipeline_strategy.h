// PipelineStrategy: the model cut by units (embeddings, encoder layers, head)
// into contiguous stages, one per rank of a pipeline group, with the
// accumulation micro-batches (train.grad_accum) flowing through them.
//
//   stage s owns units [first, end): only their parameters, gradients and
//   optimizer state live on its rank; the other units' storage is freed.
//   forward: a UnitRunner runs the owned units; the stage before sends the
//     activation entering `first` (fp32, point to point), this stage sends
//     the one leaving end-1 to the next. The last stage computes the logits.
//     In training the other stages return zeros of the logits' shape (waiting
//     for the loss would serialise the pipeline; holds_loss() keeps them out of
//     the logged loss). In evaluation the last stage broadcasts its logits to
//     the pipeline group, so every stage returns the same ones and scores
//     them alike.
//   backward: deferred by the schedule. The last stage back-propagates the
//     loss; every other stage receives the gradient of the activation it
//     sent and back-propagates that; each sends the gradient of the
//     activation it received to the stage before.
//     gpipe: every forward of the step first, all backwards at the last
//            micro-batch (activations of all m micro-batches kept).
//     1f1b:  stage s keeps at most p-1-s micro-batches waiting for their
//            backward (the last stage none), so it alternates one forward
//            and one backward after a warm-up of p-1-s forwards.
//   step: data-parallel replicas of a stage average its gradients (dp
//     groups), the global grad norm sums the stages' squared norms (pp
//     group), then each stage updates its own parameters.
//   tied weights: the last stage keeps a replica of the units its own read
//     (the embeddings a masked-LM decoder reuses); the first and last stages
//     sum those gradients each step, so both copies update alike.
//
// Ranks form a DeviceMesh {pp: stages, dp: world / stages} (pp outermost,
// as Megatron orders them): with 4 ranks and 2 stages, pipelines {0,2}
// {1,3}, data-parallel groups {0,1} {2,3}. Data is sharded over dp.
//
// Checkpoints stay full and HF-named: model_state() and optimizer_state()
// broadcast each unit from its owner, so any other strategy resumes them.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ft/parallel/abilities.h"
#include "ft/comm/comm.h"
#include "ft/comm/device_mesh.h"
#include "ft/optim/optim.h"
#include "ft/parallel/param_sync.h"
#include "ft/parallel/strategy.h"
#include "ft/parallel/state_placement.h"

namespace ft {

enum class PipeSchedule { kGPipe, kOneFOneB };

/// strategy.options for pipeline (all optional):
///   stages    (int >= 1, default: the world size) pipeline stages; the rest of
///             the world (world / stages) are data-parallel replicas
///   schedule  1f1b (default) | gpipe
///   balance   compute (default: about equal matmul work, i.e. the 2-D weights
///             outside the embedding tables, which are lookups) | time (each
///             unit's forward and backward timed at setup on a 4 x 128-token
///             micro-batch, the slowest rank's times) | parameters (about
///             equal memory) | units (about equal unit count)
/// The micro-batches per step are train.grad_accum (DeepSpeed's rule).
enum class StageBalance { kCompute, kTime, kParameters, kUnits };

struct PipelineOptions {
  int stages = 1;
  PipeSchedule schedule = PipeSchedule::kOneFOneB;
  StageBalance balance = StageBalance::kCompute;
};
PipelineOptions pipeline_options_from(const std::map<std::string, std::string>& options, int world_size);

/// What balance_stages() evens out, per unit (unit 0 is the embeddings).
std::vector<int64_t> unit_costs(const std::vector<TensorList>& units, StageBalance balance);

/// Microseconds of each unit's forward and backward on a synthetic
/// micro-batch of `rows` x `seq_len` tokens (the best of 3 passes, the first of which also warms up; the maximum
/// over `comm`'s ranks so that all split alike). Collective.
std::vector<int64_t> measured_unit_costs(EncoderModel& model, Comm& comm, c10::Device device,
                                         int64_t rows, int64_t seq_len);

/// Contiguous split of `sizes` (one per unit) into `stages` non-empty parts
/// that minimises the largest part; returns the first unit of each stage
/// followed by sizes.size().
std::vector<int> balance_stages(const std::vector<int64_t>& sizes, int stages);

class PipelineStrategy final : public Strategy, public DataParallelGroup, public MemoryModel {
 public:
  PipelineStrategy();
  ~PipelineStrategy() override;

  /// MemoryModel (pipeline_theory.cpp): equal stages of 16Ψ/S; `auto`
  /// weighs S = N stages when the model has at least N units.
  std::string memory_formula(const std::map<std::string, std::string>& options) const override;
  int64_t theory_bytes(const TheoryInputs& in) const override;
  std::vector<std::string> memory_options() const override { return {"stages"}; }
  std::optional<CandidateEstimate> estimate(const PlanInputs& in, const EncoderModel& model) const override;

  void setup(std::shared_ptr<EncoderModel> model, const OptimizerSpec& optimizer,
             const ParamPlan& plan, StrategyContext& ctx) override;
  at::Tensor forward(const Batch& batch) override;
  void backward(const at::Tensor& loss, bool sync_grads) override;
  StepResult step(const StepOptions& options) override;
  TensorList model_state() override;
  OptimizerState optimizer_state() override;
  void load_state(const TensorList& model, const OptimizerState* optimizer) override;
  /// Only this stage's units: parameters, their grads, their optimizer state.
  StateBytes state_bytes() const override;
  void teardown() override;
  Comm& data_comm() override;
  bool holds_loss() const override { return last_stage(); }

  bool owns(int unit) const { return unit >= first_ && unit < end_; }
  /// Owned, or a replica this stage keeps because an owned unit reads it
  /// (the last stage's copy of the embeddings a tied MLM decoder reads).
  bool holds(int unit) const { return owns(unit) || replicas_.count(unit) > 0; }
  /// The unit runner's body (see the top of this file).
  at::Tensor run_unit(int unit, const at::Tensor& input, const std::function<at::Tensor(const at::Tensor&)>& fn);

 private:
  class Runner;
  // One micro-batch between its forward and its backward.
  struct Micro {
    at::Tensor received;  // activation from the stage before (a leaf); undefined on stage 0
    at::Tensor sent;      // activation sent to the stage after; undefined on the last stage
    at::Tensor loss;      // last stage: the micro-batch's loss
  };

  bool last_stage() const { return stage_ + 1 == stages_; }
  int owner_of(int unit) const;
  Comm& pipe() { return mesh_->comm("pp"); }
  StatePlacement placement(bool optimizer);  // pipeline_state.cpp
  void run_backward(Micro& m);
  void wait_sends();
  void free_other_units();
  void report_stages() const;

  PipelineOptions options_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::vector<int> bounds_;  // first unit of each stage, then the unit count
  int stage_ = 0, stages_ = 1, first_ = 0, end_ = 0;
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<SplitOptimizer> optimizer_;
  std::vector<at::Tensor> trainable_;  // this stage's (replicas included), in model order
  // Tied weights (ft pretrain): the last stage keeps a replica of each unit
  // its units read; the replica's owner and the last stage sum those units'
  // gradients in `tied_comm_` so both copies take the same update.
  std::set<int> replicas_;
  std::vector<at::Tensor> tied_;           // trainable parameters of the tied units, on both ends
  std::unique_ptr<Comm> tied_comm_;         // {first stage, last stage}; the others alone
  std::vector<at::Tensor> norm_params_;     // trainable_ without replicas: each counted once
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> unit_params_;  // every unit's, HF names
  std::vector<int64_t> unit_micros_;  // balance: time, each unit's measured microseconds

  // Forward bookkeeping of the current micro-batch.
  std::vector<int64_t> activation_shape_;
  Micro current_;
  std::deque<Micro> waiting_;  // forwards whose backward the schedule has not run yet
  struct Send {
    Work work;
    at::Tensor tensor;  // kept alive until the send completes
  };
  std::vector<Send> activation_sends_;  // this micro-batch's; done once its logits arrive
  std::vector<Send> gradient_sends_;    // done by the end of the step's last backward

  // The bubble: time this stage waits on its neighbours (receives and the
  // logits broadcast) over the step's wall time, from the second step on
  // (the first pays for allocation). Reported per stage at teardown.
  using Clock = std::chrono::steady_clock;
  template <typename F>
  void idle(F&& wait);
  void end_step_timing();
  Clock::time_point step_start_{};
  bool in_step_ = false;
  double step_idle_s_ = 0, idle_s_ = 0, wall_s_ = 0;
  int64_t timed_steps_ = 0, steps_ = 0;
  int micro_in_step_ = 0, micro_per_step_ = 0;
};

}  // namespace ft
