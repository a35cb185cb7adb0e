// The encoder families ft builds. Most share BERT's post-norm layer: BERT
// itself, the RoBERTa line (RoBERTa, XLM-RoBERTa, CamemBERT), ELECTRA,
// DistilBERT and DeBERTa-v2 (whose attention adds relative-position terms to
// the same layer). ModernBERT has a layer of its own (pre-norm, rotary,
// GeGLU, sliding-window layers), behind the same units. What differs
// (config.json's model_type, HF's parameter names, where positions start,
// the embedding width, the layer, the classification head) is this
// descriptor, looked up once from config.json and read by the model, the
// methods and the strategies instead of spelling "bert." themselves.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ft {

enum class ClassifierStyle {
  kPooler,      // BERT: bert.pooler (tanh(dense(h_[CLS]))) -> dropout -> classifier
  kDenseTanh,   // RoBERTa: classifier.dense -> tanh -> classifier.out_proj on <s>, dropout before each
  kDenseGelu,   // ELECTRA: the same with gelu
  kPreClassifier,  // DistilBERT: pre_classifier -> ReLU -> dropout -> classifier on [CLS]
  kContextPooler,  // DeBERTa: pooler.dense (dropout before, gelu after) -> dropout -> classifier on [CLS]
  kPredictionHead,  // ModernBERT: final_norm, then [CLS] or the mean -> head.dense -> gelu -> head.norm -> drop -> classifier
};

struct EncoderFamily {
  std::string model_type;    // config.json's, as written back
  std::string class_prefix;  // "Bert", "XLMRoberta": architectures are <prefix>ForSequenceClassification, ...
  std::string base;          // transformers' base_model_prefix: parameter names start "<base>."
  // RoBERTa numbers positions from padding_idx + 1 (fairseq's convention,
  // kept by transformers), so the first real token reads row pad_token_id + 1.
  bool positions_after_padding = false;
  ClassifierStyle classifier = ClassifierStyle::kPooler;
  std::string mlm_head;  // "cls.predictions" / "lm_head" / "vocab_projector"; empty: ft builds no masked-LM head
  // Top-level modules of the family's other heads, left out when a
  // checkpoint of another head is fine-tuned ("cls.", "discriminator_predictions.").
  std::vector<std::string> other_heads;
  // ELECTRA: embeddings narrower than the layers (embedding_size), widened
  // by <base>.embeddings_project.
  bool separate_embedding_size = false;
  bool token_types = true;          // DistilBERT has no token type embeddings
  // DeBERTa-v2: disentangled attention over a relative-position table
  // (BertConfig::Disentangled), shared by every layer.
  bool disentangled_attention = false;
  // Modules outside "<base>.embeddings." that unit 0 computes with (names
  // relative to the base): ELECTRA's embeddings_project, DeBERTa's
  // relative-position table and its LayerNorm.
  std::vector<std::string> embedding_unit_modules;
  // ModernBERT's layer (modern_modules.h) instead of BERT's: no position or
  // type tables, the words at embeddings.tok_embeddings, a final_norm.
  bool modern_layer = false;
  std::string layers = "encoder.layer";  // where the layers sit under the base model
  // The family's names for the modules of BERT's layer, relative to a layer
  // ("attention.self.query" -> "attention.q_lin"); empty: BERT's own.
  // ModernBERT lists only its two output projections, where adapters sit.
  std::vector<std::pair<std::string, std::string>> layer_names;
  // config.json keys the family spells otherwise (BertConfig's -> its own:
  // "hidden_size" -> "dim"); read and written under the family's name.
  std::vector<std::pair<std::string, std::string>> config_keys;

  std::string prefix() const { return base + "."; }
  std::string word_embeddings() const {
    return prefix() + (modern_layer ? "embeddings.tok_embeddings.weight" : "embeddings.word_embeddings.weight");
  }
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
  // The classifier's output projection, whose rows are the labels.
  // RoBERTa's and ELECTRA's head module is "classifier" itself, its output
  // projection "classifier.out_proj"; the other heads' is "classifier".
  bool classifier_has_out_proj() const {
    return classifier == ClassifierStyle::kDenseTanh || classifier == ClassifierStyle::kDenseGelu;
  }
  std::string classifier_weight() const {
    return classifier_has_out_proj() ? "classifier.out_proj.weight" : "classifier.weight";
  }
  bool has_masked_lm() const { return !mlm_head.empty(); }
  // DistilBERT's masked LM is top-level modules (vocab_transform,
  // vocab_layer_norm, vocab_projector), its decoder the head module itself,
  // and so is ModernBERT's (head.dense, head.norm, decoder); the others nest
  // a decoder (tied to the word embeddings) in the head.
  bool mlm_top_level() const { return mlm_head == "vocab_projector" || mlm_head == "decoder"; }
  std::string mlm_decoder() const { return mlm_top_level() ? mlm_head : mlm_head + ".decoder"; }
  std::string classifier_bias() const { return classifier_has_out_proj() ? "classifier.out_proj.bias" : "classifier.bias"; }
  std::string mlm_bias() const { return mlm_head + ".bias"; }
  std::string architecture(bool masked_lm) const {
    return class_prefix + (masked_lm ? "ForMaskedLM" : "ForSequenceClassification");
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
