// BERT's modules, private to core/src/model: model.cpp builds and runs them,
// tensor_parallel.cpp slices them. Names of members registered with
// register_module() are the HF names, which is what makes weights
// interchangeable.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "ft/error.h"
#include "ft/model.h"
#include "ft/packed_attention.h"
#include "ft/token_layout.h"
#include "modern_modules.h"
#include "module_parts.h"
#include "relative_attention.h"

namespace ft {
namespace model_detail {

using torch::nn::Embedding;

struct EmbeddingsImpl : torch::nn::Module {
  Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  Norm norm{nullptr};
  Dropout dropout{nullptr};
  int64_t vocab_size;
  // Prompt tuning: [P, hidden], the rows of ids vocab_size + p (the virtual
  // tokens encoder_input() puts before every sequence).
  at::Tensor prompt;
  // Prefix tuning: HF's past_key_values_length, where the real tokens'
  // positions start.
  int64_t position_offset = 0;

  // Where the first real token's position row is: 0, or pad_token_id + 1
  // for RoBERTa (EncoderFamily::positions_after_padding).
  int64_t first_position = 0;

  // ELECTRA: <base>.embeddings_project, which widens the embeddings to the
  // layers' width. Registered by the base model (that is its HF name) and
  // applied here, so unit 0 stays one function.
  Linear project{nullptr};

  explicit EmbeddingsImpl(const BertConfig& c) : vocab_size(c.vocab_size), pad_token_id(c.pad_token_id) {
    const int64_t width = c.embedding_width();
    const bool modern = c.family().modern_layer;  // ModernBERT: words only, its own names
    word_embeddings = register_module(
        modern ? "tok_embeddings" : "word_embeddings",
        Embedding(torch::nn::EmbeddingOptions(c.vocab_size, width).padding_idx(c.pad_token_id)));
    auto positions = torch::nn::EmbeddingOptions(c.max_position_embeddings, width);
    if (c.family().positions_after_padding) {
      first_position = c.pad_token_id + 1;
      positions.padding_idx(c.pad_token_id);  // as transformers builds it: that row is padding's, never trained
    }
    // DeBERTa-v3 (position_biased_input false) has no absolute positions,
    // ModernBERT rotates queries and keys instead.
    if (!modern && (!c.family().disentangled_attention || c.deberta.position_biased_input)) {
      position_embeddings = register_module("position_embeddings", Embedding(positions));
    }
    if (c.family().token_types && c.type_vocab_size > 0) {
      token_type_embeddings = register_module("token_type_embeddings", Embedding(c.type_vocab_size, width));
    }
    norm = register_module(modern ? "norm" : "LayerNorm", make_layer_norm(c, width, !modern || c.modern.norm_bias));
    dropout = register_module(modern ? "drop" : "dropout",
                              Dropout(modern ? c.modern.embedding_dropout : c.hidden_dropout_prob));
  }

  // ids and types: [T] per token (TokenLayout); returns [T, hidden].
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& types, const TokenLayout& layout) {
    auto positions = layout.positions(ids.options().dtype(at::kLong));
    if (position_offset + first_position > 0) positions = positions + (position_offset + first_position);
    // One token type (RoBERTa): every token reads row 0, whatever ids a
    // pair-aware tokenizer gave, as transformers does when the model's
    // tokenizer passes none.
    // Positions looked up before the words: autograd runs later nodes first,
    // so the word table's gradient (DDP's row-sparse bucket) arrives early.
    const at::Tensor position_rows = position_embeddings ? position_embeddings(positions) : at::Tensor();
    at::Tensor x = words(ids);
    if (position_rows.defined()) x = x + position_rows;
    if (token_type_embeddings) {
      x = x + token_type_embeddings(token_type_embeddings->weight.size(0) == 1 ? at::zeros_like(types) : types);
    }
    x = drop(dropout, norm(x));
    if (project) x = project(x);
    if (!relative_table) return x;
    // DeBERTa: the relative-position table, normalised once, rides below the
    // tokens (BertForSequenceClassification::carried_rows).
    at::Tensor table = relative_table->weight;
    if (relative_norm) table = relative_norm(table);
    return at::cat({x, table.to(x.scalar_type())}, 0);
  }

  // DeBERTa: <base>.encoder.rel_embeddings and <base>.encoder.LayerNorm,
  // registered by the base model at those names and computed here, in unit 0.
  Embedding relative_table{nullptr};
  Norm relative_norm{nullptr};

