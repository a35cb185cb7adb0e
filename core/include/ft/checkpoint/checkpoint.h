// Checkpoint directories (ARCHITECTURE.md "Output", contract):
//
//   <dir>/config.json          HF BertConfig (with id2label)
//   <dir>/model.safetensors    consolidated fp32 weights, HF names
//   <dir>/vocab.txt            when the run used a tokenizer
//   <dir>/training_state/      only when saved for resume:
//       optimizer.safetensors  full optimizer state keyed by HF name
//                              ("<param>.exp_avg", ...); metadata: step
//       trainer_state.json     step, epoch, scheduler/scaler state, best
//       rng.safetensors        per-rank CPU generator states
//       run.yaml               the effective run config
//
// A LoRA run (ft/model/lora.h) keeps model.safetensors to the base weights (+ its
// trained classifier) under plain HF names and adds PEFT's files:
//   <dir>/adapter_model.safetensors   "base_model.model.<name>" adapters (+ head)
//   <dir>/adapter_config.json         peft_type LORA, r, lora_alpha, ...
//
// A prompt or prefix tuning run (ft/model/prompt_learning.h) likewise keeps the
// base weights (+ classifier) in model.safetensors and adds PEFT's
// adapter_model.safetensors ("prompt_embeddings", "base_model.classifier.*")
// and adapter_config.json (peft_type PROMPT_TUNING / PREFIX_TUNING).
//
// The HF stack loads <dir> as is. Training state is strategy-independent
// (full tensors by name), so a run can resume under any strategy and world
// size. Directories are written under a temp name and renamed (ft/base/fs.h).
// manifest.json (ft/io/manifest.h) lists every file with its size and SHA-256;
// loading refuses a checkpoint that does not match it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/io/manifest.h"
#include "ft/model/model.h"
#include "ft/model/prompt_learning.h"
#include "ft/base/types.h"

namespace ft {

class Tokenizer;

struct TrainerState {
  int64_t global_step = 0;
  int64_t epoch = 0;          // epoch the next step belongs to
  int64_t step_in_epoch = 0;  // next step within that epoch
  int64_t total_steps = 0;
  std::vector<double> loss_scaler;  // Precision::state()
  double best_metric = 0.0;
  bool has_best = false;
  std::string best_checkpoint;
  int64_t best_step = 0;  // the evaluation that set best_metric
  // Early stopping's count of evaluations since the last improvement.
  int64_t evals_without_improvement = 0;
  std::string strategy;
  int world_size = 1;
  // The checkpoint has (or is about to get) manifest.json (ft/io/manifest.h).
  bool manifest = false;
};

struct CheckpointData {
  BertConfig config;
  TensorList model;
  const Tokenizer* tokenizer = nullptr;
  // The longest input the run tokenised to (data.max_seq_len): recorded as
  // tokenizer_config.json's model_max_length. 0: the model's position limit.
  int64_t model_max_length = 0;
  // Present only for resumable checkpoints.
  std::optional<OptimizerState> optimizer;
  std::optional<TrainerState> state;
  std::vector<at::Tensor> rng_states;  // per rank
  std::string run_yaml;
  // Set for a LoRA run: `model` holds the adapters too; they are written
  // as an adapter beside the base weights. base_model names the starting
  // weights in adapter_config.json.
  std::optional<LoraConfig> lora;
  std::string base_model;
  // Set for a bottleneck-adapter run (ft/model/adapter.h): model.safetensors gets
  // the base weights, bottleneck_adapter.* the adapters and the head.
  std::optional<AdapterConfig> adapter;
  // Set for a prompt or prefix tuning run: model.safetensors gets the base
  // weights, PEFT's adapter files the virtual tokens (+ classifier);
  // base_model is named in adapter_config.json.
  std::optional<PromptLearning> prompt_learning;
};

// Writes atomically: `dir` either keeps its old content or holds all of this.
// With a tokenizer: vocab.txt, and HF's tokenizer_config.json and
// special_tokens_map.json, so AutoTokenizer / pipeline() load the tokenizer
// as trained (case handling, maximum length) instead of guessing.
void save_checkpoint(const std::filesystem::path& dir, const CheckpointData& data);

// Every file of the checkpoint but manifest.json, into the existing
// directory `dir` (a staging directory: the caller hashes and commits it,
// as CheckpointWriter does off the training thread).
void write_checkpoint_files(const std::filesystem::path& dir, const CheckpointData& data);

// The tokenizer_config.json and special_tokens_map.json texts for a
// BertTokenizer (what save_checkpoint writes).
std::string tokenizer_config_json(bool lowercase, int64_t model_max_length, bool split_cjk = true);
std::string special_tokens_map_json();

// model_max_length from `dir`/tokenizer_config.json; nullopt when the file
// or the key is absent (checkpoints from before it was written).
std::optional<int64_t> read_model_max_length(const std::filesystem::path& dir);

struct LoadedCheckpoint {
  BertConfig config;
  TensorList model;
  std::optional<OptimizerState> optimizer;
  std::optional<TrainerState> state;
  std::vector<at::Tensor> rng_states;
  // A LoRA checkpoint's adapter config; `model` then holds the adapters
  // too (apply_lora before loading it).
  std::optional<LoraConfig> lora;
  // A bottleneck-adapter checkpoint's config; `model` holds the adapters too
  // (apply_bottleneck_adapters before loading it).
  std::optional<AdapterConfig> adapter;
  // A prompt or prefix tuning checkpoint's method (path = the directory);
  // `model` holds the virtual tokens under the model's names too.
  std::optional<PromptLearning> prompt_learning;
  // kUnverified: written before manifests; the caller says so in one line.
  CheckpointCheck check = CheckpointCheck::kVerified;
};

// Reads a checkpoint after verifying it against its manifest
// (verify_checkpoint); with_training_state=false skips training_state/.
// Errors name the file and what is wrong.
LoadedCheckpoint load_checkpoint(const std::filesystem::path& dir, bool with_training_state);

/// A resumable checkpoint found under an output directory.
struct FoundCheckpoint {
  std::filesystem::path dir;
  int64_t global_step = 0;
};

/// The newest resumable checkpoint under `output_dir` (checkpoint-N or
/// final, ordered by trainer_state.json's global_step) that passes
/// verify_checkpoint; nullopt when there is none. Each newer one refused on
/// the way is described in `skipped` ("DIR: why"). train.resume_from: auto
/// and the restarting launcher both use it.
std::optional<FoundCheckpoint> latest_checkpoint(const std::filesystem::path& output_dir,
                                                 std::vector<std::string>* skipped = nullptr);

}  // namespace ft
