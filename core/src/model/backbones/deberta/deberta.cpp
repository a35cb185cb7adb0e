// DeBERTa-v2 and v3: BERT's post-norm layer with disentangled attention
// (its own q/k/v names) over one relative-position table, a ContextPooler
// head, and the legacy masked LM (cls.predictions, BERT's layout).
// Pretrained files may carry the replaced-token-detection head and unused
// absolute positions.
#include <algorithm>
#include <memory>

#include "model/backbones/backbones.h"
#include "model/backbones/bert/bert_layer.h"
#include "model/backbones/deberta/relative_attention.h"

namespace ft {
namespace model_detail {
namespace {

using nlohmann::json;

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

class DebertaBackbone : public BertLayerBackbone {
 public:
  using BertLayerBackbone::BertLayerBackbone;
  // DebertaV2Config's defaults (deberta-v2-xlarge).
  void set_defaults(const json& j, BertConfig& c, const std::string& source) const override {
    c.vocab_size = 128100, c.hidden_size = 1536, c.num_hidden_layers = 24, c.num_attention_heads = 24;
    c.intermediate_size = 6144, c.type_vocab_size = 0, c.layer_norm_eps = 1e-7;
    read_key(j, "cls_dropout", c.classifier_dropout, source);  // classifier_dropout, when given, comes after
  }
  void read(const json& j, BertConfig& c, const std::string& source) const override { read_disentangled(j, c, source); }
  void validate(const BertConfig& c, const std::string& source) const override {
    // DeBERTa-v3 has no token types: type_vocab_size 0.
    if (c.type_vocab_size < 0) fail("{}: type_vocab_size must be 0 or more, got {}", source, c.type_vocab_size);
    const auto& d = c.deberta;
    if (d.position_buckets > 0 && d.position_buckets < 2) {
      fail("{}: position_buckets must be at least 2, got {}", source, d.position_buckets);
    }
    if (d.relative_attention && d.position_buckets > 0 &&
        d.max_relative(c.max_position_embeddings) <= d.position_buckets / 2 + 1) {
      fail("{}: max_relative_positions must exceed half the position_buckets plus one", source);
    }
  }
  // DeBERTa-v3 (position_biased_input false) has no absolute positions.
  EmbeddingsOptions embeddings(const BertConfig& c) const override {
    EmbeddingsOptions o = BertLayerBackbone::embeddings(c);
    o.positions = c.deberta.position_biased_input;
    return o;
  }
  // The relative-position table (and its LayerNorm) sit at
  // <base>.encoder.rel_embeddings and <base>.encoder.LayerNorm, HF's names,
  // and unit 0 computes them once: every layer reads the table it carries.
  std::shared_ptr<BaseModelImpl> build(const BertConfig& c) const override {
    auto base = BertLayerBackbone::build(c);
    if (c.deberta.relative_attention) {
      auto& e = *base->embeddings;
      e.relative_table = register_at(*base, "encoder.rel_embeddings", Embedding(c.carried_rows(), c.hidden_size).ptr());
      if (c.deberta.norm_rel) e.relative_norm = register_at(*base, "encoder.LayerNorm", make_layer_norm(c).ptr());
    }
    for (auto& layer : base->layers) {
      std::dynamic_pointer_cast<LayerImpl>(layer)->attention->self->set_relative(std::make_shared<RelativeAttention>(c));
    }
    return base;
  }
};

}  // namespace

std::unique_ptr<Backbone> make_deberta() {
  EncoderFamily f;
  f.model_type = "deberta-v2", f.class_prefix = "DebertaV2", f.base = "deberta";
  f.classification_head = "context_pooler";
  f.token_classification_head = "hidden_dropout";
  f.lora_targets = {"query_proj", "value_proj"};
  f.mlm_head = "cls.predictions";
  f.other_heads = {"cls.", "pooler.", "lm_predictions.", "mask_predictions.", "deberta.embeddings.position_embeddings."};
  f.prefix_tuning = false;
  f.embedding_unit_modules = {"encoder.rel_embeddings.", "encoder.LayerNorm."};
  f.layer_names = {{"attention.self.query", "attention.self.query_proj"},
                   {"attention.self.key", "attention.self.key_proj"},
                   {"attention.self.value", "attention.self.value_proj"},
                   {"attention.output.dense", "attention.output.dense"},
                   {"attention.output.LayerNorm", "attention.output.LayerNorm"},
                   {"intermediate.dense", "intermediate.dense"},
                   {"output.dense", "output.dense"},
                   {"output.LayerNorm", "output.LayerNorm"}};
  return std::make_unique<DebertaBackbone>(f);
}

}  // namespace model_detail
}  // namespace ft
