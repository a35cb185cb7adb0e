// What a sequence classifier's outputs mean, named as transformers'
// config.json `problem_type` names it. The head is the same Linear for all
// three; the problem type picks its loss, metrics and `ft predict` output.
#pragma once

#include <cstdint>

#include <optional>
#include <string>
#include <string_view>

namespace ft {

/// The label id a token without a label gets (PyTorch's CrossEntropyLoss
/// ignore_index): a pre-tokenized file's unscored positions, the word
/// pieces after a word's first, the loss and the metrics all agree on it.
constexpr int64_t kIgnoreLabel = -100;

enum class ProblemType {
  kSingleLabel,  ///< one class per row: softmax, cross-entropy
  kMultiLabel,   ///< any set of classes per row: a sigmoid per class, BCE-with-logits
  kRegression,   ///< one number per row (num_labels 1): MSE, or Huber on request
};

/// "single_label_classification", "multi_label_classification", "regression".
std::string problem_type_name(ProblemType type);

/// The inverse of problem_type_name; nullopt for any other string.
std::optional<ProblemType> parse_problem_type(std::string_view name);

}  // namespace ft
