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
  };
  for (const auto& t : all)
    if (t.task == task) return t;
  fail("model: no head is registered for task {}", static_cast<int>(task));
}

}  // namespace

std::unique_ptr<Head> make_head(BertHead task, torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) {
  return task_head(task).make(root, base, c);
}

}  // namespace model_detail

HeadNames head_names(const BertConfig& c, BertHead head) { return model_detail::task_head(head).names(c); }

}  // namespace ft
