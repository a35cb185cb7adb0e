// The seam between the model and its tasks, private to core/src/model: a
// Head is one task (heads/<task>/) on any backbone, in the form HF gives
// the backbone's family (EncoderFamily::classification_head, mlm_head). It
// registers its modules under HF's names, and is the model's last unit.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/model/token_layout.h"
#include "ft/base/types.h"
#include "model/backbone.h"

namespace ft {
namespace model_detail {

class Head {
 public:
  virtual ~Head() = default;
  // The last unit's module: the head's modules, with the backbone's final
  // norm where it has one (the head applies it).
  virtual std::shared_ptr<torch::nn::Module> unit() const = 0;
  // Refuses a batch the head cannot read, before any unit runs.
  virtual void check(const Batch& batch) const { (void)batch; }
  // The shape of forward()'s logits for `batch`.
  virtual std::vector<int64_t> logits_shape(const Batch& batch, const BertConfig& c) const = 0;
  // tokens: the last layer's output, [T + carried rows, hidden] -> logits.
  virtual at::Tensor forward(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) = 0;
  // What the head's last projection reads, without dropout ([rows, hidden],
  // `ft features`); check_features() refuses a head that has none.
  virtual void check_features() const {}
  virtual at::Tensor features(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) {
    (void)tokens, (void)batch, (void)layout;
    fail("model: this head computes no features");
  }
  // Logits from such features ([rows, hidden] -> [rows, labels]): the last
  // dropout and projection alone (a batch of extracted features).
  virtual at::Tensor from_features(const at::Tensor& features) {
    (void)features;
    fail("model: this head reads no extracted features; `ft features train` trains a sequence classifier");
  }
  // Whether forward() reads each row's first token and nothing else (the
  // [CLS] pooling of sequence classifiers): then, without gradients, the
  // last layer may give only those rows (EncoderLayer::forward_first_tokens).
  virtual bool reads_first_tokens_only() const { return false; }
  // Whether the head reads unit 0's word embeddings (a tied decoder).
  virtual bool reads_word_embeddings() const { return false; }
  // Tensor parallelism with vocab-parallel word embeddings: whether the head
  // can follow (`ops` has what it needs), and, after it switched to `tp`,
  // its own tensors to cut by rows like the table, by HF name.
  virtual bool follows_vocab_parallel(const TensorParallelOps& ops) const {
    (void)ops;
    return true;
  }
  virtual std::vector<std::pair<std::string, at::Tensor>> vocab_parallel(const std::shared_ptr<const TensorParallelOps>& tp) {
    (void)tp;
    return {};
  }
};

// Each row's attended token states summed, [rows, f], and their count,
// [rows, 1], from the token matrix `h` [T, f] (column 0 is kept even when
// unattended, and counts only if attended): mean pooling, as transformers
// and sentence-transformers weight the padded states by the mask.
std::pair<at::Tensor, at::Tensor> attended_sums(const at::Tensor& h, const Batch& batch, const TokenLayout& layout);

// The head of task `task` for a model of config `c`, its modules registered
// at `root` (the model) and, where HF puts them there, in `base`.
std::unique_ptr<Head> make_head(BertHead task, torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c);

// Each task's factory and declarations (heads/<task>/), listed in heads.cpp.
std::unique_ptr<Head> make_sequence_classification(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c);
HeadNames sequence_classification_names(const BertConfig& c);
std::unique_ptr<Head> make_masked_lm(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c);
HeadNames masked_lm_names(const BertConfig& c);
std::unique_ptr<Head> make_token_classification(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c);
HeadNames token_classification_names(const BertConfig& c);
std::unique_ptr<Head> make_sentence_embedding(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c);
HeadNames sentence_embedding_names(const BertConfig& c);

}  // namespace model_detail
}  // namespace ft