  // Vocab-parallel under tensor parallelism: this rank holds rows
  // vocab_begin.., looks up only those ids and the group sums the results.
  std::shared_ptr<const TensorParallelOps> tp;
  int64_t vocab_begin = 0;
  int64_t pad_token_id = 0;

  // Set by a strategy that shards the table's rows (ft::FlatParamGroup).
  std::function<at::Tensor(const at::Tensor&)> sharded_lookup;

  at::Tensor lookup(const at::Tensor& ids) {
    if (sharded_lookup) return sharded_lookup(ids);
    if (!tp) return word_embeddings(ids);
    const at::Tensor& w = word_embeddings->weight;
    const at::Tensor local = ids - vocab_begin;
    const at::Tensor outside = local.lt(0).logical_or(local.ge(w.size(0)));
    const int64_t pad = pad_token_id - vocab_begin;  // the padding row gets no gradient, on its owner only
    const at::Tensor e = at::embedding(w, local.masked_fill(outside, 0), pad >= 0 && pad < w.size(0) ? pad : -1);
    return tp->reduce(e.masked_fill(outside.unsqueeze(-1), 0));
  }

  at::Tensor words(const at::Tensor& ids) {
    if (!prompt.defined()) return lookup(ids);
    const at::Tensor w = lookup(ids.clamp_max(vocab_size - 1));
    const at::Tensor p = prompt.to(w.scalar_type()).index_select(0, (ids - vocab_size).clamp_min(0));
    return at::where(ids.ge(vocab_size).unsqueeze(1), p, w);
  }
};

struct SelfAttentionImpl : torch::nn::Module {
  Linear query{nullptr}, key{nullptr}, value{nullptr};
  Dropout dropout{nullptr};
  int64_t heads, head_dim;  // this rank's, under tensor parallelism
  // The model's head dimension, which scales the scores even when this rank
  // holds only part of each head's dimensions.
  int64_t score_dim;
  // Prefix tuning: [P, hidden] keys and values every query also attends to.
  at::Tensor prefix_key, prefix_value;
  // Set when ranks share heads (TensorParallelOps::head_sum).
  std::shared_ptr<const TensorParallelOps> tp;

  // DeBERTa's disentangled attention (relative_attention.h); null otherwise.
  std::shared_ptr<RelativeAttention> relative;

  explicit SelfAttentionImpl(const BertConfig& c)
      : heads(c.num_attention_heads),
        head_dim(c.hidden_size / c.num_attention_heads),
        score_dim(c.hidden_size / c.num_attention_heads) {
    query = register_module("query", Linear(c.hidden_size, c.hidden_size));
    key = register_module("key", Linear(c.hidden_size, c.hidden_size));
    value = register_module("value", Linear(c.hidden_size, c.hidden_size));
    dropout = register_module("dropout", Dropout(c.attention_probs_dropout_prob));
    if (c.family().disentangled_attention) {
      relative = std::make_shared<RelativeAttention>(c);
      register_module("pos_dropout", relative->dropout);
    }
  }

  // [T, h] tokens -> [rows, heads, width, d]: each sequence on its own.
  at::Tensor split_heads(const at::Tensor& x, const TokenLayout& layout) const {
    return layout.to_attention(x).view({layout.rows, layout.width, heads, head_dim}).permute({0, 2, 1, 3});
  }

  // [P, hidden] -> [rows, heads, P, d] in `like`'s dtype, the same for every row.
  at::Tensor prefix_heads(const at::Tensor& prefix, const at::Tensor& like) const {
    const int64_t p = prefix.size(0);
    return prefix.to(like.scalar_type()).view({1, p, heads, head_dim}).permute({0, 2, 1, 3}).expand(
        {like.size(0), heads, p, head_dim});
  }

