// A small BERT and one batch for in-process model tests (LoRA, adapters):
// hidden 16, 2 heads, no dropout, 3 labels, vocabulary 50.
#pragma once

#include <ATen/ATen.h>

#include "ft/model/model.h"
#include "ft/base/types.h"

namespace ft_test {

inline ft::BertConfig small_config(int64_t layers = 2) {
  ft::BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 32;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  c.num_labels = 3;
  c.id2label = {"a", "b", "c"};
  return c;
}

// 4 rows of 8 tokens, two of them with 2 padding positions.
inline ft::Batch small_batch() {
  at::manual_seed(7);
  ft::Batch b;
  b.input_ids = at::randint(1, 50, {4, 8}, at::kLong);
  b.attention_mask = at::ones({4, 8}, at::kLong);
  b.attention_mask.narrow(1, 6, 2).narrow(0, 0, 2).zero_();
  b.token_type_ids = at::zeros({4, 8}, at::kLong);
  b.labels = at::tensor({0, 1, 2, 1}, at::kLong);
  return b;
}

}  // namespace ft_test
