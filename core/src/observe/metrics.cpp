#include "ft/observe/metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <utf8proc.h>

#include "ft/base/error.h"

namespace ft {
namespace {

double ratio(int64_t num, int64_t den) {
  return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0;
}

// Terminal columns a UTF-8 string takes (CJK = 2), for aligning class names.
size_t display_width(const std::string& s) {
  size_t width = 0;
  auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // invalid byte: count it as one column and move on
      ++width;
      ++p;
      --left;
      continue;
    }
    width += static_cast<size_t>(std::max(0, utf8proc_charwidth(cp)));
    p += n;
    left -= n;
  }
  return width;
}

std::string pad_left(const std::string& s, size_t width) {
  const size_t w = display_width(s);
  return w >= width ? s : std::string(width - w, ' ') + s;
}

}  // namespace

std::vector<std::vector<int64_t>> confusion_matrix(const std::vector<int64_t>& predictions,
                                                   const std::vector<int64_t>& labels,
                                                   int64_t num_labels) {
  if (num_labels <= 0) fail("metrics: num_labels is {}; it must be >= 1", num_labels);
  if (predictions.size() != labels.size())
    fail("metrics: {} predictions but {} labels; they must pair up", predictions.size(),
         labels.size());
  std::vector<std::vector<int64_t>> cm(static_cast<size_t>(num_labels),
                                       std::vector<int64_t>(static_cast<size_t>(num_labels), 0));
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t t = labels[i];
    const int64_t p = predictions[i];
    if (t < 0 || t >= num_labels)
      fail("metrics: label {} at position {} is outside [0, {})", t, i, num_labels);
    if (p < 0 || p >= num_labels)
      fail("metrics: prediction {} at position {} is outside [0, {})", p, i, num_labels);
    ++cm[static_cast<size_t>(t)][static_cast<size_t>(p)];
  }
  return cm;
}

ClassificationReport report_from_confusion(std::vector<std::vector<int64_t>> confusion,
                                           double loss) {
  const size_t k = confusion.size();
  if (k == 0) fail("metrics: empty confusion matrix; num_labels must be >= 1");
  for (const auto& row : confusion)
    if (row.size() != k)
      fail("metrics: confusion matrix row has {} entries, expected {}", row.size(), k);

  ClassificationReport r;
  r.loss = loss;
  r.precision.assign(k, 0.0);
  r.recall.assign(k, 0.0);
  r.f1.assign(k, 0.0);
  r.support.assign(k, 0);
  std::vector<int64_t> predicted(k, 0);
  int64_t correct = 0;
  for (size_t t = 0; t < k; ++t) {
    for (size_t p = 0; p < k; ++p) {
      r.support[t] += confusion[t][p];
      predicted[p] += confusion[t][p];
    }
    correct += confusion[t][t];
    r.total += r.support[t];
  }
  r.accuracy = ratio(correct, r.total);

  int64_t present = 0;
  double sum_p = 0, sum_r = 0, sum_f = 0, weighted = 0;
  for (size_t c = 0; c < k; ++c) {
    const int64_t tp = confusion[c][c];
    r.precision[c] = ratio(tp, predicted[c]);
    r.recall[c] = ratio(tp, r.support[c]);
    // 2tp / (2tp + fp + fn): equals 2PR/(P+R), and 0 (not NaN) when tp == 0.
    r.f1[c] = ratio(2 * tp, r.support[c] + predicted[c]);
    if (r.support[c] + predicted[c] > 0) {
      ++present;
      sum_p += r.precision[c];
      sum_r += r.recall[c];
      sum_f += r.f1[c];
    }
    weighted += r.f1[c] * static_cast<double>(r.support[c]);
  }
  if (present > 0) {
    r.macro_precision = sum_p / static_cast<double>(present);
    r.macro_recall = sum_r / static_cast<double>(present);
    r.macro_f1 = sum_f / static_cast<double>(present);
  }
  r.weighted_f1 = r.total > 0 ? weighted / static_cast<double>(r.total) : 0.0;
  r.scores = {{"accuracy", r.accuracy}, {"macro_f1", r.macro_f1}, {"weighted_f1", r.weighted_f1},
              {"mcc", matthews_corrcoef(confusion)}};
  r.confusion = std::move(confusion);
  return r;
}

std::optional<double> ClassificationReport::score(const std::string& name) const {
  for (const auto& [key, value] : scores)
    if (key == name) return value;
  return std::nullopt;
}

ClassificationReport classification_report(const std::vector<int64_t>& predictions,
                                           const std::vector<int64_t>& labels,
                                           int64_t num_labels, double loss) {
  return report_from_confusion(confusion_matrix(predictions, labels, num_labels), loss);
}

