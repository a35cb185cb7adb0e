// BERT modules. Names of members registered with register_module() are the
// HF names, which is what makes weights interchangeable.
#include "ft/model.h"

#include <cmath>
#include <set>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/init.h>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <fmt/ranges.h>

#include "ft/activation_checkpoint.h"
#include "ft/dropout.h"
#include "ft/error.h"
#include "ft/packed_attention.h"
#include "ft/token_layout.h"

namespace ft {
namespace {

using torch::nn::Dropout;
using torch::nn::Embedding;
using torch::nn::LayerNorm;
using Linear = AdaptableLinear;  // LoRA can wrap any of them

// Every dropout of the model goes through ft's counter-based kernel.
at::Tensor drop(const Dropout& d, const at::Tensor& x) { return fast_dropout(x, d->options.p(), d->is_training()); }

LayerNorm make_layer_norm(const BertConfig& c) {
  return LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
}

struct EmbeddingsImpl : torch::nn::Module {
  Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  LayerNorm norm{nullptr};
  Dropout dropout{nullptr};
  int64_t vocab_size;
  // Prompt tuning: [P, hidden], the rows of ids vocab_size + p (the virtual
  // tokens encoder_input() puts before every sequence).
  at::Tensor prompt;
  // Prefix tuning: HF's past_key_values_length, where the real tokens'
  // positions start.
  int64_t position_offset = 0;

  explicit EmbeddingsImpl(const BertConfig& c) : vocab_size(c.vocab_size), pad_token_id(c.pad_token_id) {
    word_embeddings = register_module(
        "word_embeddings",
        Embedding(torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size).padding_idx(c.pad_token_id)));
    position_embeddings = register_module(
        "position_embeddings", Embedding(c.max_position_embeddings, c.hidden_size));
    token_type_embeddings =
        register_module("token_type_embeddings", Embedding(c.type_vocab_size, c.hidden_size));
    norm = register_module("LayerNorm", make_layer_norm(c));
    dropout = register_module("dropout", Dropout(c.hidden_dropout_prob));
  }

  // ids and types: [T] per token (TokenLayout); returns [T, hidden].
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& types, const TokenLayout& layout) {
    auto positions = layout.positions(ids.options().dtype(at::kLong));
    if (position_offset > 0) positions = positions + position_offset;
    auto x = words(ids) + token_type_embeddings(types) + position_embeddings(positions);
    return drop(dropout, norm(x));
  }

  // Vocab-parallel under tensor parallelism: this rank holds rows
  // vocab_begin.., looks up only those ids and the group sums the results.
  std::shared_ptr<const TensorParallelOps> tp;
  int64_t vocab_begin = 0;
  int64_t pad_token_id = 0;

  at::Tensor lookup(const at::Tensor& ids) {
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

// The batch as the encoder reads it. Under prompt tuning, P virtual-token
// columns come first, as PEFT prepends the prompt to inputs_embeds: ids
// vocab_size + p (the embeddings substitute the prompt's rows), attended,
// token type 0. Either method moves the real tokens' positions up by P.
Batch encoder_input(const Batch& batch, const BertConfig& config, int64_t prompt, int64_t prefix) {
  const int64_t virtual_tokens = prompt + prefix, seq = batch.input_ids.size(1);
  if (virtual_tokens > 0 && seq + virtual_tokens > config.max_position_embeddings) {
    fail("model: {} tokens after {} virtual tokens (prompt or prefix tuning) need {} positions, but "
         "max_position_embeddings is {}; cut the input to {} tokens (data.max_seq_len, ft predict --max-length)",
         seq, virtual_tokens, seq + virtual_tokens, config.max_position_embeddings,
         config.max_position_embeddings - virtual_tokens);
  }
  if (prompt == 0) return batch;
  const int64_t rows = batch.input_ids.size(0);
  auto columns = [&](const at::Tensor& like, const at::Tensor& values) {
    return at::cat({values.to(like.options()).expand({rows, prompt}), like}, 1);
  };
  Batch out = batch;
  out.input_ids = columns(batch.input_ids, at::arange(config.vocab_size, config.vocab_size + prompt).view({1, prompt}));
  out.attention_mask = columns(batch.attention_mask, at::ones({1, prompt}));
  out.token_type_ids = columns(batch.token_type_ids, at::zeros({1, prompt}));
  if (batch.mlm_positions.defined()) {  // each row's columns moved right by P
    out.mlm_positions = batch.mlm_positions + (at::floor_divide(batch.mlm_positions, seq) + 1) * prompt;
  }
  return out;
}

struct SelfAttentionImpl : torch::nn::Module {
  Linear query{nullptr}, key{nullptr}, value{nullptr};
  Dropout dropout{nullptr};
  int64_t heads, head_dim;
  // Prefix tuning: [P, hidden] keys and values every query also attends to.
  at::Tensor prefix_key, prefix_value;

  explicit SelfAttentionImpl(const BertConfig& c)
      : heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads) {
    query = register_module("query", Linear(c.hidden_size, c.hidden_size));
    key = register_module("key", Linear(c.hidden_size, c.hidden_size));
    value = register_module("value", Linear(c.hidden_size, c.hidden_size));
    dropout = register_module("dropout", Dropout(c.attention_probs_dropout_prob));
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
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout) {
    if (!layout.sequence_lengths.empty() && packed_attention_available()) {
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
    auto scores = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim));
    scores = scores + mask;
    auto probs = drop(dropout, at::softmax(scores, -1));
    auto context = at::matmul(probs, v).permute({0, 2, 1, 3}).reshape({layout.rows * layout.width, heads * head_dim});
    return layout.from_attention(context);
  }
};

