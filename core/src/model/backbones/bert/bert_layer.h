// BERT's post-norm encoder layer, private to core/src/model: BERT builds it,
// and so do the families whose layer is BERT's under other names (RoBERTa's
// line, ELECTRA, DistilBERT) or with relative-position terms in its
// attention (DeBERTa). Names registered are BERT's; renamed_layer() gives a
// family its own. BertLayerBackbone is their common backbone.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/dropout.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/model/packed_attention.h"
#include "ft/model/token_layout.h"
#include "model/backbone.h"
#include "model/module_parts.h"

namespace ft {
namespace model_detail {

// Terms added to a layer's raw attention scores from the relative-position
// table that rides below the tokens (DeBERTa's disentangled attention).
struct RelativeScores {
  virtual ~RelativeScores() = default;
  double scale_factor = 1.0;   // the scores are divided by sqrt(head_dim * scale_factor)
  torch::nn::Dropout dropout;  // pos_dropout: on the table, in each layer
  explicit RelativeScores(double p) : dropout(torch::nn::Dropout(p)) {}
  // q, k [rows, heads, width, d]; the table projected into this rank's
  // heads, pos_query and pos_key [heads, 2 span, d] -> [rows, heads, width,
  // width], unscaled.
  virtual at::Tensor bias(const at::Tensor& q, const at::Tensor& k, const at::Tensor& pos_query,
                          const at::Tensor& pos_key, const TokenLayout& layout) const = 0;
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

  // DeBERTa's disentangled attention (backbones/deberta/); null otherwise.
  std::shared_ptr<RelativeScores> relative;

  explicit SelfAttentionImpl(const BertConfig& c)
      : heads(c.num_attention_heads),
        head_dim(c.hidden_size / c.num_attention_heads),
        score_dim(c.hidden_size / c.num_attention_heads) {
    query = register_module("query", Linear(c.hidden_size, c.hidden_size));
    key = register_module("key", Linear(c.hidden_size, c.hidden_size));
    value = register_module("value", Linear(c.hidden_size, c.hidden_size));
    dropout = register_module("dropout", Dropout(c.attention_probs_dropout_prob));
  }
  void set_relative(std::shared_ptr<RelativeScores> scores) {
    relative = std::move(scores);
    register_module("pos_dropout", relative->dropout);
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
    const bool packable = !tp && !layout.sequence_lengths.empty();
    if (packable && packed_chosen(kind)) {
      return packed_attention(query(x), key(x), value(x), layout.sequence_lengths, heads, dropout->options.p(),
                              dropout->is_training(), prefix_key, prefix_value, -1, packed_schedule(kind));
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
  void set_tensor_parallel(const std::shared_ptr<const TensorParallelOps>& shared, int64_t ranks_per_head) override {
    auto& self = *attention->self;
    if (ranks_per_head == 1) {
      self.heads /= shared->size;
    } else {
      self.heads = 1;
      self.head_dim /= ranks_per_head;
      self.tp = shared;
    }
    attention->tp = attention->output->tp = tp = output->tp = shared;
  }
  void add_prefix(const at::Tensor& key, const at::Tensor& value) override {
    auto& self = *attention->self;
    const auto opts = self.key->weight.options();
    self.prefix_key = self.register_parameter("prefix_key", key.detach().to(opts, false, /*copy=*/true));
    self.prefix_value = self.register_parameter("prefix_value", value.detach().to(opts, false, /*copy=*/true));
  }
  // Keys and values need every token; from the attention's output on, a
  // first token's state reads only its own row, so the output projection,
  // norm and FFN run on one row per sequence (14 % of a six-layer MiniLM's
  // Linear products).
  at::Tensor forward_first_tokens(const at::Tensor& in, const TokenLayout& layout) override {
    if (carried_rows || tp) return EncoderLayer::forward_first_tokens(in, layout);
    const at::Tensor context = attention->self->forward(in, layout);
    const at::Tensor a = attention->output->forward(layout.first_tokens(context), layout.first_tokens(in));
    return output->forward(intermediate->forward(a), a);
  }
  at::Tensor forward(const at::Tensor& in, const TokenLayout& layout) override {
    const int64_t tokens = in.size(0) - carried_rows;
    const at::Tensor x = carried_rows ? in.narrow(0, 0, tokens) : in;
    const at::Tensor table = carried_rows ? in.narrow(0, tokens, carried_rows) : at::Tensor();
    auto a = attention->forward(x, layout, table);
    at::Tensor out = output->forward(intermediate->forward(tp ? tp->enter(a) : a), a);
    return carried_rows ? at::cat({out, table.to(out.scalar_type())}, 0) : out;
  }
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


// The backbone of every family whose layer is BERT's: embeddings, then the
// layers at the family's path under its names; ELECTRA's narrower
// embeddings are widened by <base>.embeddings_project.
class BertLayerBackbone : public Backbone {
 public:
  explicit BertLayerBackbone(EncoderFamily family) : Backbone(std::move(family)) {}
  std::shared_ptr<BaseModelImpl> build(const BertConfig& c) const override;
  std::vector<ParallelLinear> parallel_linears(const BertConfig& c) const override;
  std::vector<std::pair<std::string, TensorCut>> parallel_tensors() const override;
  std::string tensor_parallel_knows() const override;
  virtual EmbeddingsOptions embeddings(const BertConfig& c) const;
};

}  // namespace model_detail
}  // namespace ft
