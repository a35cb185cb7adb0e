// The Trainer's per-parameter decisions (weight decay, frozen, LR scale)
// from the run config: what fine-tuning recipes change most often, decided
// once here so every strategy applies the same plan.
#pragma once

#include <functional>
#include <string>

#include "ft/config/config.h"
#include "ft/base/types.h"

namespace ft {

class EncoderModel;

// Glob match on HF names: `*` any run of characters (dots included), `?` one.
bool glob_match(const std::string& pattern, const std::string& name);

// Builds the plan for `model`'s parameters:
// - weight decay per train.weight_decay / decay_bias_and_norm;
// - frozen: train.freeze globs, train.freeze_layers (embeddings + first N
//   layers), or everything but what `lora_trainable` accepts when it is set;
// - LR scale: layer-wise decay (head 1, layer l d^(L+1-l), embeddings
//   d^(L+1)) times head_lr / lr on the head when head_lr > 0.
// Errors (ft::Error) name the key: a freeze pattern that matches nothing,
// freeze_layers beyond the model's depth, a plan that trains nothing.
ParamPlan build_param_plan(const EncoderModel& model, const TrainConfig& train,
                           const std::function<bool(const std::string&)>& lora_trainable = {});

// The optimizer train.* asks for (kind, lr, betas, eps, weight decay,
// momentum, decay_bias_and_norm): what the Trainer hands the strategy, and
// what `ft features train` updates its classifier with.
OptimizerSpec optimizer_spec(const TrainConfig& train);

// Sets requires_grad on every parameter of `model` from the plan (what
// every strategy's setup does first); a name the plan leaves out trains.
void apply_trainable(EncoderModel& model, const ParamPlan& plan);

}  // namespace ft
