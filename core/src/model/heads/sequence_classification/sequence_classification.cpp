// Sequence classification: a row's pooled state -> num_labels logits, in the
// form HF gives the backbone's family (EncoderFamily::classification_head).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/heads/head.h"
#include "model/heads/sequence_classification/classification_heads.h"

namespace ft {
namespace model_detail {
namespace {

// One form: the module whose weight rows are the labels, what its features
// are, and how it is built and registered.
struct ClassifierForm {
  const char* name;
  const char* output;
  const char* features;
  std::function<std::shared_ptr<ClassificationHead>(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c)>
      build;
};

const std::vector<ClassifierForm>& classifier_forms() {
  // A function-local constant, not a mutable global: built once, read only.
  static const std::vector<ClassifierForm> all = {
      // BERT: <base>.pooler (tanh(dense(h_[CLS]))) -> dropout -> classifier.
      {"pooler", "classifier", "bert.pooler (tanh(dense(h_[CLS])))",
       [](torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) -> std::shared_ptr<ClassificationHead> {
         auto pooler = base.register_module("pooler", std::make_shared<PoolerImpl>(c));
         auto dropout = root.register_module("dropout", Dropout(c.head_dropout()));
         auto classifier = root.register_module("classifier", Linear(c.hidden_size, c.num_labels));
         return std::make_shared<HeadUnit>(pooler, dropout, classifier);
       }},
      // RoBERTa: classifier.dense -> tanh -> classifier.out_proj on <s>, dropout before each.
      {"dense_tanh", "classifier.out_proj", "classifier.dense (tanh(dense(h_<s>)))",
       [](torch::nn::Module& root, BaseModelImpl&, const BertConfig& c) -> std::shared_ptr<ClassificationHead> {
         return root.register_module("classifier", std::make_shared<DenseHeadImpl>(c, false));
       }},
      // ELECTRA: the same with gelu.
      {"dense_gelu", "classifier.out_proj", "classifier.dense (gelu(dense(h_[CLS])))",
       [](torch::nn::Module& root, BaseModelImpl&, const BertConfig& c) -> std::shared_ptr<ClassificationHead> {
         return root.register_module("classifier", std::make_shared<DenseHeadImpl>(c, true));
       }},
      // DistilBERT: pre_classifier -> ReLU -> dropout -> classifier on [CLS].
      {"pre_classifier", "classifier", "pre_classifier (relu(pre_classifier(h_[CLS])))",
       [](torch::nn::Module& root, BaseModelImpl&, const BertConfig& c) -> std::shared_ptr<ClassificationHead> {
         auto pre = root.register_module("pre_classifier", Linear(c.hidden_size, c.hidden_size));
         auto dropout = root.register_module("dropout", Dropout(c.head_dropout()));
         auto classifier = root.register_module("classifier", Linear(c.hidden_size, c.num_labels));
         return std::make_shared<PreClassifierHead>(pre, dropout, classifier);
       }},
      // DeBERTa: pooler.dense (dropout before, gelu after) -> dropout -> classifier on [CLS].
      {"context_pooler", "classifier", "pooler.dense (gelu(dense(h_[CLS])))",
       [](torch::nn::Module& root, BaseModelImpl&, const BertConfig& c) -> std::shared_ptr<ClassificationHead> {
         auto pooler = root.register_module("pooler", std::make_shared<torch::nn::Module>());
         auto dense = pooler->register_module("dense", Linear(c.hidden_size, c.hidden_size));
         auto pooler_dropout = pooler->register_module("dropout", Dropout(c.deberta.pooler_dropout));
         auto dropout = root.register_module("dropout", Dropout(c.head_dropout()));
         auto classifier = root.register_module("classifier", Linear(c.hidden_size, c.num_labels));
         return std::make_shared<ContextPoolerHead>(dense, pooler_dropout, dropout, classifier);
       }},
      // ModernBERT: final_norm, then [CLS] or the mean -> head.dense -> gelu -> head.norm -> drop -> classifier.
      {"prediction_head", "classifier", "head (norm(gelu(dense(final_norm(h))))) on [CLS] or the mean",
       [](torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) -> std::shared_ptr<ClassificationHead> {
         auto dense = register_at(root, "head.dense", Linear(c.hidden_size, c.hidden_size, c.modern.classifier_bias).ptr());
         auto norm = register_at(root, "head.norm", make_layer_norm(c, c.hidden_size, c.modern.norm_bias).ptr());
         auto dropout = root.register_module("drop", Dropout(c.head_dropout()));
         auto classifier = root.register_module("classifier", Linear(c.hidden_size, c.num_labels));
         return std::make_shared<PredictionHead>(base.final_norm, Linear(dense), Norm(norm), dropout, classifier);
       }},
  };
  return all;
}

const ClassifierForm& classifier_form_of(const BertConfig& c) {
  const EncoderFamily& family = c.family();
  for (const auto& f : classifier_forms())
    if (family.classification_head == f.name) return f;
  fail("model config: {} declares a classification head '{}' that no form of heads/sequence_classification builds",
       c.model_type, family.classification_head);
}

class SequenceClassificationTask : public Head {
 public:
  SequenceClassificationTask(std::shared_ptr<ClassificationHead> head, Norm final_norm, bool mean_pooling)
      : head_(std::move(head)), final_norm_(std::move(final_norm)), mean_pooling_(mean_pooling) {}
  std::shared_ptr<torch::nn::Module> unit() const override { return head_; }
  std::vector<int64_t> logits_shape(const Batch& batch, const BertConfig& c) const override {
    return {batch.rows(), c.num_labels};
  }
  at::Tensor forward(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) override {
    return head_->forward(pooled(tokens.narrow(0, 0, layout.tokens), batch, layout));  // without carried rows
  }
  at::Tensor features(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) override {
    return head_->features(pooled(tokens.narrow(0, 0, layout.tokens), batch, layout));
  }
  at::Tensor from_features(const at::Tensor& features) override { return head_->from_features(features); }
  bool reads_first_tokens_only() const override { return !(final_norm_ && mean_pooling_); }

 private:
  std::shared_ptr<ClassificationHead> head_;
  Norm final_norm_;    // the backbone's, where it has one (ModernBERT): applied first
  bool mean_pooling_;  // ModernBERT's classifier_pooling "mean"
  // [T, hidden] token states -> [rows, hidden]: column 0's state, or the
  // attended tokens' mean.
  at::Tensor pooled(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) const {
    if (!final_norm_) return layout.first_tokens(tokens);
    const at::Tensor h = final_norm_->forward(tokens);
    if (!mean_pooling_) return layout.first_tokens(h);
    const auto [sums, counts] = attended_sums(h, batch, layout);
    return sums / counts;
  }
};

}  // namespace

std::unique_ptr<Head> make_sequence_classification(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) {
  return std::make_unique<SequenceClassificationTask>(classifier_form_of(c).build(root, base, c), base.final_norm,
                                                  c.modern.mean_pooling);
}

HeadNames sequence_classification_names(const BertConfig& c) {
  const ClassifierForm& form = classifier_form_of(c);
  HeadNames names;
  names.architecture = c.family().class_prefix + "ForSequenceClassification";
  names.output_weight = std::string(form.output) + ".weight";
  names.output_bias = std::string(form.output) + ".bias";
  names.features = form.features;
  return names;
}

}  // namespace model_detail
}  // namespace ft
