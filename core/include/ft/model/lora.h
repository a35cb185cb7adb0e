// LoRA (Hu et al. 2021) as PEFT does it, on ft's BERT: every targeted
// Linear y = W x + b gets y += (alpha / r) * B(A(dropout(x))) with
// A [r, in] (kaiming-uniform, a = sqrt(5)) and B [out, r] (zeros), so a fresh
// adapter leaves the model's function unchanged.
//
// Names follow PEFT's saved form without the adapter name: the adapters of
// "bert.encoder.layer.0.attention.self.query" are
// "bert.encoder.layer.0.attention.self.query.lora_A.weight" / ".lora_B.weight".
// They are registered under the Linear itself, so they appear in
// model.weights() and in the same unit as the layer they adapt (ZeRO/FSDP
// shard them with it).
//
// On disk (checkpoints, lora.adapter): adapter_model.safetensors with keys
// "base_model.model.<name>" (the adapters and, with train_head, the
// classifier as PEFT saves modules_to_save) and adapter_config.json with
// PEFT's fields, so `PeftModel.from_pretrained(base, dir)` loads it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/base/types.h"

namespace ft {

class EncoderModel;
enum class BertHead;  // ft/model/model.h
struct BertConfig;   // ft/model/model.h

// PEFT's rule: module `module_name` is adapted when it equals a target or
// ends with "." + target.
bool lora_targets_module(const std::string& module_name, const std::vector<std::string>& targets);

// True for "<module>.lora_A.weight" / "<module>.lora_B.weight".
bool is_lora_param(const std::string& hf_name);

// What trains under LoRA: the adapters and, with train_head, the classifier
// (classifier.weight / classifier.bias). Everything else is frozen. The
// Trainer passes this to build_param_plan when lora.rank > 0.
bool is_lora_trainable(const std::string& hf_name, const LoraConfig& lora);

// `lora` with its targets made explicit: the model family's default
// (EncoderFamily::lora_targets) when lora.targets is empty.
LoraConfig with_family_targets(LoraConfig lora, const BertConfig& model);

// Adds adapters to every Linear that lora.targets names (the family's
// default when empty). A is drawn from a
// generator seeded with `seed` (same seed, same adapters on every rank),
// B is zero. Returns the adapted module names. ft::Error naming lora.targets
// when a target matches nothing or a module that is not a Linear, or when
// the model already has adapters.
std::vector<std::string> apply_lora(EncoderModel& model, const LoraConfig& lora, uint64_t seed);

// Gives `to` (a fresh model of the same config) the adapters `from` has,
// same shapes, scale and dropout, values copied: for strategies that build
// extra replicas of the model (dp).
void replicate_lora(const EncoderModel& from, EncoderModel& to);

// The adapted model's weights with each adapter folded into its base
// weight, W' = W + (alpha / r) B A, and the adapter tensors dropped: a plain
// EncoderModel state. `weights` holds HF names.
TensorList merge_lora(const TensorList& weights, const LoraConfig& lora);

// `weights` without adapter tensors (what model.safetensors of a LoRA
// checkpoint holds: base weights + classifier under plain HF names).
TensorList without_lora(const TensorList& weights);

// --- Adapter directories --------------------------------------------------

// `dir`/adapter_config.json's peft_type ("LORA", "PROMPT_TUNING", ...); ""
// when there is no such file. ft::Error for a file without one.
std::string adapter_peft_type(const std::filesystem::path& dir);

// A LoRA adapter directory (peft_type LORA); prompt learning has its own
// readers (ft/model/prompt_learning.h).
bool has_adapter(const std::filesystem::path& dir);

// Writes adapter_model.safetensors + adapter_config.json into `dir` (which
// must exist; each file is written atomically). `weights` is the full model
// state by HF name; the adapters (and, with train_head, classifier.*) are
// picked from it.
// `head` gives PEFT's task_type: TOKEN_CLS for a token classifier, else SEQ_CLS.
void save_adapter(const std::filesystem::path& dir, const TensorList& weights, const LoraConfig& lora,
                  const std::string& base_model, BertHead head);

// adapter_config.json as a LoraConfig, with `adapter` set to `dir`. Errors
// name the file and field (peft_type other than LORA, missing r, ...).
LoraConfig read_adapter_config(const std::filesystem::path& dir);

// adapter_model.safetensors with the "base_model.model." prefix removed
// (HF names: "...query.lora_A.weight", "classifier.weight").
TensorList read_adapter_weights(const std::filesystem::path& dir);

// Copies an adapter directory's tensors into a model that apply_lora()
// adapted with `lora`. Every adapter of the model must be in the file with
// the right shape (a rank or target mismatch names both sides);
// classifier.* is loaded when present.
void load_adapter(EncoderModel& model, const std::filesystem::path& dir, const LoraConfig& lora);

// `base` with the adapter's tensors added (replacing same-named ones, e.g. a
// trained classifier): the full state of an adapted model.
TensorList with_adapter(TensorList base, const TensorList& adapter);

}  // namespace ft