std::vector<int64_t> class_counts(const std::vector<int64_t>& labels, int64_t num_labels) {
  if (num_labels <= 0) fail("metrics: num_labels is {}; it must be >= 1", num_labels);
  std::vector<int64_t> counts(static_cast<size_t>(num_labels), 0);
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_labels)
      fail("metrics: label {} at position {} is outside [0, {})", labels[i], i, num_labels);
    ++counts[static_cast<size_t>(labels[i])];
  }
  return counts;
}

MultiLabelCounts multi_label_counts(const std::vector<uint8_t>& predicted, const std::vector<uint8_t>& truth,
                                    int64_t num_labels) {
  if (num_labels <= 0) fail("metrics: num_labels is {}; it must be >= 1", num_labels);
  const auto k = static_cast<size_t>(num_labels);
  if (predicted.size() != truth.size() || truth.size() % k != 0)
    fail("metrics: {} predicted and {} true decisions for {} labels; both must be rows x labels", predicted.size(),
         truth.size(), k);
  MultiLabelCounts c;
  c.tp.assign(k, 0), c.fp.assign(k, 0), c.fn.assign(k, 0);
  c.rows = static_cast<int64_t>(truth.size() / k);
  for (size_t row = 0; row < truth.size() / k; ++row) {
    bool all = true;
    for (size_t j = 0; j < k; ++j) {
      const bool p = predicted[row * k + j] != 0, t = truth[row * k + j] != 0;
      c.tp[j] += p && t;
      c.fp[j] += p && !t;
      c.fn[j] += !p && t;
      all = all && p == t;
    }
    c.exact += all;
  }
  return c;
}

ClassificationReport multi_label_report(const MultiLabelCounts& c, double loss) {
  const size_t k = c.tp.size();
  ClassificationReport r;
  r.problem_type = ProblemType::kMultiLabel;
  r.loss = loss;
  r.total = c.rows;
  r.precision.assign(k, 0.0), r.recall.assign(k, 0.0), r.f1.assign(k, 0.0), r.support.assign(k, 0);
  int64_t tp = 0, fp = 0, fn = 0;
  double sum_p = 0, sum_r = 0, sum_f = 0, weighted = 0;
  int64_t support = 0;
  for (size_t j = 0; j < k; ++j) {
    r.support[j] = c.tp[j] + c.fn[j];
    r.precision[j] = ratio(c.tp[j], c.tp[j] + c.fp[j]);
    r.recall[j] = ratio(c.tp[j], r.support[j]);
    r.f1[j] = ratio(2 * c.tp[j], 2 * c.tp[j] + c.fp[j] + c.fn[j]);
    sum_p += r.precision[j], sum_r += r.recall[j], sum_f += r.f1[j];
    weighted += r.f1[j] * static_cast<double>(r.support[j]);
    support += r.support[j];
    tp += c.tp[j], fp += c.fp[j], fn += c.fn[j];
  }
  // sklearn's macro average over indicator columns counts every label.
  if (k > 0) {
    r.macro_precision = sum_p / static_cast<double>(k);
    r.macro_recall = sum_r / static_cast<double>(k);
    r.macro_f1 = sum_f / static_cast<double>(k);
  }
  r.weighted_f1 = support > 0 ? weighted / static_cast<double>(support) : 0.0;
  r.accuracy = ratio(c.exact, c.rows);
  r.scores = {{"micro_f1", ratio(2 * tp, 2 * tp + fp + fn)},
              {"macro_f1", r.macro_f1},
              {"subset_accuracy", r.accuracy},
              {"micro_precision", ratio(tp, tp + fp)},
              {"micro_recall", ratio(tp, tp + fn)}};
  return r;
}

namespace {

// 1-based ranks, ties sharing their mean rank (scipy.stats.rankdata's 'average').
std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> ranks(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double mean = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t m = i; m <= j; ++m) ranks[order[m]] = mean;
    i = j + 1;
  }
  return ranks;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const auto n = static_cast<double>(x.size());
  if (x.size() < 2) return 0.0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= n, my /= n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

}  // namespace

ClassificationReport regression_report(const std::vector<double>& predictions, const std::vector<double>& labels,
                                       double loss) {
  if (predictions.size() != labels.size())
    fail("metrics: {} predictions for {} labels; give one prediction per row", predictions.size(), labels.size());
  ClassificationReport r;
  r.problem_type = ProblemType::kRegression;
  r.loss = loss;
  r.total = static_cast<int64_t>(labels.size());
  double se = 0, ae = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    se += (predictions[i] - labels[i]) * (predictions[i] - labels[i]);
    ae += std::abs(predictions[i] - labels[i]);
  }
  const double n = std::max<double>(1.0, static_cast<double>(labels.size()));
  r.scores = {{"mse", se / n},
              {"mae", ae / n},
              {"pearson", pearson(predictions, labels)},
              {"spearman", pearson(average_ranks(predictions), average_ranks(labels))}};
  return r;
}

