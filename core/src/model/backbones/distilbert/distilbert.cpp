// DistilBERT: BERT's post-norm layer under its own names and config keys,
// no token types and no pooler; its masked LM is top-level modules.
#include <memory>

#include "model/backbones/backbones.h"
#include "model/backbones/bert/bert_layer.h"

namespace ft {
namespace model_detail {
namespace {

class DistilbertBackbone : public BertLayerBackbone {
 public:
  using BertLayerBackbone::BertLayerBackbone;
  // DistilBertConfig's defaults.
  void set_defaults(const nlohmann::json& j, BertConfig& c, const std::string& source) const override {
    c.num_hidden_layers = 6, c.classifier_dropout = 0.2;
    if (auto it = j.find("sinusoidal_pos_embds"); it != j.end() && it->is_boolean() && it->get<bool>()) {
      fail("{}: sinusoidal_pos_embds is true; ft builds learned position embeddings (DistilBERT's default)", source);
    }
  }
};

}  // namespace

std::unique_ptr<Backbone> make_distilbert() {
  EncoderFamily f;
  f.model_type = "distilbert", f.class_prefix = "DistilBert", f.base = "distilbert";
  f.classification_head = "pre_classifier";
  f.token_classification_head = "hidden_dropout";
  f.lora_targets = {"q_lin", "v_lin"};
  f.mlm_head = "vocab_projector";
  f.other_heads = {"vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "pre_classifier."};
  f.token_types = false;
  f.prefix_tuning = false;  // the prefix lives in BERT's attention module, which these names do not reach
  f.layers = "transformer.layer";
  f.layer_names = {{"attention.self.query", "attention.q_lin"},     {"attention.self.key", "attention.k_lin"},
                   {"attention.self.value", "attention.v_lin"},     {"attention.output.dense", "attention.out_lin"},
                   {"attention.output.LayerNorm", "sa_layer_norm"}, {"intermediate.dense", "ffn.lin1"},
                   {"output.dense", "ffn.lin2"},                    {"output.LayerNorm", "output_layer_norm"}};
  f.config_keys = {{"hidden_size", "dim"},
                   {"num_hidden_layers", "n_layers"},
                   {"num_attention_heads", "n_heads"},
                   {"intermediate_size", "hidden_dim"},
                   {"hidden_dropout_prob", "dropout"},
                   {"attention_probs_dropout_prob", "attention_dropout"},
                   {"hidden_act", "activation"},
                   {"classifier_dropout", "seq_classif_dropout"}};
  return std::make_unique<DistilbertBackbone>(f);
}

}  // namespace model_detail
}  // namespace ft
