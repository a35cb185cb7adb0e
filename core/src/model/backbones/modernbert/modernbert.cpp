// ModernBERT: its own pre-norm rotary layer (modern_layer.h) and names, no
// position or type tables (the words at embeddings.tok_embeddings), and a
// final_norm after the last layer, which the heads' unit owns and applies.
// The masked LM's head.dense and head.norm are the classifier's too, so a
// masked-LM checkpoint leaves only the classifier new (and the reverse only
// the decoder).
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "model/backbones/backbones.h"
#include "model/backbones/modernbert/modern_layer.h"
#include "text_affix.h"

namespace ft {
namespace model_detail {
namespace {

using nlohmann::json;

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

// Normal(0, std) truncated at +-cutoff std, by the inverse CDF of a uniform
// draw (as torch.nn.init.trunc_normal_ samples it).
void truncated_normal(at::Tensor& t, double std, double cutoff) {
  const double edge = std::erf(cutoff / std::sqrt(2.0));  // 2 Phi(cutoff) - 1
  t.uniform_(-edge, edge).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-cutoff * std, cutoff * std);
}

// ModernBERT's initialisation, over the generic one: every weight matrix
// truncated normal, the layers' output projections scaled down by
// sqrt(2 layers), the classifier by sqrt(hidden). transformers overwrites the
// whole word table here, padding row included, and so does ft.
void init_modern(const torch::OrderedDict<std::string, at::Tensor>& params, const BertConfig& c) {
  const double in = c.initializer_range, out = in / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  for (const auto& item : params) {
    const std::string& name = item.key();
    at::Tensor p = item.value();
    if (p.dim() != 2) continue;  // norms and biases keep the generic start
    double std = in;
    if (ends_with(name, ".Wo.weight") || name == "head.dense.weight") std = out;
    if (name == "classifier.weight") std = 1.0 / std::sqrt(static_cast<double>(c.hidden_size));
    truncated_normal(p, std, c.modern.cutoff_factor);
  }
}

class ModernbertBackbone : public Backbone {
 public:
  using Backbone::Backbone;
  // ModernBertConfig's defaults (ModernBERT-base).
  void set_defaults(const json&, BertConfig& c, const std::string&) const override {
    c.vocab_size = 50368, c.intermediate_size = 1152, c.num_hidden_layers = 22, c.max_position_embeddings = 8192;
    c.layer_norm_eps = 1e-5, c.pad_token_id = 50283, c.type_vocab_size = 0, c.classifier_dropout = 0.0;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  }
  void read(const json& j, BertConfig& c, const std::string& source) const override { read_modern(j, c, source); }
  void validate(const BertConfig& c, const std::string& source) const override {
    if (c.type_vocab_size < 0) fail("{}: type_vocab_size must be 0 or more, got {}", source, c.type_vocab_size);
    if ((c.hidden_size / c.num_attention_heads) % 2 != 0) {
      fail("{}: the head dimension {} is odd; rotary positions rotate pairs of dimensions", source,
           c.hidden_size / c.num_attention_heads);
    }
    const auto& m = c.modern;
    if (m.local_attention < 2) fail("{}: local_attention must be at least 2, got {}", source, m.local_attention);
    if (m.embedding_dropout < 0.0 || m.embedding_dropout >= 1.0) {
      fail("{}: embedding_dropout must be in [0, 1), got {}", source, m.embedding_dropout);
    }
    if (!m.global.empty() && static_cast<int64_t>(m.global.size()) != c.num_hidden_layers) {
      fail("{}: layer_types has {} entries for {} layers", source, m.global.size(), c.num_hidden_layers);
    }
  }

  std::shared_ptr<BaseModelImpl> build(const BertConfig& c) const override {
    EmbeddingsOptions o;  // words only, under ModernBERT's names
    o.words = "tok_embeddings", o.norm = "norm", o.dropout = "drop";
    o.positions = false, o.token_types = false;
    o.norm_bias = c.modern.norm_bias;
    o.dropout_p = c.modern.embedding_dropout;
    auto base = std::make_shared<BaseModelImpl>();
    base->embeddings = base->register_module("embeddings", std::make_shared<EmbeddingsImpl>(c, o));
    base->layer = torch::nn::ModuleList(register_at(*base, family_.layers, std::make_shared<torch::nn::ModuleListImpl>()));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      base->layers.push_back(std::make_shared<ModernLayerImpl>(c, i));
      base->layer->push_back(base->layers.back());  // registered under its own names
    }
    base->final_norm = base->register_module("final_norm", make_layer_norm(c, c.hidden_size, c.modern.norm_bias));
    return base;
  }
  void init(const torch::OrderedDict<std::string, at::Tensor>& params, const BertConfig& c) const override {
    init_modern(params, c);
  }

  // The fused Wqkv and Wi are column-parallel by blocks (each rank's q, k
  // and v of its heads; its share of the input and of the gate), both Wo
  // row-parallel.
  std::vector<ParallelLinear> parallel_linears(const BertConfig& c) const override {
    const int64_t h = c.hidden_size, i = c.intermediate_size;
    const bool ab = c.modern.attention_bias, mb = c.modern.mlp_bias;
    return {{"attn.Wqkv", h, 3 * h, ab, {0, 3}}, {"mlp.Wi", h, 2 * i, mb, {0, 2}},
            {"attn.Wo", h, h, ab, {1, 1}},       {"mlp.Wo", i, h, mb, {1, 1}}};
  }
  std::string tensor_parallel_refusal(const BertConfig& c, int ranks) const override {
    if (c.num_attention_heads % ranks == 0) return "";
    return fmt::format("tensor parallelism over {} ranks: ModernBERT's {} attention heads must divide by {} (rotary "
                       "positions keep each head whole); pick another strategy.options.tp_size",
                       ranks, c.num_attention_heads, ranks);
  }
  std::string tensor_parallel_knows() const override {
    return "ModernBERT's layer weights, LoRA on its Linears and bottleneck adapters on attn.Wo and mlp.Wo";
  }
};

}  // namespace

std::unique_ptr<Backbone> make_modernbert() {
  EncoderFamily f;
  f.model_type = "modernbert", f.class_prefix = "ModernBert", f.base = "model";
  f.words = "embeddings.tok_embeddings";
  f.layers = "layers";
  f.base_modules = {"embeddings.", "layers.", "final_norm."};
  f.classification_head = "prediction_head";
  f.token_classification_head = "prediction_head";
  f.lora_targets = {"Wqkv"};
  f.mlm_head = "decoder";
  f.other_heads = {"decoder."};
  f.token_types = false;
  f.prefix_tuning = false;
  // Only where bottleneck adapters sit (the two output projections); the
  // layer itself is ModernBERT's own, registered under its own names.
  f.layer_names = {{"attention.output.dense", "attn.Wo"}, {"output.dense", "mlp.Wo"}};
  f.config_keys = {{"hidden_act", "hidden_activation"},
                   {"layer_norm_eps", "norm_eps"},
                   {"hidden_dropout_prob", "mlp_dropout"},
                   {"attention_probs_dropout_prob", "attention_dropout"}};
  return std::make_unique<ModernbertBackbone>(f);
}

}  // namespace model_detail
}  // namespace ft
