// Prompt learning as PEFT does it for sequence classification on BERT
// (task_type SEQ_CLS, num_transformer_submodules 1):
//
// - prompt tuning (Lester et al. 2021; PEFT's PROMPT_TUNING): P trained
//   embeddings are prepended to every sequence's input embeddings, the
//   attention mask gets P ones and the token types P zeros. BERT adds
//   position embeddings 0..P+n-1 to the whole, so the virtual tokens sit at
//   positions 0..P-1, [CLS] at P, and the pooler reads virtual token 0.
// - prefix tuning (Li & Liang 2021, P-tuning v2; PEFT's PREFIX_TUNING):
//   every encoder layer's attention gets P trained keys and values before
//   the sequence's own (HF's past_key_values), attended by every query; BERT
//   then numbers the real tokens' positions from P. The pooler reads [CLS].
//
// The base model, pooler included, is frozen; the prompt or prefixes train,
// and with train_head the classifier (PEFT's modules_to_save). Trainable:
// P x hidden (prompt), P x layers x 2 x hidden (prefix), plus the head.
//
// In the model the prompt is bert.embeddings.prompt_embeddings [P, hidden]
// (unit 0), the prefix bert.encoder.layer.i.attention.self.prefix_key and
// .prefix_value [P, hidden] (unit i + 1): ZeRO-3/FSDP shard them with their
// unit. On disk they are PEFT's files: adapter_config.json and
// adapter_model.safetensors with "prompt_embeddings" (prompt [P, hidden];
// prefix [P, layers x 2 x hidden], layer i's keys in columns
// [2i h, (2i+1) h) and values in [(2i+1) h, (2i+2) h), each split into heads
// as [heads, head_dim]) and the classifier as "base_model.classifier.*".
#pragma once

#include <cstdint>
#include <functional>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/base/types.h"

namespace ft {

class EncoderModel;
struct BertConfig;

enum class PromptMethod { kPrompt, kPrefix };

// One prompt-learning method: the `prompt` or `prefix` section of a run, or
// a checkpoint's adapter_config.json.
struct PromptLearning {
  PromptMethod method = PromptMethod::kPrompt;
  int64_t length = 0;           // P: PEFT's num_virtual_tokens
  std::string init = "random";  // prompt: random | vocab | text
  std::string init_text;        // prompt, init text
  bool train_head = true;
  std::string path;  // an adapter directory to start from; empty = fresh

  const char* section() const { return method == PromptMethod::kPrompt ? "prompt" : "prefix"; }
  const char* peft_type() const { return method == PromptMethod::kPrompt ? "PROMPT_TUNING" : "PREFIX_TUNING"; }
};

// The run's prompt learning; nullopt when prompt.length and prefix.length are 0.
std::optional<PromptLearning> prompt_learning_of(const RunConfig& config);
// Writes `p` into config's prompt or prefix section (ft eval brings a
// checkpoint's method this way).
void set_prompt_learning(RunConfig& config, const PromptLearning& p);

// bert.embeddings.prompt_embeddings, *.attention.self.prefix_key / prefix_value.
bool is_prompt_learning_param(const std::string& hf_name);
// What trains: the prompt or prefixes, and classifier.* with train_head.
bool is_prompt_learning_trainable(const std::string& hf_name, const PromptLearning& p);
// The prompt or prefix parameters alone: P x hidden, or P x layers x 2 x hidden.
int64_t prompt_learning_parameter_count(const BertConfig& config, const PromptLearning& p);

// Refuses sequences of `max_seq_len` tokens that would not fit
// max_position_embeddings after the P virtual tokens, naming the keys.
void check_prompt_positions(const BertConfig& config, const PromptLearning& p, int64_t max_seq_len);

// Adds fresh virtual tokens to `model` (whose weights are loaded). Prompt:
// init random = normal(0, initializer_range); vocab = the word embeddings of
// P ids drawn uniformly from the vocabulary; text = those of `encode`'s
// [CLS] init_text [SEP], repeated or cut to P (PEFT tokenizes init text with
// its special tokens). Prefix: normal(0, 1), PEFT's (torch.nn.Embedding's)
// initialisation of its [P, layers x 2 x hidden] table. Every draw comes
// from a generator seeded with `seed`: the same on every rank.
// `encode` gives the ids of init_text, special tokens included: the run's
// tokenizer, which the caller holds (empty: none, and init text is refused).
using PromptTextEncoder = std::function<std::vector<int64_t>(const std::string&)>;
void apply_prompt_learning(EncoderModel& model, const PromptLearning& p, uint64_t seed,
                           const PromptTextEncoder& encode = {});

// Gives `to` (a fresh model of the same config) `from`'s virtual tokens,
// values copied: for strategies that build extra replicas (dp).
void replicate_prompt_learning(const EncoderModel& from, EncoderModel& to);

// `weights` without the prompt or prefixes (what model.safetensors of a
// prompt-learning checkpoint holds).
TensorList without_prompt_learning(const TensorList& weights);

// PEFT's prefix table [P, layers x 2 x hidden] from the model's per-layer
// prefixes in `weights` (HF names), and back (HF names -> tensors).
at::Tensor prefix_to_peft(const TensorList& weights, int64_t layers);
// `base`: the model family's prefix ("bert.", "roberta."; EncoderFamily::prefix).
TensorList prefix_from_peft(const at::Tensor& table, int64_t layers, const std::string& source,
                            const std::string& base);

// --- Adapter files (PEFT's) -------------------------------------------------

// True when `dir`/adapter_config.json says PROMPT_TUNING or PREFIX_TUNING.
bool has_prompt_learning(const std::filesystem::path& dir);

// Writes adapter_model.safetensors and adapter_config.json into `dir`, each
// atomically. `weights`: the full model state by HF name.
void save_prompt_learning(const std::filesystem::path& dir, const TensorList& weights, const PromptLearning& p,
                          const BertConfig& config, const std::string& base_model);

// adapter_config.json as a PromptLearning, `path` set to `dir`. Errors name
// the file and field (peft_type, prefix_projection, ...).
PromptLearning read_prompt_learning_config(const std::filesystem::path& dir);

// adapter_model.safetensors under the model's HF names (the prompt, the
// per-layer prefixes, classifier.* when saved), checked against `config`
// (token_dim, num_layers, num_attention_heads, shapes).
TensorList read_prompt_learning_weights(const std::filesystem::path& dir, const BertConfig& config);

// Copies `dir`'s tensors into a model given the same method; the length and
// method must match (the error says which key to set).
void load_prompt_learning(EncoderModel& model, const std::filesystem::path& dir,
                          const PromptLearning& p);

}  // namespace ft