  // x: [T, hidden]. Only this product sees padding, up to the longest row.
  // table: DeBERTa's relative-position table [2 span, hidden], else undefined.
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& table = {}) {
    if (relative) return disentangled(x, layout, table);
    // The packed and SDPA kernels take the softmax over whole heads; shared
    // heads need their partial scores summed first (eager only).
    const AttentionKernel kind = layout.attention;
    const bool packable = !tp && !layout.sequence_lengths.empty() && packed_attention_available();
    if (packable && (kind == AttentionKernel::kAuto || kind == AttentionKernel::kPacked)) {
      return packed_attention(query(x), key(x), value(x), layout.sequence_lengths, heads, dropout->options.p(),
                              dropout->is_training(), prefix_key, prefix_value);
    }
    auto q = split_heads(query(x), layout);
    auto k = split_heads(key(x), layout);
    auto v = split_heads(value(x), layout);
    at::Tensor mask = layout.additive_mask;
    if (prefix_key.defined()) {  // HF: past_key_values before the keys, attended (mask 1)
      k = at::cat({prefix_heads(prefix_key, k), k}, 2);
      v = at::cat({prefix_heads(prefix_value, v), v}, 2);
      mask = at::cat({at::zeros({layout.rows, 1, 1, prefix_key.size(0)}, mask.options()), mask}, -1);
    }
    at::Tensor context;  // [rows, heads, width, d]
    if (!tp && sdpa_chosen(kind, dropout, x)) {
      context = sdpa_attention(q, k, v, mask, sdpa_dropout(dropout));
    } else {
      context = eager_context(q, k, v, mask);
    }
    return merge_heads(context, layout);
  }

  // matmul, softmax, dropout, matmul ("eager"), with DeBERTa's relative
  // terms added to the raw scores and their scale widened by scale_factor.
  at::Tensor eager_context(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                           const at::Tensor& bias = {}, double scale_factor = 1.0) {
    auto scores = at::matmul(q, k.transpose(-1, -2));
    if (bias.defined()) scores = scores + bias;
    if (tp) scores = tp->head_sum(scores);
    return attend(scores, static_cast<double>(score_dim) * scale_factor, mask, dropout, v);
  }

  // [rows, heads, width, d] -> [T, heads * d].
  at::Tensor merge_heads(const at::Tensor& context, const TokenLayout& layout) const {
    return layout.from_attention(context.permute({0, 2, 1, 3}).reshape({layout.rows * layout.width, heads * head_dim}));
  }

  // DeBERTa: content-to-content scores plus content-to-position (queries
  // against the table's keys) and position-to-content (keys against the
  // table's queries), each read at the bucket of the pair's distance, scaled
  // together; always eager (the bias is a full [width, width] term per head).
  at::Tensor disentangled(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& table) {
    auto q = split_heads(query(x), layout);
    auto k = split_heads(key(x), layout);
    auto v = split_heads(value(x), layout);
    at::Tensor bias;
    if (table.defined()) {
      const at::Tensor t = drop(relative->dropout, table);
      // [2 span, heads * d] -> [heads, 2 span, d], this rank's heads.
      auto table_heads = [&](const at::Tensor& projected) {
        return projected.view({t.size(0), heads, head_dim}).permute({1, 0, 2});
      };
      bias = relative->bias(q, k, table_heads(query(t)), table_heads(key(t)), layout);
    }
    return merge_heads(eager_context(q, k, v, layout.additive_mask, bias, relative->scale_factor), layout);
  }
};

// dense -> dropout -> residual -> LayerNorm (BertSelfOutput and BertOutput).
struct ResidualOutputImpl : torch::nn::Module {
  Linear dense{nullptr};
  Norm norm{nullptr};
  Dropout dropout{nullptr};

  ResidualOutputImpl(const BertConfig& c, int64_t in_features) {
    dense = register_module("dense", Linear(in_features, c.hidden_size));
    norm = register_module("LayerNorm", make_layer_norm(c));
    dropout = register_module("dropout", Dropout(c.hidden_dropout_prob));
  }
  std::shared_ptr<const TensorParallelOps> tp;  // row-parallel dense (module_parts.h)
  at::Tensor forward(const at::Tensor& x, const at::Tensor& residual) {
    return norm(drop(dropout, tp ? row_parallel(*dense, *tp, x) : dense(x)) + residual);
  }
};

struct AttentionImpl : torch::nn::Module {
  std::shared_ptr<SelfAttentionImpl> self;
  std::shared_ptr<ResidualOutputImpl> output;
  explicit AttentionImpl(const BertConfig& c) {
    self = register_module("self", std::make_shared<SelfAttentionImpl>(c));
    output = register_module("output", std::make_shared<ResidualOutputImpl>(c, c.hidden_size));
  }
  std::shared_ptr<const TensorParallelOps> tp;  // column-parallel input: f
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& table = {}) {
    // DeBERTa's table is projected by this rank's query and key rows too: f
    // sums its gradient over the group.
    const at::Tensor t = tp && table.defined() ? tp->enter(table) : table;
    return output->forward(self->forward(tp ? tp->enter(x) : x, layout, t), x);
  }
};

