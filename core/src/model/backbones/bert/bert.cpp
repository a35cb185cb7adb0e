// BERT, and the backbone of every family whose layer is BERT's.
#include <memory>

#include "model/backbones/backbones.h"
#include "model/backbones/bert/bert_layer.h"

namespace ft {
namespace model_detail {

EmbeddingsOptions BertLayerBackbone::embeddings(const BertConfig& c) const {
  EmbeddingsOptions o;
  o.first_position = first_position(c);
  o.token_types = family_.token_types;
  o.dropout_p = c.hidden_dropout_prob;
  return o;
}

std::shared_ptr<BaseModelImpl> BertLayerBackbone::build(const BertConfig& c) const {
  auto base = std::make_shared<BaseModelImpl>();
  base->embeddings = base->register_module("embeddings", std::make_shared<EmbeddingsImpl>(c, embeddings(c)));
  if (c.embedding_width() != c.hidden_size) {
    base->embeddings->project = base->register_module("embeddings_project", Linear(c.embedding_width(), c.hidden_size));
  }
  base->layer = torch::nn::ModuleList(register_at(*base, family_.layers, std::make_shared<torch::nn::ModuleListImpl>()));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    base->layers.push_back(std::make_shared<LayerImpl>(c));
    if (family_.layer_names.empty()) {
      base->layer->push_back(base->layers.back());
    } else {
      base->layer->push_back(renamed_layer(base->layers.back(), family_));
    }
  }
  return base;
}

// Megatron's cut of BERT's layer: query, key, value and intermediate.dense
// by output rows (this rank's heads, its share of the FFN), the two output
// denses by input columns.
std::vector<ParallelLinear> BertLayerBackbone::parallel_linears(const BertConfig& c) const {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  const TensorCut column{0, 1}, row{1, 1};
  return {{"attention.self.query", h, h, true, column},   {"attention.self.key", h, h, true, column},
          {"attention.self.value", h, h, true, column},   {"intermediate.dense", h, i, true, column},
          {"attention.output.dense", h, h, true, row},    {"output.dense", i, h, true, row}};
}

std::vector<std::pair<std::string, TensorCut>> BertLayerBackbone::parallel_tensors() const {
  return {{"attention.self.prefix_key", TensorCut{1, 1}}, {"attention.self.prefix_value", TensorCut{1, 1}}};
}

std::string BertLayerBackbone::tensor_parallel_knows() const {
  return "BERT's layer weights, LoRA on any of the layer's Linears, bottleneck adapters on attention.output.dense "
         "and output.dense, and prefixes";
}

std::unique_ptr<Backbone> make_bert() {
  EncoderFamily f;
  f.model_type = "bert", f.class_prefix = "Bert", f.base = "bert";
  f.classification_head = "pooler";
  f.mlm_head = "cls.predictions";
  f.other_heads = {"cls."};
  return std::make_unique<BertLayerBackbone>(f);
}

}  // namespace model_detail
}  // namespace ft
