// Classification losses beyond plain cross-entropy: class weights, label
// smoothing and focal loss (train.class_weights, label_smoothing_factor,
// focal_loss_gamma) for single-label rows and token classification's
// tokens, and multi-label's per-label positive weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/config/config.h"

namespace ft {

class Dataset;

struct ClassLossOptions {
  std::vector<double> class_weights;  ///< one per class; empty: all 1
  double label_smoothing = 0.0;
  double focal_gamma = 0.0;
  bool plain() const { return class_weights.empty() && label_smoothing == 0.0 && focal_gamma == 0.0; }
};

/// Per-row losses and the rows' weights (w[label], 1 without weights): the
/// mean loss is losses.sum() / weights.sum(), as PyTorch's
/// CrossEntropyLoss(weight=..., label_smoothing=...) reduces 'mean'. Focal
/// loss: w[y] * (1 - p_y)^gamma * -log p_y, reduced the same way, so gamma 0
/// is the weighted cross-entropy.
struct ClassLossTerms {
  at::Tensor losses;   ///< [rows] float
  at::Tensor weights;  ///< [rows] float
  at::Tensor mean() const;
};

/// logits [rows, classes] (any floating type; computed in fp32), labels
/// [rows] int64 on the logits' device.
ClassLossTerms class_loss_terms(const at::Tensor& logits, const at::Tensor& labels, const ClassLossOptions& options);

/// How often each label occurs in the training data: single-label rows or
/// token classification's labelled tokens per class, or multi-label rows
/// holding each label; `total` is the rows (tokens) counted.
struct LabelCounts {
  std::vector<int64_t> per_label;
  int64_t total = 0;
  bool multi_label = false;
};

/// `data`'s labels as training sees them: token labels after the word
/// alignment, so a tokenizer pass over every row (cheap for row labels).
LabelCounts count_labels(const Dataset& data);

/// The weights train.class_weights gives. `auto`: for classes (rows or
/// tokens) scikit-learn's compute_class_weight("balanced"), total /
/// (classes * count of the class); for multi-label, each label's negatives
/// over its positives, the pos_weight PyTorch's BCEWithLogitsLoss documents.
/// A label never seen weighs 1. A list must have one weight per label; a
/// mapping names labels (others weigh 1). `source` names the config in errors.
std::vector<double> resolve_class_weights(const ClassWeights& spec, const LabelCounts& counts,
                                          const std::vector<std::string>& label_names, int64_t num_labels,
                                          const std::string& source);

}  // namespace ft