struct IntermediateImpl : torch::nn::Module {
  Linear dense{nullptr};
  explicit IntermediateImpl(const BertConfig& c) {
    if (c.hidden_act != "gelu") fail("config.json: hidden_act '{}' is not supported; use 'gelu'", c.hidden_act);
    dense = register_module("dense", Linear(c.hidden_size, c.intermediate_size));
  }
  at::Tensor forward(const at::Tensor& x) { return at::gelu(dense(x)); }
};

struct LayerImpl : EncoderLayer {
  std::shared_ptr<AttentionImpl> attention;
  std::shared_ptr<IntermediateImpl> intermediate;
  std::shared_ptr<ResidualOutputImpl> output;
  explicit LayerImpl(const BertConfig& c) : carried_rows(c.carried_rows()) {
    attention = register_module("attention", std::make_shared<AttentionImpl>(c));
    intermediate = register_module("intermediate", std::make_shared<IntermediateImpl>(c));
    output = register_module("output", std::make_shared<ResidualOutputImpl>(c, c.intermediate_size));
  }
  std::shared_ptr<const TensorParallelOps> tp;
  int64_t carried_rows = 0;  // DeBERTa's table below the tokens: read, and passed on unchanged
  at::Tensor forward(const at::Tensor& in, const TokenLayout& layout) override {
    const int64_t tokens = in.size(0) - carried_rows;
    const at::Tensor x = carried_rows ? in.narrow(0, 0, tokens) : in;
    const at::Tensor table = carried_rows ? in.narrow(0, tokens, carried_rows) : at::Tensor();
    auto a = attention->forward(x, layout, table);
    at::Tensor out = output->forward(intermediate->forward(tp ? tp->enter(a) : a), a);
    return carried_rows ? at::cat({out, table.to(out.scalar_type())}, 0) : out;
  }
};

struct PoolerImpl : torch::nn::Module {
  Linear dense{nullptr};
  explicit PoolerImpl(const BertConfig& c) {
    dense = register_module("dense", Linear(c.hidden_size, c.hidden_size));
  }
  // first: [rows, hidden], each row's column-0 ([CLS]) state.
  at::Tensor forward(const at::Tensor& first) { return at::tanh(dense(first)); }
};

// BERT's head. The model registers its parts under the HF names
// ("bert.pooler.*", "classifier.*"); this module only groups them.
struct HeadUnit : ClassificationHead {
  std::shared_ptr<PoolerImpl> pooler;
  Dropout dropout;
  Linear classifier;
  HeadUnit(std::shared_ptr<PoolerImpl> p, Dropout d, Linear c)
      : pooler(std::move(p)), dropout(std::move(d)), classifier(std::move(c)) {
    // Registered here too so unit(L+1)->parameters() sees them.
    register_module("pooler", pooler);
    register_module("dropout", dropout);
    register_module("classifier", classifier);
  }
  at::Tensor forward(const at::Tensor& first) override { return classifier(drop(dropout, pooler->forward(first))); }
  at::Tensor features(const at::Tensor& first) override { return pooler->forward(first); }
};

// RoBERTa's and ELECTRA's head (transformers' RobertaClassificationHead,
// ElectraClassificationHead), registered as "classifier": no pooler in the
// base model, its own dense and tanh (RoBERTa) or gelu (ELECTRA) instead.
struct DenseHeadImpl : ClassificationHead {
  Linear dense{nullptr}, out_proj{nullptr};
  Dropout dropout{nullptr};
  bool gelu;
  explicit DenseHeadImpl(const BertConfig& c) : gelu(c.family().classifier == ClassifierStyle::kDenseGelu) {
    dense = register_module("dense", Linear(c.hidden_size, c.hidden_size));
    dropout = register_module("dropout", Dropout(c.head_dropout()));
    out_proj = register_module("out_proj", Linear(c.hidden_size, c.num_labels));
  }
  at::Tensor activate(const at::Tensor& x) const { return gelu ? at::gelu(x) : at::tanh(x); }
  at::Tensor forward(const at::Tensor& first) override {
    return out_proj(drop(dropout, activate(dense(drop(dropout, first)))));
  }
  at::Tensor features(const at::Tensor& first) override { return activate(dense(first)); }
};

