// The registry of heads by task: one line per task.
#include "model/heads/head.h"

namespace ft {
namespace model_detail {
namespace {

struct TaskHead {
  BertHead task;
  std::unique_ptr<Head> (*make)(torch::nn::Module&, BaseModelImpl&, const BertConfig&);
  HeadNames (*names)(const BertConfig&);
};

const TaskHead& task_head(BertHead task) {
  // A function-local constant, not a mutable global: built once, read only.
  static const std::vector<TaskHead> all = {
      {BertHead::kSequenceClassification, make_sequence_classification, sequence_classification_names},
      {BertHead::kMaskedLM, make_masked_lm, masked_lm_names},
      {BertHead::kTokenClassification, make_token_classification, token_classification_names},
      {BertHead::kSentenceEmbedding, make_sentence_embedding, sentence_embedding_names},
  };
  for (const auto& t : all)
    if (t.task == task) return t;
  fail("model: no head is registered for task {}", static_cast<int>(task));
}

}  // namespace

std::pair<at::Tensor, at::Tensor> attended_sums(const at::Tensor& h, const Batch& batch, const TokenLayout& layout) {
  const at::Tensor mask = batch.attention_mask.to(h.device());
  const at::Tensor row_of = at::arange(layout.rows, mask.options().dtype(at::kLong)).unsqueeze(1).expand(mask.sizes());
  const at::Tensor weight = layout.gather_tokens(mask).to(h.scalar_type()).unsqueeze(1);
  const at::Tensor sums =
      at::zeros({layout.rows, h.size(1)}, h.options()).index_add(0, layout.gather_tokens(row_of), h * weight);
  return {sums, mask.sum(1, /*keepdim=*/true).to(h.scalar_type())};
}

std::unique_ptr<Head> make_head(BertHead task, torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) {
  return task_head(task).make(root, base, c);
}

}  // namespace model_detail

HeadNames head_names(const BertConfig& c, BertHead head) { return model_detail::task_head(head).names(c); }

}  // namespace ft
