#include "ft/tasks/class_loss.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ft/base/error.h"
#include "ft/data/data.h"

namespace ft {

at::Tensor ClassLossTerms::mean() const {
  // An all-zero-weight batch contributes nothing rather than NaN.
  return losses.sum() / weights.sum().clamp_min(1e-12);
}

ClassLossTerms class_loss_terms(const at::Tensor& logits, const at::Tensor& labels, const ClassLossOptions& o) {
  const at::Tensor x = logits.to(at::kFloat);
  const int64_t classes = x.size(1);
  at::Tensor weight;
  if (!o.class_weights.empty()) {
    if (static_cast<int64_t>(o.class_weights.size()) != classes) {
      fail("train.class_weights: {} weights for {} classes", o.class_weights.size(), classes);
    }
    weight = at::tensor(o.class_weights, at::kDouble).to(x.device(), at::kFloat);
  }
  ClassLossTerms t;
  t.weights = weight.defined() ? weight.index_select(0, labels) : at::ones({x.size(0)}, x.options());
  if (o.focal_gamma > 0) {
    const at::Tensor log_p = x.log_softmax(1).gather(1, labels.unsqueeze(1)).squeeze(1);
    const at::Tensor focus = (1 - log_p.exp()).clamp_min(0).pow(o.focal_gamma);
    t.losses = -(focus * log_p) * t.weights;
    return t;
  }
  t.losses = at::cross_entropy_loss(x, labels, weight, at::Reduction::None, -100, o.label_smoothing);
  return t;
}

LabelCounts count_labels(const Dataset& data) {
  LabelCounts c;
  c.per_label.assign(static_cast<size_t>(data.num_labels()), 0);
  c.multi_label = data.problem_type() == ProblemType::kMultiLabel;
  if (!c.multi_label && !data.labels_per_token()) {
    const std::vector<int64_t> labels = data.labels();
    for (int64_t y : labels) {
      if (y >= 0 && y < data.num_labels()) ++c.per_label[static_cast<size_t>(y)];
    }
    c.total = static_cast<int64_t>(labels.size());
    return c;
  }
  // Multi-hot rows and aligned token tags exist only as collated batches.
  constexpr int64_t kChunk = 256;
  for (int64_t start = 0; start < data.size(); start += kChunk) {
    std::vector<int64_t> rows(static_cast<size_t>(std::min(kChunk, data.size() - start)));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = start + static_cast<int64_t>(i);
    const at::Tensor labels = data.collate(rows).labels;
    at::Tensor counts;
    if (c.multi_label) {
      counts = labels.gt(0.5).sum(0);
      c.total += labels.size(0);
    } else {
      const at::Tensor scored = labels.masked_select(labels.ge(0));
      counts = scored.bincount({}, data.num_labels());
      c.total += scored.numel();
    }
    const at::Tensor n = counts.to(at::kLong).contiguous();
    for (size_t k = 0; k < c.per_label.size(); ++k) c.per_label[k] += n.data_ptr<int64_t>()[k];
  }
  return c;
}

std::vector<double> resolve_class_weights(const ClassWeights& spec, const LabelCounts& counts,
                                          const std::vector<std::string>& label_names, int64_t num_labels,
                                          const std::string& source) {
  std::vector<double> w(static_cast<size_t>(num_labels), 1.0);
  if (spec.automatic) {
    const auto total = static_cast<double>(counts.total);
    for (size_t c = 0; c < w.size() && c < counts.per_label.size(); ++c) {
      const auto n = static_cast<double>(counts.per_label[c]);
      if (n <= 0) continue;
      w[c] = counts.multi_label ? (total - n) / n : total / (static_cast<double>(num_labels) * n);
    }
    return w;
  }
  if (!spec.values.empty()) {
    if (static_cast<int64_t>(spec.values.size()) != num_labels) {
      fail("{}: train.class_weights: {} weights for {} labels ({}); give one per label, in label order", source,
           spec.values.size(), num_labels, fmt::join(label_names, ", "));
    }
    return spec.values;
  }
  for (const auto& [name, value] : spec.by_name) {
    const auto it = std::find(label_names.begin(), label_names.end(), name);
    if (it == label_names.end()) {
      fail("{}: train.class_weights: no label '{}' (the labels: {})", source, name, fmt::join(label_names, ", "));
    }
    w[static_cast<size_t>(it - label_names.begin())] = value;
  }
  return w;
}

}  // namespace ft
