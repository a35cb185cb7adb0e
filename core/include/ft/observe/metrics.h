// Classification metrics for evaluation: accuracy, per-class precision /
// recall / F1, macro-F1 and a printable report.
//
// Distributed evaluation: each rank builds confusion_matrix() over its valid
// rows, the Trainer sums the matrices across ranks (an all-reduce of
// num_labels^2 int64s) and calls report_from_confusion(); no predictions need
// to be gathered.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ft/base/problem_type.h"

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
  /// Multi-label: per-label vectors as above (support: rows with the
  /// label), accuracy = subset accuracy; regression: no per-class entries.
  ProblemType problem_type = ProblemType::kSingleLabel;
  /// The evaluation's named metrics beyond loss, in print order: single-
  /// label accuracy, macro_f1, weighted_f1, mcc (then roc_auc, pr_auc where
  /// the scores were kept); multi-label micro_f1, macro_f1,
  /// subset_accuracy, micro_precision, micro_recall (roc_auc, pr_auc);
  /// regression mse, mae, pearson, spearman.
  std::vector<std::pair<std::string, double>> scores;
  /// Token classification ("token-classification"; empty: sequence
  /// classification of problem_type): scores are seqeval's precision,
  /// recall, f1 (entity level, micro) and accuracy (tokens); the per-row
  /// vectors above are per entity type, named by row_names.
  std::string task;
  std::vector<std::string> row_names;
  /// scores' value of `name`, if it has one.
  std::optional<double> score(const std::string& name) const;
};

/// A multi-label evaluation as counts, which ranks sum: per label the true
/// positives, false positives and false negatives, and the rows whose whole
/// predicted set was right.
struct MultiLabelCounts {
  std::vector<int64_t> tp, fp, fn;
  int64_t exact = 0, rows = 0;
};

/// Counts of `predicted` against `truth`, both [rows x num_labels] 0/1 row
/// major; throws ft::Error if the sizes disagree.
MultiLabelCounts multi_label_counts(const std::vector<uint8_t>& predicted, const std::vector<uint8_t>& truth,
                                    int64_t num_labels);

/// As scikit-learn's multilabel scores (zero_division=0): per-label P/R/F1,
/// micro F1 over all decisions, macro F1 the mean over every label, and
/// subset accuracy (accuracy_score on indicator matrices).
ClassificationReport multi_label_report(const MultiLabelCounts& counts, double loss);

/// MSE, MAE, Pearson's r and Spearman's rho (average ranks for ties, as
/// scipy.stats.spearmanr); a constant side gives r = 0 rather than NaN.
ClassificationReport regression_report(const std::vector<double>& predictions, const std::vector<double>& labels,
                                       double loss);

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

/// Matthews' correlation coefficient of a square confusion matrix, the
/// multiclass form of scikit-learn's matthews_corrcoef (0 when undefined).
double matthews_corrcoef(const std::vector<std::vector<int64_t>>& confusion);

/// Appends roc_auc and pr_auc (average precision) to r.scores, computed
/// from `probabilities` [rows x num_classes] row major and the true class of
/// each row, as scikit-learn's roc_auc_score / average_precision_score:
/// on class 1's score for two classes, one-vs-rest macro for more. A class
/// whose one-vs-rest problem is undefined (no positive, or for ROC no
/// negative) is left out of the mean, where scikit-learn raises or warns;
/// with none defined the score is absent.
void add_ranking_scores(ClassificationReport& r, const std::vector<double>& probabilities,
                        const std::vector<int64_t>& labels, int64_t num_classes);

/// The same per label of a multi-label evaluation (average='macro' over the
/// labels), from sigmoid scores and 0/1 truth [rows x num_labels].
void add_multi_label_ranking_scores(ClassificationReport& r, const std::vector<double>& probabilities,
                                    const std::vector<uint8_t>& truth, int64_t num_labels);

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

/// format_report of a multi-label or regression report: the per-label
/// table with micro and macro averages and subset accuracy, or the scores.
std::string format_task_report(const ClassificationReport& report, const std::vector<std::string>& label_names,
                               int digits);

}  // namespace ft
