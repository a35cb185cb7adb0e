// Token classification (NER, POS): every scored token's state -> num_labels
// logits, in the form HF gives the backbone's family
// (EncoderFamily::token_classification_head). Only the batch's positions
// reach the classifier: the labelled tokens in training and evaluation,
// every token at prediction.
#include <memory>
#include <string>
#include <vector>

#include "model/heads/head.h"

namespace ft {
namespace model_detail {
namespace {

// HF's <Family>ForTokenClassification head over token states [M, hidden].
// The model registers its parts under HF's names ("dropout"/"drop",
// "classifier", ModernBERT's "head.*"); this module groups them, with the
// backbone's final norm, which the unit owns and applies first.
struct TokenHeadImpl : torch::nn::Module {
  Norm final_norm{nullptr};   // ModernBERT's model.final_norm
  Linear dense{nullptr};      // ModernBERT's head.dense (with norm); null: none
  Norm norm{nullptr};
  Dropout dropout{nullptr};
  Linear classifier{nullptr};

  at::Tensor features(const at::Tensor& tokens) {
    const at::Tensor h = final_norm ? final_norm(tokens) : tokens;
    // LayerNorm in fp32, as autocast runs it (a no-op in fp32; see the masked-LM head).
    return dense ? norm(at::gelu(dense(h)).to(at::kFloat)) : h;
  }
  at::Tensor forward(const at::Tensor& tokens) { return classifier(drop(dropout, features(tokens))); }
};

std::shared_ptr<TokenHeadImpl> build_token_head(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) {
  const std::string& form = c.family().token_classification_head;
  auto head = std::make_shared<TokenHeadImpl>();
  if (form == "classifier" || form == "hidden_dropout") {
    const double p = form == "classifier" ? c.head_dropout() : c.hidden_dropout_prob;
    head->dropout = root.register_module("dropout", Dropout(p));
  } else if (form == "prediction_head") {
    head->dense = register_at(root, "head.dense", Linear(c.hidden_size, c.hidden_size, c.modern.classifier_bias).ptr());
    head->norm = register_at(root, "head.norm", make_layer_norm(c, c.hidden_size, c.modern.norm_bias).ptr());
    head->dropout = root.register_module("drop", Dropout(c.head_dropout()));
  } else {
    fail("model config: {} declares a token-classification head '{}' that heads/token_classification does not build",
         c.model_type, form);
  }
  head->classifier = root.register_module("classifier", Linear(c.hidden_size, c.num_labels));
  // Registered here too so the unit's parameters() sees them.
  if (base.final_norm) head->final_norm = head->register_module("final_norm", base.final_norm);
  if (head->dense) {
    head->register_module("dense", head->dense);
    head->register_module("norm", head->norm);
  }
  head->register_module("dropout", head->dropout);
  head->register_module("classifier", head->classifier);
  return head;
}

class TokenClassificationTask : public Head {
 public:
  explicit TokenClassificationTask(std::shared_ptr<TokenHeadImpl> head) : head_(std::move(head)) {}
  std::shared_ptr<torch::nn::Module> unit() const override { return head_; }
  void check(const Batch& batch) const override {
    if (!batch.positions.defined()) {
      fail("this is a token-classification model (config.json: ...ForTokenClassification); train and evaluate it "
           "with --task token-classification on word/tag data");
    }
  }
  std::vector<int64_t> logits_shape(const Batch& batch, const BertConfig& c) const override {
    return {batch.positions.size(0), c.num_labels};
  }
  at::Tensor forward(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) override {
    return head_->forward(tokens.index_select(0, layout.token_index(batch.positions)));
  }
  at::Tensor features(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) override {
    return head_->features(tokens.index_select(0, layout.token_index(batch.positions)));
  }
  void check_features() const override {
    fail("a token-classification model gives one vector per token, not per row; ft features reads a "
         "sequence classifier");
  }

 private:
  std::shared_ptr<TokenHeadImpl> head_;
};

}  // namespace

std::unique_ptr<Head> make_token_classification(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) {
  return std::make_unique<TokenClassificationTask>(build_token_head(root, base, c));
}

HeadNames token_classification_names(const BertConfig& c) {
  HeadNames names;
  names.architecture = c.family().class_prefix + "ForTokenClassification";
  names.output_weight = "classifier.weight";
  names.output_bias = "classifier.bias";
  names.features = c.family().token_classification_head == "prediction_head"
                       ? "head (norm(gelu(dense(final_norm(h))))) per token"
                       : "the last layer's state per token";
  return names;
}

}  // namespace model_detail
}  // namespace ft