// DistilBERT's head. The model registers its parts under the HF names
// ("pre_classifier.*", "classifier.*"); this module only groups them.
struct PreClassifierHead : ClassificationHead {
  Linear pre_classifier, classifier;
  Dropout dropout;
  PreClassifierHead(Linear pre, Dropout d, Linear c)
      : pre_classifier(std::move(pre)), classifier(std::move(c)), dropout(std::move(d)) {
    register_module("pre_classifier", pre_classifier);
    register_module("dropout", dropout);
    register_module("classifier", classifier);
  }
  at::Tensor forward(const at::Tensor& first) override { return classifier(drop(dropout, features(first))); }
  at::Tensor features(const at::Tensor& first) override { return at::relu(pre_classifier(first)); }
};

// DeBERTa's head (ContextPooler, then DebertaV2ForSequenceClassification's
// dropout and classifier). The model registers its parts under the HF names
// ("pooler.dense", "classifier.*"); this module only groups them.
struct ContextPoolerHead : ClassificationHead {
  Linear dense, classifier;
  Dropout pooler_dropout, dropout;
  ContextPoolerHead(Linear pooler_dense, Dropout pooler_drop, Dropout d, Linear c)
      : dense(std::move(pooler_dense)), classifier(std::move(c)), pooler_dropout(std::move(pooler_drop)), dropout(std::move(d)) {
    register_module("dense", dense);
    register_module("pooler_dropout", pooler_dropout);
    register_module("dropout", dropout);
    register_module("classifier", classifier);
  }
  at::Tensor forward(const at::Tensor& first) override {
    return classifier(drop(dropout, at::gelu(dense(drop(pooler_dropout, first)))));
  }
  at::Tensor features(const at::Tensor& first) override { return at::gelu(dense(first)); }
};

// A layer's modules under a family's own names (EncoderFamily::layer_names):
// the same module objects as the LayerImpl that computes, registered at the
// family's paths, so HF names come out of named_parameters() unchanged.
inline std::shared_ptr<torch::nn::Module> renamed_layer(const std::shared_ptr<torch::nn::Module>& layer,
                                                        const EncoderFamily& family) {
  auto root = std::make_shared<torch::nn::Module>();
  const auto modules = layer->named_modules("", /*include_self=*/false);
  for (const auto& [bert, own] : family.layer_names) {
    const auto* found = modules.find(bert);
    if (!found) fail("model: {} names '{}', which BERT's layer does not have", family.model_type, bert);
    register_at(*root, own, *found);
  }
  return root;
}

// cls.predictions of HF's BertForMaskedLM: transform (dense, gelu,
// LayerNorm), then the decoder, whose weight is the word embeddings (tied)
// and whose bias is cls.predictions.bias.
struct MaskedLmHeadImpl : torch::nn::Module {
  Linear dense{nullptr};
  Norm norm{nullptr};
  at::Tensor bias;
  // ModernBERT: model.final_norm, the base model's, which this unit owns
  // and applies first; registered by the model (the base model's name).
  Norm final_norm{nullptr};
  // Not registered: the weight belongs to unit 0. Read at call time, so it
  // is whatever tensor the embeddings hold then (a gathered shard, a replica's).
  std::shared_ptr<EmbeddingsImpl> embeddings;

