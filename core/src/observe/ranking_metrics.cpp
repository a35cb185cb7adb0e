// Metrics of scores rather than decisions: ROC-AUC and average precision
// (PR-AUC), one-vs-rest for many classes or labels, as scikit-learn's
// roc_auc_score and average_precision_score compute them; and Matthews'
// correlation from a confusion matrix (matthews_corrcoef).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ft/observe/metrics.h"

namespace ft {
namespace {

// Indices of `scores` by descending score.
std::vector<size_t> by_score_desc(const std::vector<double>& scores) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  return order;
}

// The trapezoidal area under the ROC curve, with tied scores as one
// threshold: a positive above a negative counts 1, a tie 1/2.
std::optional<double> binary_roc_auc(const std::vector<double>& scores, const std::vector<bool>& positive) {
  const auto order = by_score_desc(scores);
  double tp = 0, fp = 0, area = 0;
  for (size_t i = 0; i < order.size();) {
    double group_tp = 0, group_fp = 0;
    const double s = scores[order[i]];
    for (; i < order.size() && scores[order[i]] == s; ++i) (positive[order[i]] ? group_tp : group_fp) += 1;
    area += group_fp * (tp + group_tp / 2);  // each negative in the group: the positives ranked above it
    tp += group_tp;
    fp += group_fp;
  }
  if (tp == 0 || fp == 0) return std::nullopt;  // undefined with one class only
  return area / (tp * fp);
}

// Sum over thresholds (distinct scores, descending) of the recall gained
// times the precision there; no positive: undefined.
std::optional<double> binary_average_precision(const std::vector<double>& scores, const std::vector<bool>& positive) {
  const double positives = static_cast<double>(std::count(positive.begin(), positive.end(), true));
  if (positives == 0) return std::nullopt;
  const auto order = by_score_desc(scores);
  double tp = 0, seen = 0, ap = 0;
  for (size_t i = 0; i < order.size();) {
    const double s = scores[order[i]];
    double group_tp = 0;
    for (; i < order.size() && scores[order[i]] == s; ++i, seen += 1) group_tp += positive[order[i]] ? 1 : 0;
    tp += group_tp;
    ap += group_tp / positives * (tp / seen);
  }
  return ap;
}

// Macro mean over the columns where the score is defined; nullopt if none.
template <typename F>
std::optional<double> macro_over_columns(const std::vector<double>& scores, const std::vector<bool>& truth,
                                         int64_t columns, F&& binary) {
  const size_t k = static_cast<size_t>(columns);
  const size_t rows = k == 0 ? 0 : scores.size() / k;
  double sum = 0;
  int64_t defined = 0;
  std::vector<double> s(rows);
  std::vector<bool> t(rows);
  for (size_t c = 0; c < k; ++c) {
    for (size_t r = 0; r < rows; ++r) s[r] = scores[r * k + c], t[r] = truth[r * k + c];
    if (auto v = binary(s, t)) sum += *v, ++defined;
  }
  if (defined == 0) return std::nullopt;
  return sum / static_cast<double>(defined);
}

void add_auc_scores(ClassificationReport& r, const std::vector<double>& scores, const std::vector<bool>& truth,
                    int64_t columns) {
  auto auc = [](const std::vector<double>& s, const std::vector<bool>& t) { return binary_roc_auc(s, t); };
  auto ap = [](const std::vector<double>& s, const std::vector<bool>& t) { return binary_average_precision(s, t); };
  if (auto v = macro_over_columns(scores, truth, columns, auc)) r.scores.emplace_back("roc_auc", *v);
  if (auto v = macro_over_columns(scores, truth, columns, ap)) r.scores.emplace_back("pr_auc", *v);
}

}  // namespace

double matthews_corrcoef(const std::vector<std::vector<int64_t>>& confusion) {
  const size_t k = confusion.size();
  double s = 0, c = 0, tp_sum = 0, t2 = 0, p2 = 0;
  std::vector<double> t(k, 0.0), p(k, 0.0);
  for (size_t i = 0; i < k; ++i) {
    for (size_t j = 0; j < k; ++j) {
      const auto n = static_cast<double>(confusion[i][j]);
      t[i] += n, p[j] += n, s += n;
    }
    c += static_cast<double>(confusion[i][i]);
  }
  for (size_t i = 0; i < k; ++i) tp_sum += t[i] * p[i], t2 += t[i] * t[i], p2 += p[i] * p[i];
  const double denominator = std::sqrt((s * s - p2) * (s * s - t2));
  return denominator > 0 ? (c * s - tp_sum) / denominator : 0.0;
}

void add_ranking_scores(ClassificationReport& r, const std::vector<double>& probabilities,
                        const std::vector<int64_t>& labels, int64_t num_classes) {
  const size_t k = static_cast<size_t>(num_classes);
  if (k < 2 || labels.empty()) return;
  if (k == 2) {  // binary: the positive class's score, as roc_auc_score(y, p[:, 1])
    std::vector<double> s(labels.size());
    std::vector<bool> t(labels.size());
    for (size_t i = 0; i < labels.size(); ++i) s[i] = probabilities[i * 2 + 1], t[i] = labels[i] == 1;
    if (auto v = binary_roc_auc(s, t)) r.scores.emplace_back("roc_auc", *v);
    if (auto v = binary_average_precision(s, t)) r.scores.emplace_back("pr_auc", *v);
    return;
  }
  std::vector<bool> truth(labels.size() * k, false);
  for (size_t i = 0; i < labels.size(); ++i) truth[i * k + static_cast<size_t>(labels[i])] = true;
  add_auc_scores(r, probabilities, truth, num_classes);
}

void add_multi_label_ranking_scores(ClassificationReport& r, const std::vector<double>& probabilities,
                                    const std::vector<uint8_t>& truth, int64_t num_labels) {
  if (truth.empty()) return;
  add_auc_scores(r, probabilities, std::vector<bool>(truth.begin(), truth.end()), num_labels);
}

}  // namespace ft
