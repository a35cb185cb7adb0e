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

#include "ft/optim/precision.h"
#include "ft/observe/strategy_events.h"
#include "ft/base/types.h"

namespace ft {

class EncoderModel;
class Comm;
class Tracer;

// Everything a strategy may use from the process it runs in.
struct StrategyContext {
  Comm* comm = nullptr;            // always set; world size 1 when alone
  Precision* precision = nullptr;  // always set
  c10::Device device = c10::Device(c10::kCPU);
  int64_t seed = 0;
  int threads = 1;  // intra-op threads this rank may use
  // Step profiler (ft/observe/trace.h): set by the Trainer, a no-op outside the
  // runtime.profile_steps window. Record collectives on its comm track.
  // Null only when a strategy is driven without a Trainer (unit tests).
  Tracer* trace = nullptr;
  // strategy.options.* from the run config, as strings; the plugin parses
  // and validates its own keys and names the key in errors.
  std::map<std::string, std::string> options;
  // The run's shape, for a strategy that plans from it (auto's estimate):
  // train.batch_size (rows per micro-batch per rank) and data.max_seq_len.
  // 0 when unknown (a strategy driven without a Trainer).
  int64_t batch_rows = 0;
  int64_t seq_len = 0;
  // Where the strategy reports its statistics (ft/observe/strategy_events.h):
  // `ctx.events.emit("ddp.overlap", json{...}, line)` prints the line and
  // puts the data in the metrics JSON Lines. Never print them directly.
  StrategyEvents events;
};

// Default visibility: the vtable and type_info live in ft_core and are shared
// with plugins built with -fvisibility=hidden.
class __attribute__((visibility("default"))) Strategy {
 public:
  virtual ~Strategy() = default;

  // Take the model (weights already loaded on CPU, identical on every rank
  // or broadcast here from rank 0), place/wrap/shard it, build the optimizer.
  // Collective.
  virtual void setup(std::shared_ptr<EncoderModel> model,
                     const OptimizerSpec& optimizer, const ParamPlan& plan,
                     StrategyContext& ctx) = 0;

  // Logits (float32) for this rank's micro-batch: [rows, num_labels] for a
  // classifier, [masked tokens, vocab] for the masked-LM head; in training,
  // a pipeline rank that does not hold the loss returns placeholder logits of
  // that shape (DataParallelGroup::holds_loss says which ranks do). Runs
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

  // --- Defaults that most strategies keep (and state_bytes(), required) ---

  // Precision used when the run config says "auto" (ddp_amp: mixed).
  virtual PrecisionMode default_precision(c10::DeviceType device) const {
    (void)device;
    return PrecisionMode::FP32;
  }

  // Train/eval mode for the wrapped model(s).
  virtual void set_training(bool training);

  // Bytes of params, grads and optimizer state held by this rank. Pure, not
  // a default: it sits here because moving it would change the vtable, the
  // plugin ABI (kPluginAbiVersion).
  virtual StateBytes state_bytes() const = 0;

  // Release communication resources; called once before destruction, and
  // only after every rank's training finished, so it may still communicate
  // (the pipeline gathers its stages' bubble here). A failed run skips it.
  virtual void teardown() {}

  // --- Optional abilities (ft/parallel/abilities.h) ---

  // The strategy this one delegates to (`auto` returns the one it picked),
  // or null. ability<T>() looks through it, so wrapping never hides what
  // the wrapped strategy can do.
  virtual Strategy* delegate() { return nullptr; }

  // This strategy, or the first one down its delegate() chain, as the
  // optional interface `Ability` (e.g. ShardedCheckpointing); null when
  // none implements it.
  template <typename Ability>
  Ability* ability() {
    for (Strategy* s = this; s != nullptr; s = s->delegate()) {
      if (auto* a = dynamic_cast<Ability*>(s)) return a;
    }
    return nullptr;
  }

 protected:
  // The opening every setup() shares: keeps `ctx` and the model, moves the
  // model to ctx.device and freezes what `plan` does not train.
  void adopt(std::shared_ptr<EncoderModel> model, const ParamPlan& plan, StrategyContext& ctx);

  std::shared_ptr<EncoderModel> model_;
  StrategyContext* ctx_ = nullptr;  // adopt()'s; the Trainer keeps it alive past teardown()
};

}  // namespace ft
