// The embeddings every backbone starts with (unit 0), private to
// core/src/model: word rows, optional absolute positions and token types,
// a norm and dropout, under the names and with the parts the backbone
// declares in EmbeddingsOptions. Prompt tuning's virtual tokens, the
// vocab-parallel and the sharded lookups live here, so every family has them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/modules/embedding.h>

#include "ft/model/model.h"
#include "ft/model/token_layout.h"
#include "model/module_parts.h"

namespace ft {
namespace model_detail {

using torch::nn::Embedding;

// What a backbone's embeddings hold, and under which HF names.
struct EmbeddingsOptions {
  std::string words = "word_embeddings", norm = "LayerNorm", dropout = "dropout";
  bool positions = true;       // an absolute position table
  int64_t first_position = 0;  // the first token's position row; > 0: the rows below are padding's (RoBERTa)
  bool token_types = true;     // a token type table, when type_vocab_size > 0
  bool norm_bias = true;
  double dropout_p = 0.1;
};

struct EmbeddingsImpl : torch::nn::Module {
  Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  Norm norm{nullptr};
  Dropout dropout{nullptr};
  int64_t first_position = 0;  // the first real token's position row (EmbeddingsOptions)
  int64_t vocab_size;
  // Prompt tuning: [P, hidden], the rows of ids vocab_size + p (the virtual
  // tokens encoder_input() puts before every sequence).
  at::Tensor prompt;
  // Prefix tuning: HF's past_key_values_length, where the real tokens'
  // positions start.
  int64_t position_offset = 0;

  // ELECTRA: <base>.embeddings_project, which widens the embeddings to the
  // layers' width. Registered by the base model (that is its HF name) and
  // applied here, so unit 0 stays one function.
  Linear project{nullptr};

  EmbeddingsImpl(const BertConfig& c, const EmbeddingsOptions& o)
      : first_position(o.first_position), vocab_size(c.vocab_size), pad_token_id(c.pad_token_id) {
    const int64_t width = c.embedding_width();
    word_embeddings = register_module(
        o.words, Embedding(torch::nn::EmbeddingOptions(c.vocab_size, width).padding_idx(c.pad_token_id)));
    auto positions = torch::nn::EmbeddingOptions(c.max_position_embeddings, width);
    // As transformers builds it: the row below the first position is padding's, never trained.
    if (o.first_position > 0) positions.padding_idx(c.pad_token_id);
    if (o.positions) position_embeddings = register_module("position_embeddings", Embedding(positions));
    if (o.token_types && c.type_vocab_size > 0) {
      token_type_embeddings = register_module("token_type_embeddings", Embedding(c.type_vocab_size, width));
    }
    norm = register_module(o.norm, make_layer_norm(c, width, o.norm_bias));
    dropout = register_module(o.dropout, Dropout(o.dropout_p));
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
    // tokens (EncoderModel::carried_rows).
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

}  // namespace model_detail
}  // namespace ft
