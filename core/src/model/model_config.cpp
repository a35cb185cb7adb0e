// BertConfig <-> HF config.json: BERT's keys here, each family's defaults,
// own keys and refusals in its backbone (backbones/<family>/).
#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "model/backbone.h"

namespace ft {
namespace {

using nlohmann::json;
using model_detail::read_key;

// Whether `j` nests at most `depth` levels. Bounded recursion: keys we do not
// know are kept and re-dumped, and dump() recurses once per level, so a
// config.json nested millions deep would otherwise overflow the stack.
bool within_depth(const json& j, int depth) {
  if (!j.is_structured()) return true;
  if (depth == 0) return false;
  for (const auto& item : j)
    if (!within_depth(item, depth - 1)) return false;
  return true;
}

const char* const kKnownKeys[] = {
    "model_type", "classifier_dropout", "embedding_size", "vocab_size", "hidden_size", "num_hidden_layers",
    "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "num_labels",
    "id2label", "label2id", "architectures", "problem_type", "text_pair"};

// Keys whose non-default values change the network in ways ft does not
// build: one line naming the key, never a silently different model.
void refuse_unsupported(const json& j, const std::string& source) {
  if (auto it = j.find("position_embedding_type"); it != j.end() && !it->is_null() && *it != "absolute") {
    fail("{}: position_embedding_type {} is not supported; ft builds absolute position embeddings", source,
         it->dump());
  }
  for (const char* key : {"is_decoder", "add_cross_attention"}) {
    if (auto it = j.find(key); it != j.end() && it->is_boolean() && it->get<bool>()) {
      fail("{}: {} is true; ft fine-tunes encoders only (set it false or drop it)", source, key);
    }
  }
}

}  // namespace

BertConfig BertConfig::from_json_string(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON ({})", source, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object", source);
  if (!within_depth(j, 32)) fail("{}: values nested more than 32 levels deep; not a model config", source);
  BertConfig c;
  // A config.json without model_type is one ft or an old BERT tool wrote.
  read_key(j, "model_type", c.model_type, source);
  const model_detail::Backbone& backbone = model_detail::backbone_of(c.model_type, source);
  const EncoderFamily& family = backbone.family();
  for (const auto& [bert, own] : family.config_keys) {  // the family's names read as BertConfig's
    if (j.contains(own)) j[bert] = j[own];
    j.erase(own);
  }
  backbone.set_defaults(j, c, source);
  refuse_unsupported(j, source);
  read_key(j, "vocab_size", c.vocab_size, source);
  read_key(j, "hidden_size", c.hidden_size, source);
  read_key(j, "num_hidden_layers", c.num_hidden_layers, source);
  read_key(j, "num_attention_heads", c.num_attention_heads, source);
  read_key(j, "intermediate_size", c.intermediate_size, source);
  read_key(j, "hidden_act", c.hidden_act, source);
  read_key(j, "hidden_dropout_prob", c.hidden_dropout_prob, source);
  read_key(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, source);
  read_key(j, "max_position_embeddings", c.max_position_embeddings, source);
  read_key(j, "type_vocab_size", c.type_vocab_size, source);
  read_key(j, "initializer_range", c.initializer_range, source);
  read_key(j, "layer_norm_eps", c.layer_norm_eps, source);
  read_key(j, "pad_token_id", c.pad_token_id, source);
  read_key(j, "classifier_dropout", c.classifier_dropout, source);
  backbone.read(j, c, source);
  c.num_labels = 0;
  read_key(j, "num_labels", c.num_labels, source);
  if (auto it = j.find("id2label"); it != j.end() && it->is_object()) {
    // HF writes id2label with string keys "0".."n-1".
    std::vector<std::string> names(it->size());
    for (auto& [k, v] : it->items()) {
      size_t id = 0;
      try {
        id = std::stoul(k);
      } catch (const std::exception&) {
        fail("{}: id2label key '{}' is not an integer", source, k);
      }
      if (id >= names.size() || !v.is_string()) fail("{}: id2label entry '{}' is invalid", source, k);
      names[id] = v.get<std::string>();
    }
    c.id2label = names;
    if (c.num_labels == 0) c.num_labels = static_cast<int64_t>(names.size());
  }
  if (c.num_labels == 0) c.num_labels = 2;  // HF's default
  if (auto it = j.find("problem_type"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || !parse_problem_type(it->get<std::string>()))
      fail("{}: problem_type is {}; transformers knows single_label_classification, multi_label_classification and "
           "regression",
           source, it->dump());
    c.problem_type = parse_problem_type(it->get<std::string>());
  }
  read_key(j, "text_pair", c.text_pair, source);
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (!a.is_string()) continue;
      const std::string name = a.get<std::string>();
      if (name == head_names(c, BertHead::kMaskedLM).architecture) c.head = BertHead::kMaskedLM;
      const bool token_head = name == head_names(c, BertHead::kTokenClassification).architecture;
      if (token_head) c.head = BertHead::kTokenClassification;
      // The base model (XModel) and pretraining heads carry an encoder and
      // nothing to infer with; a task head ft lacks is named at inference.
      for (const char* task : {"ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice",
                               "ForNextSentencePrediction", "ForCausalLM", "ForSequenceClassification"}) {
        const std::string suffix(task);
        const bool ends = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
        if (ends && !token_head && name != head_names(c, BertHead::kSequenceClassification).architecture)
          c.unbuilt_head = name;
      }
    }
  }
  json extra = j;
  for (const char* key : kKnownKeys) extra.erase(key);
  c.extra_json = extra.dump();
  c.validate(source);
  return c;
}

