// Sentence embedding: each row's token states -> one vector, as
// sentence-transformers' modules after the Transformer compute it
// (BertConfig::sentence): Pooling (cls, mean, max or mean_sqrt_len_tokens
// over the attended tokens), an optional Dense (Linear, then Tanh or
// nothing) and an optional Normalize (unit L2 length).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ft/model/model.h"
#include "model/heads/head.h"

namespace ft {
namespace model_detail {
namespace {

struct SentenceHeadImpl : torch::nn::Module {
  Norm final_norm{nullptr};  // ModernBERT's model.final_norm: its last_hidden_state includes it
  Linear dense{nullptr};     // the Dense module; null: none
  BertConfig::SentenceModules modules;

  // [T, hidden] token states -> [rows, hidden] pooled states.
  at::Tensor pool(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) {
    const at::Tensor h = final_norm ? final_norm(tokens) : tokens;
    if (modules.pooling == "cls") return layout.first_tokens(h);
    if (modules.pooling == "max") {
      // sentence-transformers sets unattended states to -1e9 before the max.
      const at::Tensor attended = layout.gather_tokens(batch.attention_mask.to(h.device())).ne(0).unsqueeze(1);
      const at::Tensor kept = h.masked_fill(attended.logical_not(), -1e9);
      const int64_t slots = layout.rows * layout.seq;
      if (!layout.is_packed()) return kept.view({layout.rows, layout.seq, -1}).amax(1);
      const at::Tensor all = at::full({slots, h.size(1)}, -1e9, h.options()).index_copy(0, layout.keep_index, kept);
      return all.view({layout.rows, layout.seq, -1}).amax(1);
    }
    const auto [sums, counts] = attended_sums(h, batch, layout);
    const at::Tensor n = counts.clamp_min(1e-9);
    return modules.pooling == "mean_sqrt_len_tokens" ? sums / n.sqrt() : sums / n;
  }

  at::Tensor forward(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) {
    at::Tensor e = pool(tokens, batch, layout);
    if (dense) {
      e = dense(e);
      if (modules.dense_activation != "torch.nn.modules.linear.Identity") e = at::tanh(e);
    }
    // Normalised in fp32 (the losses read cosine similarities).
    e = e.to(at::kFloat);
    if (modules.normalize) e = e / e.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12);
    return e;
  }
};

class SentenceEmbeddingTask : public Head {
 public:
  explicit SentenceEmbeddingTask(std::shared_ptr<SentenceHeadImpl> head) : head_(std::move(head)) {}
  std::shared_ptr<torch::nn::Module> unit() const override { return head_; }
  std::vector<int64_t> logits_shape(const Batch& batch, const BertConfig& c) const override {
    return {batch.rows(), c.sentence_dimension()};
  }
  at::Tensor forward(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) override {
    return head_->forward(tokens.narrow(0, 0, layout.tokens), batch, layout);  // without carried rows
  }
  at::Tensor features(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) override {
    return forward(tokens, batch, layout);
  }

 private:
  std::shared_ptr<SentenceHeadImpl> head_;
};

}  // namespace

std::unique_ptr<Head> make_sentence_embedding(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) {
  auto head = std::make_shared<SentenceHeadImpl>();
  head->modules = c.sentence;
  const std::string& p = c.sentence.pooling;
  if (p != "cls" && p != "mean" && p != "max" && p != "mean_sqrt_len_tokens") {
    fail("model: sentence pooling '{}' is not one ft computes (cls, mean, max, mean_sqrt_len_tokens)", p);
  }
  if (base.final_norm) head->final_norm = head->register_module("final_norm", base.final_norm);
  if (c.sentence.dense_out > 0) {
    // Registered at the root under ft's name (kSentenceDenseWeight, ft/model/model.h);
    // sentence-transformers keeps it in its own folder.
    head->dense = register_at(root, "sentence_dense.linear",
                              Linear(c.hidden_size, c.sentence.dense_out, c.sentence.dense_bias).ptr());
    head->register_module("dense", head->dense);
  }
  return std::make_unique<SentenceEmbeddingTask>(std::move(head));
}

HeadNames sentence_embedding_names(const BertConfig& c) {
  HeadNames names;
  names.architecture = c.family().class_prefix + "Model";
  if (c.sentence.dense_out > 0) {
    names.output_weight = kSentenceDenseWeight;
    if (c.sentence.dense_bias) names.output_bias = kSentenceDenseBias;
  }
  names.features = fmt::format("the sentence embedding ({} pooling{}{})", c.sentence.pooling,
                               c.sentence.dense_out > 0 ? ", Dense" : "", c.sentence.normalize ? ", normalized" : "");
  return names;
}

}  // namespace model_detail
}  // namespace ft