// dense -> dropout -> residual -> LayerNorm (BertSelfOutput and BertOutput).
struct ResidualOutputImpl : torch::nn::Module {
  Linear dense{nullptr};
  LayerNorm norm{nullptr};
  Dropout dropout{nullptr};

  ResidualOutputImpl(const BertConfig& c, int64_t in_features) {
    dense = register_module("dense", Linear(in_features, c.hidden_size));
    norm = register_module("LayerNorm", make_layer_norm(c));
    dropout = register_module("dropout", Dropout(c.hidden_dropout_prob));
  }
  // Row-parallel under tensor parallelism: partial products summed, then the bias once.
  std::shared_ptr<const TensorParallelOps> tp;
  at::Tensor forward(const at::Tensor& x, const at::Tensor& residual) {
    at::Tensor y = tp ? tp->reduce(at::linear(x, dense->weight)) + dense->bias : dense(x);
    return norm(drop(dropout, y) + residual);
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
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout) {
    return output->forward(self->forward(tp ? tp->enter(x) : x, layout), x);
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

struct LayerImpl : torch::nn::Module {
  std::shared_ptr<AttentionImpl> attention;
  std::shared_ptr<IntermediateImpl> intermediate;
  std::shared_ptr<ResidualOutputImpl> output;
  explicit LayerImpl(const BertConfig& c) {
    attention = register_module("attention", std::make_shared<AttentionImpl>(c));
    intermediate = register_module("intermediate", std::make_shared<IntermediateImpl>(c));
    output = register_module("output", std::make_shared<ResidualOutputImpl>(c, c.intermediate_size));
  }
  std::shared_ptr<const TensorParallelOps> tp;
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout) {
    auto a = attention->forward(x, layout);
    return output->forward(intermediate->forward(tp ? tp->enter(a) : a), a);
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

// The classification head as one unit. The model registers its parts under
// the HF names ("bert.pooler.*", "classifier.*"); this module only groups them.
struct HeadUnit : torch::nn::Module {
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
  at::Tensor forward(const at::Tensor& first) {
    return classifier(drop(dropout, pooler->forward(first)));
  }
};

// cls.predictions of HF's BertForMaskedLM: transform (dense, gelu,
// LayerNorm), then the decoder, whose weight is the word embeddings (tied)
// and whose bias is cls.predictions.bias.
struct MaskedLmHeadImpl : torch::nn::Module {
  Linear dense{nullptr};
  LayerNorm norm{nullptr};
  at::Tensor bias;
  // Not registered: the weight belongs to unit 0. Read at call time, so it
  // is whatever tensor the embeddings hold then (a gathered shard, a replica's).
  std::shared_ptr<EmbeddingsImpl> embeddings;

  MaskedLmHeadImpl(const BertConfig& c, std::shared_ptr<EmbeddingsImpl> e) : embeddings(std::move(e)) {
    auto transform = register_module("transform", std::make_shared<torch::nn::Module>());
    dense = transform->register_module("dense", Linear(c.hidden_size, c.hidden_size));
    norm = transform->register_module("LayerNorm", make_layer_norm(c));
    bias = register_parameter("bias", at::zeros({c.vocab_size}));
  }
  // hidden: [M, hidden] states of the masked tokens -> [M, vocab].
  at::Tensor forward(const at::Tensor& hidden) {
    return at::linear(norm(at::gelu(dense(hidden))), embeddings->word_embeddings->weight, bias);
  }
};

struct BertModelImpl : torch::nn::Module {
  std::shared_ptr<EmbeddingsImpl> embeddings;
  std::shared_ptr<torch::nn::Module> encoder;
  torch::nn::ModuleList layer;
  std::vector<std::shared_ptr<LayerImpl>> layers;
  std::shared_ptr<PoolerImpl> pooler;
  explicit BertModelImpl(const BertConfig& c) {
    embeddings = register_module("embeddings", std::make_shared<EmbeddingsImpl>(c));
    encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
    layer = encoder->register_module("layer", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      layers.push_back(std::make_shared<LayerImpl>(c));
      layer->push_back(layers.back());
    }
    // BertForMaskedLM has no pooler (HF: add_pooling_layer=False).
    if (c.head == BertHead::kSequenceClassification) pooler = register_module("pooler", std::make_shared<PoolerImpl>(c));
  }
};

class DirectRunner final : public UnitRunner {
 public:
  at::Tensor run(int, RunPass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    return fn(input);
  }
};

}  // namespace

struct BertForSequenceClassification::Parts {
  std::shared_ptr<BertModelImpl> bert;
  Dropout dropout{nullptr};
  Linear classifier{nullptr};
  std::shared_ptr<HeadUnit> head;             // sequence classification
  std::shared_ptr<MaskedLmHeadImpl> mlm;      // masked LM
  DirectRunner direct;
};

BertForSequenceClassification::BertForSequenceClassification(const BertConfig& config)
    : config_(config), parts_(std::make_unique<Parts>()) {
  config_.validate("model config");
  parts_->bert = register_module("bert", std::make_shared<BertModelImpl>(config_));
  if (config_.head == BertHead::kMaskedLM) {
    auto cls = register_module("cls", std::make_shared<torch::nn::Module>());
    parts_->mlm = cls->register_module("predictions", std::make_shared<MaskedLmHeadImpl>(config_, parts_->bert->embeddings));
  } else {
    parts_->dropout = register_module("dropout", Dropout(config_.hidden_dropout_prob));
    parts_->classifier = register_module("classifier", Linear(config_.hidden_size, config_.num_labels));
    parts_->head = std::make_shared<HeadUnit>(parts_->bert->pooler, parts_->dropout, parts_->classifier);
  }
  init_weights();
}

BertForSequenceClassification::~BertForSequenceClassification() = default;

int BertForSequenceClassification::num_units() const {
  return static_cast<int>(config_.num_hidden_layers) + 2;
}

std::shared_ptr<torch::nn::Module> BertForSequenceClassification::unit(int index) const {
  if (index == 0) return parts_->bert->embeddings;
  if (index == num_units() - 1) {
    if (parts_->mlm) return parts_->mlm;
    return parts_->head;
  }
  return parts_->bert->layers.at(index - 1);
}

std::vector<int> BertForSequenceClassification::units_read_by(int index) const {
  if (parts_->mlm && index == num_units() - 1) return {0};
  return {};
}

std::string BertForSequenceClassification::unit_prefix(int index) const {
  if (index == 0) return "bert.embeddings.";
  if (index == num_units() - 1) return "";  // bert.pooler.* and classifier.*, or cls.predictions.*
  return "bert.encoder.layer." + std::to_string(index - 1) + ".";
}

int BertForSequenceClassification::unit_of(const std::string& name) const {
  if (name.rfind("bert.embeddings.", 0) == 0) return 0;
  const std::string layer_prefix = "bert.encoder.layer.";
  if (name.rfind(layer_prefix, 0) == 0) {
    return 1 + std::stoi(name.substr(layer_prefix.size()));
  }
  return num_units() - 1;
}

namespace {
// Rows (dim 0) or columns (dim 1) [rank*n/size, (rank+1)*n/size) of a Linear.
void keep_slice(Linear& l, int dim, const TensorParallelOps& ops, bool slice_bias) {
  c10::NoGradGuard no_grad;
  const int64_t n = l->weight.size(dim) / ops.size;
  l->weight.set_data(l->weight.narrow(dim, ops.rank * n, n).clone());
  if (slice_bias) l->bias.set_data(l->bias.narrow(0, ops.rank * n, n).clone());
}
}  // namespace

std::map<std::string, int> BertForSequenceClassification::shard_tensor_parallel(const TensorParallelOps& ops) {
  const auto& c = config_;
  if (c.num_attention_heads % ops.size != 0 || c.intermediate_size % ops.size != 0) {
    fail("tensor parallelism over {} ranks needs num_attention_heads ({}) and intermediate_size ({}) divisible by {}",
         ops.size, c.num_attention_heads, c.intermediate_size, ops.size);
  }
  auto shared = std::make_shared<const TensorParallelOps>(ops);
  std::map<std::string, int> split;
  // Vocab-parallel word embeddings, unless the tied MLM decoder needs the
  // whole table on every rank or the rows do not divide evenly.
  auto& emb = *parts_->bert->embeddings;
  if (!parts_->mlm && c.vocab_size % ops.size == 0) {
    c10::NoGradGuard no_grad;
    const int64_t rows = c.vocab_size / ops.size;
    emb.word_embeddings->weight.set_data(emb.word_embeddings->weight.narrow(0, ops.rank * rows, rows).clone());
    emb.vocab_begin = ops.rank * rows;
    emb.tp = shared;
    split["bert.embeddings.word_embeddings.weight"] = 0;
  }
  for (size_t i = 0; i < parts_->bert->layers.size(); ++i) {
    auto& layer = *parts_->bert->layers[i];
    const std::string prefix = unit_prefix(static_cast<int>(i) + 1);
    for (const auto& p : layer.named_parameters()) {
      static const std::set<std::string> kOwn = {
          "attention.self.query.weight", "attention.self.query.bias", "attention.self.key.weight",
          "attention.self.key.bias", "attention.self.value.weight", "attention.self.value.bias",
          "attention.output.dense.weight", "attention.output.dense.bias", "attention.output.LayerNorm.weight",
          "attention.output.LayerNorm.bias", "intermediate.dense.weight", "intermediate.dense.bias",
          "output.dense.weight", "output.dense.bias", "output.LayerNorm.weight", "output.LayerNorm.bias"};
      if (!kOwn.count(p.key())) {
        fail("tensor parallelism slices BERT's own layer weights; {}{} (LoRA, adapters or prefix tuning) is not one "
             "of them: train it with pipeline, ddp or a zero/fsdp strategy",
             prefix, p.key());
      }
    }
    auto& self = *layer.attention->self;
    for (auto* l : {&self.query, &self.key, &self.value}) keep_slice(*l, 0, ops, true);
    self.heads /= ops.size;
    keep_slice(layer.intermediate->dense, 0, ops, true);
    keep_slice(layer.attention->output->dense, 1, ops, false);
    keep_slice(layer.output->dense, 1, ops, false);
    layer.attention->tp = layer.attention->output->tp = layer.tp = layer.output->tp = shared;
    for (const char* name : {"attention.self.query.", "attention.self.key.", "attention.self.value.",
                             "intermediate.dense."}) {
      split[prefix + name + "weight"] = 0;
      split[prefix + name + "bias"] = 0;
    }
    split[prefix + "attention.output.dense.weight"] = 1;
    split[prefix + "output.dense.weight"] = 1;
  }
  return split;
}

std::shared_ptr<const TokenLayout> BertForSequenceClassification::layout_of(const Batch& batch) const {
  return std::make_shared<const TokenLayout>(padding_free_ ? TokenLayout::packed(batch.attention_mask)
                                                           : TokenLayout::padded(batch.attention_mask));
}

at::Tensor BertForSequenceClassification::pooled_output(const Batch& input) {
  if (!parts_->head) fail("a masked-LM model has no pooler; fine-tune it first (ft run --set model.weights=DIR)");
  const Batch batch = encoder_input(input, config_, prompt_length(), prefix_length());
  const auto layout = layout_of(batch);
  auto& bert = *parts_->bert;
  at::Tensor x = bert.embeddings->forward(layout->gather_tokens(batch.input_ids),
                                          layout->gather_tokens(batch.token_type_ids), *layout);
  for (auto& layer : bert.layers) x = layer->forward(x, *layout);
  return bert.pooler->forward(layout->first_tokens(x)).to(at::kFloat);
}

at::Tensor BertForSequenceClassification::forward(const Batch& input) {
  const Batch batch = encoder_input(input, config_, prompt_length(), prefix_length());
  UnitRunner& run = runner_ ? *runner_ : parts_->direct;
  // Shared: with checkpointing, layers run again in backward and need it then.
  auto layout = layout_of(batch);
  auto& bert = *parts_->bert;
  auto x = run.run(0, RunPass::kPlain, layout->gather_tokens(batch.input_ids), [&](const at::Tensor& ids) {
    return bert.embeddings->forward(ids, layout->gather_tokens(batch.token_type_ids), *layout);
  });
  for (int i = 0; i < static_cast<int>(bert.layers.size()); ++i) {
    auto layer_unit = [runner = &run, layer = bert.layers[i], layout, i](const at::Tensor& h, RunPass pass) {
      return runner->run(i + 1, pass, h, [&](const at::Tensor& in) { return layer->forward(in, *layout); });
    };
    x = checkpointing_ && run.computes(i + 1) ? checkpoint(x, bert.layers[i]->parameters(), layer_unit)
                                              : layer_unit(x, RunPass::kPlain);
  }
  at::Tensor logits;
  if (parts_->mlm) {
    if (!batch.mlm_positions.defined()) {
      fail("this is a masked-LM model (config.json: BertForMaskedLM); fine-tune it with `ft run --set model.weights=DIR`, "
           "or continue pretraining with `ft pretrain`");
    }
    const auto masked = layout->token_index(batch.mlm_positions);
    logits = run.run(num_units() - 1, RunPass::kPlain, x,
                     [&](const at::Tensor& h) { return parts_->mlm->forward(h.index_select(0, masked)); });
  } else {
    logits = run.run(num_units() - 1, RunPass::kPlain, x,
                     [&](const at::Tensor& h) { return parts_->head->forward(layout->first_tokens(h)); });
  }
  return logits.to(at::kFloat);
}

void BertForSequenceClassification::add_prompt_embeddings(const at::Tensor& prompt) {
  auto& e = *parts_->bert->embeddings;
  if (prompt_length() > 0 || prefix_length() > 0) fail("model: prompt learning is applied already (applied twice?)");
  if (prompt.dim() != 2 || prompt.size(0) < 1 || prompt.size(1) != config_.hidden_size) {
    fail("model: prompt embeddings must be [P, {}], got {}", config_.hidden_size, fmt::join(prompt.sizes(), "x"));
  }
  const auto opts = e.word_embeddings->weight.options();
  e.prompt = e.register_parameter("prompt_embeddings", prompt.detach().to(opts, /*non_blocking=*/false, /*copy=*/true));
}

void BertForSequenceClassification::add_attention_prefix(const std::vector<at::Tensor>& keys,
                                                         const std::vector<at::Tensor>& values) {
  auto& bert = *parts_->bert;
  if (prompt_length() > 0 || prefix_length() > 0) fail("model: prompt learning is applied already (applied twice?)");
  if (keys.size() != bert.layers.size() || values.size() != bert.layers.size()) {
    fail("model: a prefix needs keys and values for each of the {} layers, got {} and {}", bert.layers.size(),
         keys.size(), values.size());
  }
  const int64_t length = keys.empty() ? 0 : keys[0].size(0);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (const at::Tensor* t : {&keys[i], &values[i]}) {
      if (t->dim() != 2 || t->size(0) != length || length < 1 || t->size(1) != config_.hidden_size) {
        fail("model: layer {}'s prefix must be [P, {}] like layer 0's, got {}", i, config_.hidden_size,
             fmt::join(t->sizes(), "x"));
      }
    }
    auto& self = *bert.layers[i]->attention->self;
    const auto opts = self.key->weight.options();
    self.prefix_key = self.register_parameter("prefix_key", keys[i].detach().to(opts, false, /*copy=*/true));
    self.prefix_value = self.register_parameter("prefix_value", values[i].detach().to(opts, false, /*copy=*/true));
  }
  bert.embeddings->position_offset = length;
}

int64_t BertForSequenceClassification::prompt_length() const {
  const at::Tensor& p = parts_->bert->embeddings->prompt;
  return p.defined() ? p.size(0) : 0;
}

int64_t BertForSequenceClassification::prefix_length() const { return parts_->bert->embeddings->position_offset; }

void BertForSequenceClassification::init_weights() {
  torch::NoGradGuard no_grad;
  const double std = config_.initializer_range;
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    const bool is_norm = name.find("LayerNorm") != std::string::npos;
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm) {
      is_bias ? p.zero_() : p.fill_(1.0);
    } else if (is_bias) {
      p.zero_();
    } else {
      p.normal_(0.0, std);
    }
  }
  auto& word = parts_->bert->embeddings->word_embeddings->weight;
  if (config_.pad_token_id >= 0 && config_.pad_token_id < config_.vocab_size) word[config_.pad_token_id].zero_();
}

