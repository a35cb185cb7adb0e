// The Strategy seam: the only thing the Trainer knows about how training is
// distributed.
//
// The Trainer owns the loop (epochs, micro-batches, accumulation count, LR
// schedule, evaluation, logging, when to save). A Strategy owns where the
// model lives and how it is wrapped or sharded, the forward call when it must
// intervene, backward (loss scaling, gradient sync), the optimizer step, and
// full or sharded state. Strategies reach the rest of core only through
// these public headers; core never includes a strategy.
//
// Threading/blocking: every method is called from the worker's main thread.
// Methods marked "collective" must be called by every rank in the same order;
// they block until the collective completes and throw ft::Error if a peer is
// gone (a poisoned process group is fatal for the job).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "ft/precision.h"

namespace ft {

class BertForSequenceClassification;
class Comm;
class Tracer;

// One micro-batch as the data pipeline hands it over (CPU tensors, int64).
struct Batch {
  at::Tensor input_ids;       // [rows, seq]
  at::Tensor attention_mask;  // [rows, seq]
  at::Tensor token_type_ids;  // [rows, seq]
  at::Tensor labels;          // [rows]
  int64_t rows() const { return input_ids.defined() ? input_ids.size(0) : 0; }
};

// Named tensors in a stable order (HF parameter names for model state).
using TensorList = std::vector<std::pair<std::string, at::Tensor>>;

enum class OptimizerKind { AdamW, SGD };

// What the optimizer should be; the strategy builds it over whatever
// tensors it really updates (full parameters, flat shards, replicas).
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 2e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  double momentum = 0.0;  // SGD only
  // HF/BERT convention: no decay on biases and LayerNorm weights.
  bool decay_bias_and_norm = false;
};

// Per-parameter optimizer settings the Trainer decides (decay, LR scale for
// layer-wise decay or a separate head LR, frozen). Keyed by HF name.
struct ParamSettings {
  double weight_decay = 0.0;
  double lr_scale = 1.0;
  bool trainable = true;
};
using ParamPlan = std::map<std::string, ParamSettings>;

struct StepOptions {
  double lr = 0.0;             // base LR for this step (scaled per parameter)
  double max_grad_norm = 0.0;  // <= 0: no clipping
};

struct StepResult {
  double grad_norm = 0.0;  // global L2 norm before clipping (NaN if not computed)
  bool skipped = false;    // fp16 overflow: the update was not applied
};

// Bytes of model state this rank holds (the memory table's "model state").
struct StateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// Everything a strategy may use from the process it runs in.
struct StrategyContext {
  Comm* comm = nullptr;            // always set; world size 1 when alone
  Precision* precision = nullptr;  // always set
  c10::Device device = c10::Device(c10::kCPU);
  int64_t seed = 0;
  int threads = 1;  // intra-op threads this rank may use
  // Step profiler (ft/trace.h): set by the Trainer, a no-op outside the
  // runtime.profile_steps window. Record collectives on its comm track.
  // Null only when a strategy is driven without a Trainer (unit tests).
  Tracer* trace = nullptr;
  // strategy.options.* from the run config, as strings; the plugin parses
  // and validates its own keys and names the key in errors.
  std::map<std::string, std::string> options;
};

// Optimizer state in a strategy-independent form, keyed by HF parameter
// name: "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum_buffer",
// plus scalars ("step"). Any strategy at any world size can load it.
struct OptimizerState {
  TensorList tensors;
  int64_t step = 0;
};

// Default visibility: the vtable and type_info live in ft_core and are shared
// with plugins built with -fvisibility=hidden.
class __attribute__((visibility("default"))) Strategy {
 public:
  virtual ~Strategy() = default;

  // Take the model (weights already loaded on CPU, identical on every rank
  // or broadcast here from rank 0), place/wrap/shard it, build the optimizer.
  // Collective.
  virtual void setup(std::shared_ptr<BertForSequenceClassification> model,
                     const OptimizerSpec& optimizer, const ParamPlan& plan,
                     StrategyContext& ctx) = 0;

  // Logits [rows, num_labels] (float32) for this rank's micro-batch. Runs
  // under the precision component's autocast. Collective for sharded
  // strategies.
  virtual at::Tensor forward(const Batch& batch) = 0;

  // Backward of `loss` (already divided by the accumulation count).
  // sync_grads is false on accumulation micro-batches: no communication.
  virtual void backward(const at::Tensor& loss, bool sync_grads) = 0;

  // Finish gradient sync, unscale, clip, update, zero grads. Collective.
  virtual StepResult step(const StepOptions& options) = 0;

  // Full (consolidated) model weights with HF names, fp32, on CPU, on every
  // rank. Collective.
  virtual TensorList model_state() = 0;

  // Full optimizer state (see OptimizerState). Collective.
  virtual OptimizerState optimizer_state() = 0;

  // Load full weights and, optionally, optimizer state saved by any
  // strategy. Collective.
  virtual void load_state(const TensorList& model, const OptimizerState* optimizer) = 0;

  // --- Defaults that most strategies keep ---

  // Precision used when the run config says "auto" (ddp_amp: mixed).
  virtual PrecisionMode default_precision(c10::DeviceType device) const {
    (void)device;
    return PrecisionMode::FP32;
  }

  // Train/eval mode for the wrapped model(s).
  virtual void set_training(bool training);

  // Bytes of params, grads and optimizer state held by this rank.
  virtual StateBytes state_bytes() const = 0;

  // Release communication resources; called once before destruction.
  virtual void teardown() {}

 protected:
  std::shared_ptr<BertForSequenceClassification> model_;
};

}  // namespace ft