  // BERT (and DeBERTa's legacy head) nest the transform
  // (cls.predictions.transform.{dense,LayerNorm}); RoBERTa's lm_head holds
  // dense and layer_norm itself; DistilBERT's are the model's own top-level
  // vocab_transform and vocab_layer_norm (registered there by the model),
  // and this module, at vocab_projector, holds only the bias. ModernBERT's
  // are head.dense and head.norm, and this module is at decoder.
  MaskedLmHeadImpl(const BertConfig& c, std::shared_ptr<EmbeddingsImpl> e) : embeddings(std::move(e)) {
    if (c.family().modern_layer) {
      dense = Linear(c.hidden_size, c.hidden_size, c.modern.classifier_bias);
      norm = make_layer_norm(c, c.hidden_size, c.modern.norm_bias);
    } else if (c.family().mlm_top_level()) {
      dense = Linear(c.hidden_size, c.hidden_size);
      norm = make_layer_norm(c);
    } else if (c.family().mlm_head == "cls.predictions") {
      auto transform = register_module("transform", std::make_shared<torch::nn::Module>());
      dense = transform->register_module("dense", Linear(c.hidden_size, c.hidden_size));
      norm = transform->register_module("LayerNorm", make_layer_norm(c));
    } else {
      dense = register_module("dense", Linear(c.hidden_size, c.hidden_size));
      norm = register_module("layer_norm", make_layer_norm(c));
    }
    if (!c.family().modern_layer || c.modern.decoder_bias) bias = register_parameter("bias", at::zeros({c.vocab_size}));
  }
  // Vocab-parallel under tensor parallelism: this rank's rows of the tied
  // table (and of the bias) score its slice of the vocabulary; f sums the
  // transform's partial input gradients, and the slices are gathered.
  std::shared_ptr<const TensorParallelOps> tp;
  // hidden: [M, hidden] states of the masked tokens -> [M, vocab].
  at::Tensor forward(const at::Tensor& tokens) {
    const at::Tensor hidden = final_norm ? final_norm(tokens) : tokens;
    // LayerNorm in fp32, as autocast runs it: under bf16 the dense output is
    // bf16 and, with no fp32 residual to promote it, LibTorch's CPU kernel
    // refuses mixed input/weight dtypes. A no-op in fp32.
    const at::Tensor h = norm(at::gelu(dense(hidden)).to(at::kFloat));
    if (!tp) return at::linear(h, embeddings->word_embeddings->weight, bias);
    return tp->gather_columns(at::linear(tp->enter(h), embeddings->word_embeddings->weight, bias).to(at::kFloat));
  }
};

struct BertModelImpl : torch::nn::Module {
  std::shared_ptr<EmbeddingsImpl> embeddings;
  torch::nn::ModuleList layer;  // at "encoder.layer", DistilBERT's "transformer.layer", ModernBERT's "layers"
  std::vector<std::shared_ptr<EncoderLayer>> layers;
  std::shared_ptr<PoolerImpl> pooler;
  Norm final_norm{nullptr};  // ModernBERT's, after the last layer (owned by the head's unit)
  explicit BertModelImpl(const BertConfig& c) {
    embeddings = register_module("embeddings", std::make_shared<EmbeddingsImpl>(c));
    if (c.embedding_width() != c.hidden_size) {
      embeddings->project = register_module("embeddings_project", Linear(c.embedding_width(), c.hidden_size));
    }
    const EncoderFamily& family = c.family();
    layer = torch::nn::ModuleList(register_at(*this, family.layers, std::make_shared<torch::nn::ModuleListImpl>()));
    if (c.deberta.relative_attention) {
      embeddings->relative_table =
          register_at(*this, "encoder.rel_embeddings", Embedding(c.carried_rows(), c.hidden_size).ptr());
      if (c.deberta.norm_rel) embeddings->relative_norm = register_at(*this, "encoder.LayerNorm", make_layer_norm(c).ptr());
    }
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      if (family.modern_layer) {
        layers.push_back(std::make_shared<ModernLayerImpl>(c, i));
      } else {
        layers.push_back(std::make_shared<LayerImpl>(c));
      }
      if (family.layer_names.empty() || family.modern_layer) {
        layer->push_back(layers.back());
      } else {
        layer->push_back(renamed_layer(layers.back(), family));
      }
    }
    // BertForMaskedLM and every other family's head have no pooler (HF: add_pooling_layer=False).
    if (c.head == BertHead::kSequenceClassification && family.classifier == ClassifierStyle::kPooler) {
      pooler = register_module("pooler", std::make_shared<PoolerImpl>(c));
    }
    if (family.modern_layer) final_norm = register_module("final_norm", make_layer_norm(c, c.hidden_size, c.modern.norm_bias));
  }
  // A renamed layer registers only the modules with parameters; its dropouts
  // hear train()/eval() through the LayerImpl itself.
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    for (auto& l : layers) l->train(on);
  }
};

class DirectRunner final : public UnitRunner {
 public:
  at::Tensor run(int, RunPass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    return fn(input);
  }
};

}  // namespace model_detail

struct BertForSequenceClassification::Parts {
  std::shared_ptr<model_detail::BertModelImpl> bert;
  torch::nn::Dropout dropout{nullptr};
  model_detail::Linear classifier{nullptr};
  std::shared_ptr<model_detail::ClassificationHead> head;  // sequence classification
  std::shared_ptr<model_detail::MaskedLmHeadImpl> mlm;   // masked LM
  // The last unit's module: the head, or a group holding the masked LM
  // with the final norm it applies (ModernBERT).
  std::shared_ptr<torch::nn::Module> head_unit;
  model_detail::DirectRunner direct;
};

}  // namespace ft