std::vector<TensorList> BertForSequenceClassification::unit_parameters() const {
  std::vector<TensorList> units(num_units());
  for (const auto& item : named_parameters()) units[unit_of(item.key())].emplace_back(item.key(), item.value());
  return units;
}

TensorList BertForSequenceClassification::weights() const {
  TensorList out;
  for (const auto& item : named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

BertForSequenceClassification::LoadReport BertForSequenceClassification::load_weights(const TensorList& weights,
                                                                                      const std::string& source,
                                                                                      bool head_optional) {
  // Other heads' tensors, and a buffer HF keeps in some files.
  static const char* kOtherHeads[] = {"bert.embeddings.position_ids", "cls.", "bert.pooler.", "bert.pooler_",
                                      "classifier."};
  std::map<std::string, const at::Tensor*> given;
  for (const auto& [name, t] : weights) {
    // Checkpoints saved from a DDP-wrapped model carry "module." prefixes.
    std::string key = name.rfind("module.", 0) == 0 ? name.substr(7) : name;
    given[key] = &t;
  }
  // The head may be absent as a whole (it then keeps its initialisation);
  // half a head is a mismatch.
  const int head = num_units() - 1;
  int head_given = 0;
  for (const auto& item : named_parameters())
    if (unit_of(item.key()) == head) head_given += static_cast<int>(given.count(item.key()));
  const bool head_absent = head_optional && head_given == 0;
  torch::NoGradGuard no_grad;
  LoadReport report;
  std::set<std::string> used;
  for (auto& item : named_parameters()) {
    auto it = given.find(item.key());
    if (it == given.end()) {
      if (head_absent && unit_of(item.key()) == head) {
        report.initialised.push_back(item.key());
        continue;
      }
      fail("{}: missing tensor '{}' (the checkpoint does not match config.json)", source, item.key());
    }
    const at::Tensor& src = *it->second;
    if (src.sizes() != item.value().sizes()) {
      fail("{}: tensor '{}' has shape {}, config.json implies {}", source, item.key(),
           fmt::format("{}", fmt::join(src.sizes(), "x")),
           fmt::format("{}", fmt::join(item.value().sizes(), "x")));
    }
    if (!src.is_floating_point()) {
      fail("{}: tensor '{}' has dtype {}, but config.json describes a model with floating-point weights", source,
           item.key(), c10::toString(src.scalar_type()));
    }
    item.value().copy_(src);
    used.insert(item.key());
  }
  for (const auto& [key, t] : given) {
    if (used.count(key)) continue;
    bool ignorable = false;
    for (const char* prefix : kOtherHeads) ignorable |= key.rfind(prefix, 0) == 0;
    if (!ignorable) fail("{}: unexpected tensor '{}' (not part of this BERT model)", source, key);
    if (key != "bert.embeddings.position_ids") report.ignored.push_back(key);
  }
  return report;
}

}  // namespace ft
