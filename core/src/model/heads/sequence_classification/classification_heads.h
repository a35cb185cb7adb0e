// The forms of the sequence-classification head HF gives each family, over
// the pooled states [rows, hidden] of sequence_classification.cpp. Each is
// one unit; where HF registers its parts at the model's top level (or, for
// BERT's pooler, in the base model), the form's builder registers them there
// and this module only groups them.
#pragma once

#include <memory>
#include <utility>

#include <ATen/ATen.h>

#include "model/module_parts.h"

namespace ft {
namespace model_detail {

// The classification head as one unit, whichever the family's form.
struct ClassificationHead : torch::nn::Module {
  // pooled: [rows, hidden], what the family pools each row into (column 0's
  // state, [CLS] / <s>, or ModernBERT's mean) -> logits.
  virtual at::Tensor forward(const at::Tensor& pooled) = 0;
  // What the final projection reads, without dropout: `ft features`' vectors.
  virtual at::Tensor features(const at::Tensor& pooled) = 0;
  // The final dropout and projection on such vectors: training a head on
  // extracted features (`ft features train`) runs only this.
  virtual at::Tensor from_features(const at::Tensor& features) = 0;
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
  at::Tensor forward(const at::Tensor& first) override { return from_features(pooler->forward(first)); }
  at::Tensor features(const at::Tensor& first) override { return pooler->forward(first); }
  at::Tensor from_features(const at::Tensor& f) override { return classifier(drop(dropout, f)); }
};

// RoBERTa's and ELECTRA's head (transformers' RobertaClassificationHead,
// ElectraClassificationHead), registered as "classifier": no pooler in the
// base model, its own dense and tanh (RoBERTa) or gelu (ELECTRA) instead.
struct DenseHeadImpl : ClassificationHead {
  Linear dense{nullptr}, out_proj{nullptr};
  Dropout dropout{nullptr};
  bool gelu;
  DenseHeadImpl(const BertConfig& c, bool gelu_) : gelu(gelu_) {
    dense = register_module("dense", Linear(c.hidden_size, c.hidden_size));
    dropout = register_module("dropout", Dropout(c.head_dropout()));
    out_proj = register_module("out_proj", Linear(c.hidden_size, c.num_labels));
  }
  at::Tensor activate(const at::Tensor& x) const { return gelu ? at::gelu(x) : at::tanh(x); }
  at::Tensor forward(const at::Tensor& first) override { return from_features(activate(dense(drop(dropout, first)))); }
  at::Tensor features(const at::Tensor& first) override { return activate(dense(first)); }
  at::Tensor from_features(const at::Tensor& f) override { return out_proj(drop(dropout, f)); }
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
  at::Tensor forward(const at::Tensor& first) override { return from_features(features(first)); }
  at::Tensor features(const at::Tensor& first) override { return at::relu(pre_classifier(first)); }
  at::Tensor from_features(const at::Tensor& f) override { return classifier(drop(dropout, f)); }
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
  at::Tensor forward(const at::Tensor& first) override { return from_features(at::gelu(dense(drop(pooler_dropout, first)))); }
  at::Tensor features(const at::Tensor& first) override { return at::gelu(dense(first)); }
  at::Tensor from_features(const at::Tensor& f) override { return classifier(drop(dropout, f)); }
};

// ModernBertForSequenceClassification's head over pooled states (the final
// norm came first, in SequenceClassification::pooled). The model registers its parts under
// the HF names ("head.dense", "head.norm", "drop", "classifier"); this module
// groups them with the final norm, which its unit owns.
struct PredictionHead : ClassificationHead {
  Linear dense, classifier;
  Norm norm, final_norm;
  Dropout dropout;
  PredictionHead(Norm final, Linear d, Norm n, Dropout drop_, Linear c)
      : dense(std::move(d)), classifier(std::move(c)), norm(std::move(n)), final_norm(std::move(final)), dropout(std::move(drop_)) {
    register_module("final_norm", final_norm);
    register_module("dense", dense);
    register_module("norm", norm);
    register_module("drop", dropout);
    register_module("classifier", classifier);
  }
  at::Tensor forward(const at::Tensor& pooled) override { return from_features(features(pooled)); }
  at::Tensor from_features(const at::Tensor& f) override { return classifier(drop(dropout, f)); }
  // LayerNorm in fp32, as autocast runs it (the masked-LM head's reason): a
  // no-op in fp32, and under bf16 LibTorch's CPU kernel refuses a bf16 input
  // with fp32 weights.
  at::Tensor features(const at::Tensor& pooled) override { return norm(at::gelu(dense(pooled)).to(at::kFloat)); }
};

}  // namespace model_detail
}  // namespace ft
