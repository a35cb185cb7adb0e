// What an encoder backbone declares: config.json's model_type, HF's
// parameter names, and what the family can and cannot do. Each family
// (core/src/model/backbones/<family>/) fills one in beside the modules it
// builds; the model, the methods, the checkpoints and the strategies read
// these declarations instead of spelling "bert." or asking which family
// they hold. Which head forms a family's checkpoints carry is declared here
// too, by name: the heads (core/src/model/heads/<task>/) build them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft {

struct EncoderFamily {
  std::string model_type;    // config.json's, as written back
  std::string class_prefix;  // "Bert", "XLMRoberta": architectures are <prefix>ForSequenceClassification, ...
  std::string base;          // transformers' base_model_prefix: parameter names start "<base>."
  std::string words = "embeddings.word_embeddings";  // the word table's module, below the base
  std::string layers = "encoder.layer";              // where the layers sit under the base model
  // The top-level modules of a base-model checkpoint (a BertModel's file has
  // no "<base>." prefix): how such a file is told from a task model's.
  std::vector<std::string> base_modules = {"embeddings.", "embeddings_project.", "encoder.", "pooler."};
  // Modules outside "<base>.embeddings." that unit 0 computes with (names
  // relative to the base): ELECTRA's embeddings_project, DeBERTa's
  // relative-position table and its LayerNorm.
  std::vector<std::string> embedding_unit_modules;
  // The family's names for the modules of BERT's layer, relative to a layer
  // ("attention.self.query" -> "attention.q_lin"); empty: BERT's own.
  // ModernBERT lists only its two output projections, where adapters sit.
  std::vector<std::pair<std::string, std::string>> layer_names;
  // config.json keys the family spells otherwise (BertConfig's -> its own:
  // "hidden_size" -> "dim"); read and written under the family's name.
  std::vector<std::pair<std::string, std::string>> config_keys;
  // Top-level modules of the family's other heads, left out when a
  // checkpoint of another head is fine-tuned ("cls.", "discriminator_predictions.").
  std::vector<std::string> other_heads;
  // The form of HF's sequence-classification head for this family, by the
  // name heads/sequence_classification/ registers it under ("pooler",
  // "dense_tanh", ...), and the masked-LM head's module ("cls.predictions",
  // "lm_head", ...; empty: ft builds no masked-LM head for it).
  std::string classification_head = "pooler";
  std::string mlm_head;
  // The token-classification head's form (heads/token_classification/):
  // "classifier" (dropout at classifier_dropout, else hidden_dropout_prob, then
  // the classifier), "hidden_dropout" (the same at hidden_dropout_prob, as
  // DistilBERT and DeBERTa build it) or "prediction_head" (ModernBERT's
  // dense, gelu, norm first).
  std::string token_classification_head = "classifier";
  // LoRA's default target modules (lora.targets empty), by PEFT's default
  // mapping for the family: its attention's query and value projections.
  std::vector<std::string> lora_targets = {"query", "value"};
  // Capabilities.
  bool token_types = true;    // token type embeddings (DistilBERT and ModernBERT have none)
  bool prefix_tuning = true;  // past key values in transformers' attention, which PEFT's prefix tuning needs

  bool has_masked_lm() const { return !mlm_head.empty(); }
  std::string prefix() const { return base + "."; }
  std::string word_embeddings() const { return prefix() + words + ".weight"; }
  std::string layer_prefix(int64_t layer) const { return prefix() + layers + "." + std::to_string(layer) + "."; }
  // A name relative to a layer, from BERT's spelling to the family's
  // ("attention.self.query.lora_A.weight" -> "attention.q_lin.lora_A.weight").
  std::string layer_name(const std::string& bert_name) const {
    for (const auto& [bert, own] : layer_names) {
      if (bert_name == bert) return own;
      if (bert_name.compare(0, bert.size() + 1, bert + ".") == 0) return own + bert_name.substr(bert.size());
    }
    return bert_name;
  }
};

// A LayerNorm's weight or bias, by its HF name: BERT spells the module
// "LayerNorm", RoBERTa's lm_head "layer_norm", ModernBERT "norm",
// "attn_norm", "final_norm". (Initialisation and the Trainer's no-decay rule
// both single them out; transformers' Trainer matches the same spellings.)
inline bool is_layer_norm_parameter(const std::string& name) {
  if (name.find("LayerNorm") != std::string::npos || name.find("layer_norm") != std::string::npos) return true;
  const auto end = name.rfind('.');
  if (end == std::string::npos || end == 0) return false;
  const auto dot = name.rfind('.', end - 1);
  const auto begin = dot == std::string::npos ? 0 : dot + 1;
  const std::string module = name.substr(begin, end - begin);  // the parameter's own module
  return module == "norm" || (module.size() > 5 && module.compare(module.size() - 5, 5, "_norm") == 0);
}

// A parameter of the classification head as PEFT's modules_to_save
// ["classifier"] picks it: PEFT matches module names by suffix, so
// DistilBERT's pre_classifier belongs to it too (and RoBERTa's classifier.dense).
// DeBERTa's top-level pooler is part of it as well: pretrained DeBERTa-v3
// files have none, so it starts fresh like the classifier, and a frozen,
// unsaved random pooler would make the adapter useless on reload; ft saves it
// and names it in modules_to_save (peft_head_modules).
inline bool is_classifier_parameter(const std::string& name) {
  const std::string module = name.substr(0, name.find('.'));
  const std::string suffix = "classifier";
  if (module == "pooler") return true;
  return module.size() >= suffix.size() && module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// modules_to_save for a head trained beside an adapter: "classifier", and
// "pooler" when the model has a top-level one (DeBERTa).
template <typename Named>
std::vector<std::string> peft_head_modules(const Named& weights) {
  for (const auto& named : weights)
    if (named.first.rfind("pooler.", 0) == 0) return {"classifier", "pooler"};
  return {"classifier"};
}

// The family of a config.json model_type; anything else fails with one line
// naming `source` and listing supported_model_types().
const EncoderFamily& encoder_family(const std::string& model_type, const std::string& source);
std::vector<std::string> supported_model_types();

}  // namespace ft
