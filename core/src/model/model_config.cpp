// BertConfig <-> HF config.json.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/error.h"
#include "ft/model.h"

namespace ft {
namespace {

using nlohmann::json;

template <typename T>
void read_key(const json& j, const char* key, T& out, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    fail("{}: key '{}' has the wrong type ({})", source, key, it->type_name());
  }
}

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
    "id2label", "label2id", "architectures"};

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

// DebertaV2Config's attention keys (BertConfig::Disentangled), read after
// the BERT keys. Variants that build modules ft does not have are refused by name.
void read_disentangled(const json& j, BertConfig& c, const std::string& source) {
  auto& d = c.deberta;
  read_key(j, "relative_attention", d.relative_attention, source);
  read_key(j, "max_relative_positions", d.max_relative_positions, source);
  read_key(j, "position_buckets", d.position_buckets, source);
  read_key(j, "position_biased_input", d.position_biased_input, source);
  read_key(j, "pooler_dropout", d.pooler_dropout, source);
  std::vector<std::string> types;
  if (auto it = j.find("pos_att_type"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {  // "p2c|c2p", as older configs write it
      const std::string text = it->get<std::string>();
      for (size_t start = 0; start <= text.size();) {
        const size_t bar = std::min(text.find('|', start), text.size());
        types.push_back(text.substr(start, bar - start));
        start = bar + 1;
      }
    } else {
      read_key(j, "pos_att_type", types, source);
    }
  }
  for (auto& t : types) {
    t.erase(0, t.find_first_not_of(' '));
    t.erase(t.find_last_not_of(' ') + 1);
    if (t == "c2p") d.c2p = true;
    else if (t == "p2c") d.p2c = true;
    else fail("{}: pos_att_type '{}' is not supported; ft builds c2p and p2c", source, t);
  }
  std::string norm = "none";
  read_key(j, "norm_rel_ebd", norm, source);
  d.norm_rel = norm.find("layer_norm") != std::string::npos;
  if (!d.norm_rel && norm != "none") fail("{}: norm_rel_ebd '{}' is not supported; use layer_norm or none", source, norm);
  bool share_att_key = false;  // DebertaV2Config has no default: getattr(config, "share_att_key", False)
  read_key(j, "share_att_key", share_att_key, source);
  if (d.relative_attention && (d.c2p || d.p2c) && !share_att_key) {
    fail("{}: share_att_key is false, which needs separate pos_key_proj/pos_query_proj layers; ft builds "
         "DeBERTa-v2/v3's shared form (share_att_key true)",
         source);
  }
  int64_t conv = 0;
  read_key(j, "conv_kernel_size", conv, source);
  if (conv > 0) fail("{}: conv_kernel_size {} adds a convolution layer ft does not build; use 0", source, conv);
  for (const char* key : {"embedding_size", "pooler_hidden_size"}) {
    int64_t width = 0;
    read_key(j, key, width, source);
    if (width > 0 && width != c.hidden_size) {
      fail("{}: {} {} differs from hidden_size {}; ft builds DeBERTa with both equal", source, key, width,
           c.hidden_size);
    }
  }
  std::string act = "gelu";
  read_key(j, "pooler_hidden_act", act, source);
  if (act != "gelu") fail("{}: pooler_hidden_act '{}' is not supported; use 'gelu'", source, act);
  if (d.pooler_dropout < 0.0 || d.pooler_dropout >= 1.0) fail("{}: pooler_dropout must be in [0, 1)", source);
}

// ModernBertConfig's keys beyond BERT's (BertConfig::Modern), read after
// them: the layer kinds, RoPE bases, biases and pooling.
void read_modern(const json& j, BertConfig& c, const std::string& source) {
  auto& m = c.modern;
  read_key(j, "embedding_dropout", m.embedding_dropout, source);
  read_key(j, "norm_bias", m.norm_bias, source);
  read_key(j, "attention_bias", m.attention_bias, source);
  read_key(j, "mlp_bias", m.mlp_bias, source);
  read_key(j, "classifier_bias", m.classifier_bias, source);
  read_key(j, "decoder_bias", m.decoder_bias, source);
  read_key(j, "local_attention", m.local_attention, source);
  read_key(j, "initializer_cutoff_factor", m.cutoff_factor, source);
  if (c.hidden_act != "gelu") fail("{}: hidden_activation '{}' is not supported; use 'gelu'", source, c.hidden_act);
  std::string act = "gelu", pooling = "cls";
  read_key(j, "classifier_activation", act, source);
  if (act != "gelu") fail("{}: classifier_activation '{}' is not supported; use 'gelu'", source, act);
  read_key(j, "classifier_pooling", pooling, source);
  if (pooling != "cls" && pooling != "mean") fail("{}: classifier_pooling '{}' is not supported; use cls or mean", source, pooling);
  m.mean_pooling = pooling == "mean";
  // layer_types (transformers 5), else every n-th layer global from layer 0.
  std::vector<std::string> types;
  read_key(j, "layer_types", types, source);
  if (types.empty()) {
    int64_t every = 3;
    read_key(j, "global_attn_every_n_layers", every, source);
    if (every < 1) fail("{}: global_attn_every_n_layers must be positive, got {}", source, every);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) types.push_back(i % every ? "sliding_attention" : "full_attention");
  }
  m.global.clear();
  for (const auto& t : types) {
    if (t != "full_attention" && t != "sliding_attention") {
      fail("{}: layer_types entry '{}' is not supported; use full_attention or sliding_attention", source, t);
    }
    m.global.push_back(t == "full_attention");
  }
  // RoPE: rope_parameters per layer kind (transformers 5), else the older
  // global_rope_theta / local_rope_theta; only the default (unscaled) kind.
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    fail("{}: rope_scaling is set; ft builds ModernBERT's default (unscaled) rotary positions", source);
  }
  read_key(j, "global_rope_theta", m.global_theta, source);
  read_key(j, "local_rope_theta", m.local_theta, source);
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) fail("{}: rope_parameters must be an object", source);
    for (const auto& [kind, theta] : {std::pair<const char*, double*>{"full_attention", &m.global_theta},
                                      std::pair<const char*, double*>{"sliding_attention", &m.local_theta}}) {
      const auto p = it->find(kind);
      if (p == it->end() || p->is_null()) continue;
      const std::string where = fmt::format("rope_parameters.{}", kind);
      if (!p->is_object()) fail("{}: {} must be an object", source, where);
      if (p->value("rope_type", std::string("default")) != "default") {
        fail("{}: {}.rope_type '{}' is not supported; ft builds the default rotary positions", source, where,
             p->value("rope_type", std::string()));
      }
      read_key(*p, "rope_theta", *theta, source);
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
  const EncoderFamily& family = encoder_family(c.model_type, source);
  if (family.positions_after_padding) {  // transformers' RobertaConfig defaults, where they differ from BERT's
    c.pad_token_id = 1, c.max_position_embeddings = 514, c.type_vocab_size = 1, c.layer_norm_eps = 1e-5;
    c.vocab_size = 50265;
  }
  if (family.separate_embedding_size) {  // ElectraConfig's defaults (electra-small)
    c.embedding_size = 128, c.hidden_size = 256, c.num_attention_heads = 4, c.intermediate_size = 1024;
    read_key(j, "embedding_size", c.embedding_size, source);
  }
  for (const auto& [bert, own] : family.config_keys) {  // the family's names read as BertConfig's
    if (j.contains(own)) j[bert] = j[own];
    j.erase(own);
  }
  if (c.model_type == "distilbert") {  // DistilBertConfig's defaults
    c.num_hidden_layers = 6, c.classifier_dropout = 0.2;
    if (auto it = j.find("sinusoidal_pos_embds"); it != j.end() && it->is_boolean() && it->get<bool>()) {
      fail("{}: sinusoidal_pos_embds is true; ft builds learned position embeddings (DistilBERT's default)", source);
    }
  }
  if (family.disentangled_attention) {  // DebertaV2Config's defaults (deberta-v2-xlarge)
    c.vocab_size = 128100, c.hidden_size = 1536, c.num_hidden_layers = 24, c.num_attention_heads = 24;
    c.intermediate_size = 6144, c.type_vocab_size = 0, c.layer_norm_eps = 1e-7;
    read_key(j, "cls_dropout", c.classifier_dropout, source);  // classifier_dropout, when given, comes after
  }
  if (family.modern_layer) {  // ModernBertConfig's defaults (ModernBERT-base)
    c.vocab_size = 50368, c.intermediate_size = 1152, c.num_hidden_layers = 22, c.max_position_embeddings = 8192;
    c.layer_norm_eps = 1e-5, c.pad_token_id = 50283, c.type_vocab_size = 0, c.classifier_dropout = 0.0;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  }
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
  if (family.disentangled_attention) read_disentangled(j, c, source);
  if (family.modern_layer) read_modern(j, c, source);
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
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const auto& a : *it)
      if (a.is_string() && a.get<std::string>() == family.architecture(true)) c.head = BertHead::kMaskedLM;
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
  const EncoderFamily& f = encoder_family(model_type, source);
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) fail("{}: {} must be positive, got {}", source, key, v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  if (f.separate_embedding_size) positive("embedding_size", embedding_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  if (f.disentangled_attention || f.modern_layer) {  // DeBERTa-v3 and ModernBERT have no token types: type_vocab_size 0
    if (type_vocab_size < 0) fail("{}: type_vocab_size must be 0 or more, got {}", source, type_vocab_size);
    if (deberta.position_buckets > 0 && deberta.position_buckets < 2) {
      fail("{}: position_buckets must be at least 2, got {}", source, deberta.position_buckets);
    }
    if (deberta.relative_attention && deberta.position_buckets > 0 &&
        deberta.max_relative(max_position_embeddings) <= deberta.position_buckets / 2 + 1) {
      fail("{}: max_relative_positions must exceed half the position_buckets plus one", source);
    }
  } else {
    positive("type_vocab_size", type_vocab_size);
  }
  positive("num_labels", num_labels);
  if (f.positions_after_padding && max_position_embeddings <= pad_token_id + 1) {
    fail("{}: max_position_embeddings {} leaves no position for a token: {} positions start after pad_token_id {}",
         source, max_position_embeddings, model_type, pad_token_id);
  }
  if (hidden_size % num_attention_heads != 0) {
    fail("{}: hidden_size {} is not divisible by num_attention_heads {}", source, hidden_size,
         num_attention_heads);
  }
  if (f.modern_layer) {
    if ((hidden_size / num_attention_heads) % 2 != 0) {
      fail("{}: the head dimension {} is odd; rotary positions rotate pairs of dimensions", source,
           hidden_size / num_attention_heads);
    }
    if (modern.local_attention < 2) fail("{}: local_attention must be at least 2, got {}", source, modern.local_attention);
    if (modern.embedding_dropout < 0.0 || modern.embedding_dropout >= 1.0) {
      fail("{}: embedding_dropout must be in [0, 1), got {}", source, modern.embedding_dropout);
    }
    if (!modern.global.empty() && static_cast<int64_t>(modern.global.size()) != num_hidden_layers) {
      fail("{}: layer_types has {} entries for {} layers", source, modern.global.size(), num_hidden_layers);
    }
  }
  for (double p : {hidden_dropout_prob, attention_probs_dropout_prob}) {
    if (p < 0.0 || p >= 1.0) fail("{}: dropout probabilities must be in [0, 1), got {}", source, p);
  }
  if (!id2label.empty() && static_cast<int64_t>(id2label.size()) != num_labels) {
    fail("{}: id2label has {} entries but num_labels is {}", source, id2label.size(), num_labels);
  }
}

std::string BertConfig::to_json() const {
  json j = json::parse(extra_json.empty() ? "{}" : extra_json);
  j["architectures"] = {family().architecture(head == BertHead::kMaskedLM)};
  j["model_type"] = model_type;
  if (classifier_dropout >= 0.0) j["classifier_dropout"] = classifier_dropout;
  if (family().separate_embedding_size) j["embedding_size"] = embedding_width();
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
  j["num_labels"] = num_labels;
  json id2label_json = json::object(), label2id_json = json::object();
  for (int64_t i = 0; i < num_labels; ++i) {
    std::string label = i < static_cast<int64_t>(id2label.size()) ? id2label[i] : "LABEL_" + std::to_string(i);
    id2label_json[std::to_string(i)] = label;
    label2id_json[label] = i;
  }
  j["id2label"] = id2label_json;
  j["label2id"] = label2id_json;
  // The family's own spelling of the keys (DistilBERT: dim, n_layers, ...).
  for (const auto& [bert, own] : family().config_keys) {
    if (j.contains(bert)) j[own] = j[bert];
    j.erase(bert);
  }
  if (!family().token_types) j.erase("type_vocab_size");
  return j.dump(2);
}

}  // namespace ft
