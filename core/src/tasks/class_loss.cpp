#include "ft/tasks/class_loss.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ft/base/error.h"

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

std::vector<double> resolve_class_weights(const ClassWeights& spec, const std::vector<int64_t>& train_labels,
                                          const std::vector<std::string>& label_names, int64_t num_labels,
                                          const std::string& source) {
  std::vector<double> w(static_cast<size_t>(num_labels), 1.0);
  if (spec.automatic) {
    std::vector<int64_t> counts(w.size(), 0);
    for (int64_t y : train_labels) {
      if (y >= 0 && y < num_labels) ++counts[static_cast<size_t>(y)];
    }
    const double rows = static_cast<double>(train_labels.size());
    for (size_t c = 0; c < w.size(); ++c) {
      if (counts[c] > 0) w[c] = rows / (static_cast<double>(num_labels) * static_cast<double>(counts[c]));
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
