// The fine-tuning method of a run — full fine-tuning, LoRA (ft/model/lora.h),
// bottleneck adapters (ft/model/adapter.h), prompt or prefix tuning
// (ft/model/prompt_learning.h) — applied and recorded in one place, so training,
// checkpoints, ft eval, ft predict and ft features agree on it.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "ft/config/config.h"

namespace ft {

class EncoderModel;
class Tokenizer;
struct CheckpointData;
struct LoadedCheckpoint;

struct AppliedMethod {
  // What trains; empty for full fine-tuning (train.freeze decides).
  std::function<bool(const std::string&)> trainable;
  // One line for the start of the run ("" when there is nothing to say).
  std::string note;
};

// Applies `config`'s method to `model`, whose base weights are loaded: fresh
// adapters or virtual tokens drawn with train.seed, or the saved ones the
// method's path names. `tokenizer` (null for pre-tokenized data) serves
// prompt.init=text and the position check against data.max_seq_len.
AppliedMethod apply_tuning_method(EncoderModel& model, const RunConfig& config,
                                  const Tokenizer* tokenizer);

// Records `config`'s method in a checkpoint about to be saved; `base_model`
// names the starting weights in PEFT's adapter_config.json.
void describe_tuning_method(CheckpointData& data, const RunConfig& config, const std::string& base_model);

// Gives a fresh model a loaded checkpoint's method (the values then come
// with c.model through load_weights).
void apply_checkpoint_method(EncoderModel& model, const LoadedCheckpoint& c);

// Makes `config` use checkpoint `dir`'s method, loaded from `dir` (ft eval).
void use_checkpoint_method(RunConfig& config, const std::filesystem::path& dir);

}  // namespace ft
