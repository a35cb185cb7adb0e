// RoBERTa, and XLM-RoBERTa and CamemBERT, whose modules and names are
// RoBERTa's (transformers copies the classes): only the class names and
// model_type differ. BERT's layer; positions numbered from padding_idx + 1.
#include <memory>

#include "model/backbones/backbones.h"
#include "model/backbones/bert/bert_layer.h"

namespace ft {
namespace model_detail {
namespace {

class RobertaBackbone : public BertLayerBackbone {
 public:
  using BertLayerBackbone::BertLayerBackbone;
  // transformers' RobertaConfig defaults, where they differ from BERT's.
  void set_defaults(const nlohmann::json&, BertConfig& c, const std::string&) const override {
    c.pad_token_id = 1, c.max_position_embeddings = 514, c.type_vocab_size = 1, c.layer_norm_eps = 1e-5;
    c.vocab_size = 50265;
  }
  void validate(const BertConfig& c, const std::string& source) const override {
    Backbone::validate(c, source);
    if (c.max_position_embeddings <= c.pad_token_id + 1) {
      fail("{}: max_position_embeddings {} leaves no position for a token: {} positions start after pad_token_id {}",
           source, c.max_position_embeddings, c.model_type, c.pad_token_id);
    }
  }
  // fairseq's convention, kept by transformers: the first real token reads
  // row pad_token_id + 1.
  int64_t first_position(const BertConfig& c) const override { return c.pad_token_id + 1; }
};

}  // namespace

std::unique_ptr<Backbone> make_roberta(const std::string& model_type, const std::string& class_prefix) {
  EncoderFamily f;
  f.model_type = model_type, f.class_prefix = class_prefix, f.base = "roberta";
  f.classification_head = "dense_tanh";
  f.mlm_head = "lm_head";
  f.other_heads = {"lm_head."};
  return std::make_unique<RobertaBackbone>(f);
}

}  // namespace model_detail
}  // namespace ft
