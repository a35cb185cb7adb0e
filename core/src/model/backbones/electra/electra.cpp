// ELECTRA (the discriminators people fine-tune): BERT's layer, with
// embeddings narrower than the layers (embedding_size), widened by
// <base>.embeddings_project. Its masked LM is the generator, another model.
#include <memory>

#include "model/backbones/backbones.h"
#include "model/backbones/bert/bert_layer.h"

namespace ft {
namespace model_detail {
namespace {

class ElectraBackbone : public BertLayerBackbone {
 public:
  using BertLayerBackbone::BertLayerBackbone;
  // ElectraConfig's defaults (electra-small).
  void set_defaults(const nlohmann::json& j, BertConfig& c, const std::string& source) const override {
    c.embedding_size = 128, c.hidden_size = 256, c.num_attention_heads = 4, c.intermediate_size = 1024;
    read_key(j, "embedding_size", c.embedding_size, source);
  }
  void validate(const BertConfig& c, const std::string& source) const override {
    if (c.embedding_size <= 0) fail("{}: embedding_size must be positive, got {}", source, c.embedding_size);
    Backbone::validate(c, source);
  }
  void write(nlohmann::json& j, const BertConfig& c) const override { j["embedding_size"] = c.embedding_width(); }
};

}  // namespace

std::unique_ptr<Backbone> make_electra() {
  EncoderFamily f;
  f.model_type = "electra", f.class_prefix = "Electra", f.base = "electra";
  f.classification_head = "dense_gelu";
  // The discriminator checkpoints carry discriminator_predictions.*.
  f.other_heads = {"discriminator_predictions.", "generator_predictions.", "generator_lm_head."};
  f.embedding_unit_modules = {"embeddings_project."};
  return std::make_unique<ElectraBackbone>(f);
}

}  // namespace model_detail
}  // namespace ft