BertConfig BertConfig::from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read model config {}: no such file or not readable", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json_string(ss.str(), path);
}

BertConfig BertConfig::preset(const std::string& name) {
  BertConfig c;
  c.vocab_size = 21128;
  if (name == "tiny") {
    c.hidden_size = 128, c.num_hidden_layers = 2, c.num_attention_heads = 2, c.intermediate_size = 512;
  } else if (name == "mini") {
    c.hidden_size = 256, c.num_hidden_layers = 4, c.num_attention_heads = 4, c.intermediate_size = 1024;
  } else if (name == "base") {
    c.hidden_size = 768, c.num_hidden_layers = 12, c.num_attention_heads = 12, c.intermediate_size = 3072;
  } else {
    fail("unknown model preset '{}'; use tiny, mini, base or a path to config.json", name);
  }
  return c;
}

void BertConfig::validate(const std::string& source) const {
  const model_detail::Backbone& backbone = model_detail::backbone_of(model_type, source);
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) fail("{}: {} must be positive, got {}", source, key, v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("num_labels", num_labels);
  if (hidden_size % num_attention_heads != 0) {
    fail("{}: hidden_size {} is not divisible by num_attention_heads {}", source, hidden_size,
         num_attention_heads);
  }
  backbone.validate(*this, source);
  for (double p : {hidden_dropout_prob, attention_probs_dropout_prob}) {
    if (p < 0.0 || p >= 1.0) fail("{}: dropout probabilities must be in [0, 1), got {}", source, p);
  }
  if (!id2label.empty() && static_cast<int64_t>(id2label.size()) != num_labels) {
    fail("{}: id2label has {} entries but num_labels is {}", source, id2label.size(), num_labels);
  }
}

int64_t BertConfig::max_tokens() const {
  return max_position_embeddings - model_detail::backbone_of(model_type, "model config").first_position(*this);
}

std::string BertConfig::to_json() const {
  json j = json::parse(extra_json.empty() ? "{}" : extra_json);
  j["architectures"] = {head_names(*this, head).architecture};
  j["model_type"] = model_type;
  if (classifier_dropout >= 0.0) j["classifier_dropout"] = classifier_dropout;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["intermediate_size"] = intermediate_size;
  j["hidden_act"] = hidden_act;
  j["hidden_dropout_prob"] = hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
  j["max_position_embeddings"] = max_position_embeddings;
  j["type_vocab_size"] = type_vocab_size;
  j["initializer_range"] = initializer_range;
  j["layer_norm_eps"] = layer_norm_eps;
  j["pad_token_id"] = pad_token_id;
  if (text_pair) j["text_pair"] = true;
  // Labels belong to a classifier: an encoder saved for embeddings or a
  // masked LM carries none, as transformers' save_pretrained leaves them out.
  if (head == BertHead::kSequenceClassification || head == BertHead::kTokenClassification) {
    j["num_labels"] = num_labels;
    if (problem_type) j["problem_type"] = problem_type_name(*problem_type);
    json id2label_json = json::object(), label2id_json = json::object();
    for (int64_t i = 0; i < num_labels; ++i) {
      std::string label = i < static_cast<int64_t>(id2label.size()) ? id2label[i] : "LABEL_" + std::to_string(i);
      id2label_json[std::to_string(i)] = label;
      label2id_json[label] = i;
    }
    j["id2label"] = id2label_json;
    j["label2id"] = label2id_json;
  }
  model_detail::backbone_of(model_type, "model config").write(j, *this);
  // The family's own spelling of the keys (DistilBERT: dim, n_layers, ...).
  for (const auto& [bert, own] : family().config_keys) {
    if (j.contains(bert)) j[own] = j[bert];
    j.erase(bert);
  }
  if (!family().token_types) j.erase("type_vocab_size");
  return j.dump(2);
}

}  // namespace ft
