// Classification metrics for evaluation: accuracy, per-class precision /
// recall / F1, macro-F1 and a printable report.
//
// Distributed evaluation: each rank builds confusion_matrix() over its valid
// rows, the Trainer sums the matrices across ranks (an all-reduce of
// num_labels^2 int64s) and calls report_from_confusion(); no predictions need
// to be gathered.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft {

/// Everything an evaluation reports. Per-class vectors have num_labels
/// entries; confusion[t][p] counts rows of true class t predicted as p.
///
/// Macro averages follow scikit-learn's `precision_recall_fscore_support(
/// average='macro', zero_division=0)` without `labels=`: the mean over the
/// classes that occur in the labels OR the predictions. A class never seen
/// in either is left out of the average (its entries are 0); a class that is
/// predicted but has no support counts with recall 0 and F1 0.
struct ClassificationReport {
  double accuracy = 0.0;
  double macro_f1 = 0.0;
  double loss = 0.0;  ///< mean loss, passed through
  double macro_precision = 0.0;
  double macro_recall = 0.0;
  double weighted_f1 = 0.0;  ///< support-weighted mean F1 (sklearn 'weighted')
  int64_t total = 0;         ///< number of evaluated rows
  std::vector<double> precision, recall, f1;
  std::vector<int64_t> support;
  std::vector<std::vector<int64_t>> confusion;
};

/// confusion[t][p]; throws ft::Error if the sizes differ or a value is
/// outside [0, num_labels).
std::vector<std::vector<int64_t>> confusion_matrix(const std::vector<int64_t>& predictions,
                                                   const std::vector<int64_t>& labels,
                                                   int64_t num_labels);

/// All metrics from a (possibly all-reduced) square confusion matrix.
/// An empty evaluation (total 0) gives zeros rather than NaNs.
ClassificationReport report_from_confusion(std::vector<std::vector<int64_t>> confusion,
                                           double loss);

/// All metrics from predictions and true labels (same length).
ClassificationReport classification_report(const std::vector<int64_t>& predictions,
                                           const std::vector<int64_t>& labels,
                                           int64_t num_labels, double loss);

/// Rows per class: counts[c] = #{i : labels[i] == c}. Throws ft::Error on a
/// label outside [0, num_labels).
std::vector<int64_t> class_counts(const std::vector<int64_t>& labels, int64_t num_labels);

/// An aligned table in the shape of sklearn's classification_report:
/// one line per class (precision, recall, f1-score, support), then accuracy,
/// macro avg and weighted avg, then the mean loss. Class names may be CJK:
/// columns are aligned by display width. Empty label_names -> "0", "1", ...;
/// otherwise it must have one name per class (ft::Error if not).
std::string format_report(const ClassificationReport& report,
                          const std::vector<std::string>& label_names, int digits = 4);

}  // namespace ft