std::string format_task_report(const ClassificationReport& report, const std::vector<std::string>& label_names,
                               int digits) {
  digits = std::clamp(digits, 0, 8);
  std::string out;
  const bool entities = !report.task.empty();
  if (report.problem_type == ProblemType::kMultiLabel || entities) {
    // Entities: one row per entity type (seqeval's table); multi-label: per label.
    const std::vector<std::string>& names = entities ? report.row_names : label_names;
    const size_t k = report.support.size();
    if (names.size() != k) fail("metrics: {} label names for {} labels; give one name per label", names.size(), k);
    size_t width = std::string("subset accuracy").size();
    for (const auto& n : names) width = std::max(width, display_width(n));
    auto row = [&](const std::string& name, double p, double rc, double f, int64_t support) {
      return fmt::format("{}  {:>9.{}f} {:>9.{}f} {:>9.{}f} {:>9}\n", pad_left(name, width), p, digits, rc, digits, f,
                         digits, support);
    };
    out = fmt::format("{}  {:>9} {:>9} {:>9} {:>9}\n\n", std::string(width, ' '), "precision", "recall", "f1-score",
                      "support");
    int64_t support = 0;
    for (size_t c = 0; c < k; ++c) {
      out += row(names[c], report.precision[c], report.recall[c], report.f1[c], report.support[c]);
      support += report.support[c];
    }
    const char* micro = entities ? "" : "micro_";
    out += "\n" + row("micro avg", *report.score(fmt::format("{}precision", micro)),
                      *report.score(fmt::format("{}recall", micro)), *report.score(fmt::format("{}f1", micro)), support);
    out += row("macro avg", report.macro_precision, report.macro_recall, report.macro_f1, support);
    out += fmt::format("{}  {:>9} {:>9} {:>9.{}f} {:>9}\n", pad_left(entities ? "token accuracy" : "subset accuracy", width),
                       "", "", report.accuracy, digits, report.total);
  } else {
    for (const auto& [name, value] : report.scores) out += fmt::format("{:>9}  {:.{}f}\n", name, value, digits);
    out += fmt::format("{:>9}  {}\n", "rows", report.total);
  }
  out += fmt::format("{:>9}  {:.{}f}\n", "loss", report.loss, digits);
  return out;
}

std::string format_report(const ClassificationReport& report,
                          const std::vector<std::string>& label_names, int digits) {
  if (report.problem_type != ProblemType::kSingleLabel || !report.task.empty())
    return format_task_report(report, label_names, digits);
  const size_t k = report.support.size();
  std::vector<std::string> names = label_names;
  if (names.empty()) {
    for (size_t c = 0; c < k; ++c) names.push_back(std::to_string(c));
  } else if (names.size() != k) {
    fail("metrics: {} label names for {} classes; give one name per class", names.size(), k);
  }
  digits = std::clamp(digits, 0, 8);
  size_t width = std::string("weighted avg").size();
  for (const auto& n : names) width = std::max(width, display_width(n));

  // Weighted precision/recall are only shown, so they are derived here.
  double wp = 0, wr = 0;
  for (size_t c = 0; c < k; ++c) {
    wp += report.precision[c] * static_cast<double>(report.support[c]);
    wr += report.recall[c] * static_cast<double>(report.support[c]);
  }
  if (report.total > 0) {
    wp /= static_cast<double>(report.total);
    wr /= static_cast<double>(report.total);
  }

  auto row = [&](const std::string& name, double p, double r, double f, int64_t support) {
    return fmt::format("{}  {:>9.{}f} {:>9.{}f} {:>9.{}f} {:>9}\n", pad_left(name, width), p,
                       digits, r, digits, f, digits, support);
  };
  std::string out = fmt::format("{}  {:>9} {:>9} {:>9} {:>9}\n\n", std::string(width, ' '),
                                "precision", "recall", "f1-score", "support");
  for (size_t c = 0; c < k; ++c)
    out += row(names[c], report.precision[c], report.recall[c], report.f1[c], report.support[c]);
  out += "\n";
  out += fmt::format("{}  {:>9} {:>9} {:>9.{}f} {:>9}\n", pad_left("accuracy", width), "", "",
                     report.accuracy, digits, report.total);
  out += row("macro avg", report.macro_precision, report.macro_recall, report.macro_f1,
             report.total);
  out += row("weighted avg", wp, wr, report.weighted_f1, report.total);
  out += fmt::format("{}  {:>9} {:>9} {:>9.{}f}\n", pad_left("loss", width), "", "", report.loss,
                     digits);
  return out;
}

}  // namespace ft
