// The value types every layer shares: a micro-batch, named tensors,
// optimizer settings and state, step options and results, state bytes.
// Kept apart from the Strategy seam (ft/parallel/strategy.h) so that data, model,
// optimizer and checkpoint headers need not include the seam for them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace ft {

// One micro-batch as the data pipeline hands it over (CPU tensors, int64).
struct Batch {
  at::Tensor input_ids;       // [rows, seq]
  at::Tensor attention_mask;  // [rows, seq]
  at::Tensor token_type_ids;  // [rows, seq]
  // Sequence classification: [rows] label ids (float [rows, K] or [rows]
  // for multi-label and regression). Masked LM and token classification:
  // [M] label ids of the tokens at `positions` (the masked tokens' original
  // ids; the labelled tokens' tags), in that order.
  at::Tensor labels;
  // Masked LM and token classification: [M] flat positions (row * seq +
  // column) of the tokens the head scores, ascending; the model computes
  // logits [M, ...] for these only (the masked tokens; the labelled tokens,
  // or at prediction every token).
  at::Tensor positions;
  // Extracted features [rows, hidden] (`ft features train`) instead of
  // tokens: the model runs only its head's last projection on them.
  at::Tensor features;
  int64_t rows() const {
    if (input_ids.defined()) return input_ids.size(0);
    return features.defined() ? features.size(0) : 0;
  }
};

// What the model reads from `batch` (not the labels: the Trainer takes the
// loss), on `device`. The CPU batch itself is returned unchanged there.
Batch model_inputs_on(const Batch& batch, c10::Device device);

// Rows [offset, offset + count) of the model inputs, positions rebased
// to the slice (dp splits a batch across replicas this way).
Batch slice_rows(const Batch& batch, int64_t offset, int64_t count);

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
  // Without clipping the norm is only worth its pass over every gradient (and,
  // sharded, a collective) on the steps that report it.
  bool report_grad_norm = true;
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

// Optimizer state in a strategy-independent form, keyed by HF parameter
// name: "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum_buffer",
// plus scalars ("step"). Any strategy at any world size can load it.
struct OptimizerState {
  TensorList tensors;
  int64_t step = 0;
};

}  // namespace ft
