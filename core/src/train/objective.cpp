// The two objectives: sequence classification and masked-LM pretraining.
#include "ft/train/objective.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ft/tasks/class_loss.h"
#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/observe/events.h"
#include "ft/tasks/mlm.h"
#include "ft/data/sampler.h"
#include "ft/parallel/strategy.h"

namespace ft {
namespace {

// Sequence classification of every problem type (ft/base/problem_type.h): the
// losses transformers' XForSequenceClassification takes for each.
class Classification final : public Objective {
 public:
  Classification(ProblemType type, bool huber, double threshold, ClassLossOptions class_loss)
      : type_(type), huber_(huber), threshold_(threshold), class_loss_(std::move(class_loss)) {
    if (type_ == ProblemType::kMultiLabel && !class_loss_.class_weights.empty()) {
      pos_weight_ = at::tensor(class_loss_.class_weights, at::kDouble).to(at::kFloat);
    }
  }

  Batch batch(const Dataset& data, const std::vector<int64_t>& rows, int64_t) const override {
    return data.collate(rows);
  }
  at::Tensor loss(const at::Tensor& logits, const Batch& batch) const override {
    if (weighted()) return class_loss_terms(logits, batch.labels.to(logits.device()), class_loss_).mean();
    return loss_of(logits, batch.labels, at::Reduction::Mean);
  }
  // The mean over the step's micro-batches (each already a mean over its rows).
  double step_divisor(const std::vector<Batch>& micro_batches, Comm&) const override {
    return static_cast<double>(micro_batches.size());
  }

  ClassificationReport evaluate(Strategy& strategy, const Dataset& dev, Comm& comm, EventLog& events,
                                int64_t per_rank) const override {
    auto batches = eval_batches(dev.size(), per_rank, comm.world_size(), comm.rank());
    std::vector<at::Tensor> outputs, labels;  // the valid rows' logits and labels, on the CPU
    double loss_sum = 0.0, weight_sum = 0.0;
    const auto total = static_cast<int64_t>(batches.size());
    int64_t done = 0;
    for (const auto& b : batches) {
      events.eval_progress(done++, total);
      Batch batch = dev.collate(b.rows);
      auto logits = strategy.forward(batch);
      auto n = b.num_valid;
      if (n == 0) continue;
      outputs.push_back(logits.narrow(0, 0, n).to(at::kCPU, at::kFloat));
      labels.push_back(batch.labels.narrow(0, 0, n));
      if (weighted()) {  // the training loss's weighted mean (ft/tasks/class_loss.h)
        const auto terms = class_loss_terms(outputs.back(), labels.back(), class_loss_);
        loss_sum += terms.losses.sum().item<double>();
        weight_sum += terms.weights.sum().item<double>();
        continue;
      }
      // A row's loss: multi-label's BCE is its mean over the labels, as in training.
      const double width = type_ == ProblemType::kMultiLabel ? static_cast<double>(outputs.back().size(1)) : 1.0;
      loss_sum += loss_of(outputs.back(), labels.back(), at::Reduction::Sum).item<double>() / width;
      weight_sum += static_cast<double>(n);
    }
    events.eval_progress(total, total);
    auto loss_t = at::tensor({loss_sum, weight_sum}, at::kDouble);
    comm.all_reduce(loss_t, ReduceOp::Sum);
    const double rows = loss_t[1].item<double>();
    const double mean_loss = rows > 0 ? loss_t[0].item<double>() / rows : 0.0;
    const int64_t k = dev.num_labels();
    if (type_ == ProblemType::kMultiLabel) return multi_label(outputs, labels, k, comm, mean_loss);
    if (type_ == ProblemType::kRegression) return regression(outputs, labels, comm, mean_loss);
    return single_label(outputs, labels, k, comm, mean_loss);
  }

  void report(EventLog& events, int64_t step, int64_t epoch, const ClassificationReport& r,
              const std::vector<std::string>& label_names) const override {
    events.eval(step, epoch, r, label_names);
  }

 private:
  at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& cpu_labels, at::Reduction::Reduction how) const {
    // Strategies move the model inputs, never the caller's batch, so its
    // labels are still on the CPU (a no-op copy there; dp gathers its logits on ctx.device).
    const at::Tensor labels = cpu_labels.to(logits.device());
    switch (type_) {
      case ProblemType::kSingleLabel: return at::cross_entropy_loss(logits, labels, {}, how);
      // fp32 as autocast runs these losses; the labels are float already.
      case ProblemType::kMultiLabel: {
        const at::Tensor pos_weight = pos_weight_.defined() ? pos_weight_.to(logits.device()) : at::Tensor();
        return at::binary_cross_entropy_with_logits(logits.to(at::kFloat), labels, {}, pos_weight, how);
      }
      case ProblemType::kRegression: {
        const at::Tensor scores = logits.to(at::kFloat).view({-1});
        return huber_ ? at::huber_loss(scores, labels, how, 1.0) : at::mse_loss(scores, labels, how);
      }
    }
    return {};
  }

  // Every rank's rows as doubles, `width` per row (collective).
  static std::vector<double> gather_rows(const at::Tensor& local, Comm& comm) {
    std::vector<double> all;
    for (const auto& g : comm.all_gather_varlen(local.contiguous().view({-1}))) {
      const double* d = g.data_ptr<double>();
      all.insert(all.end(), d, d + g.numel());
    }
    return all;
  }

  // The correlations need every row: gathered.
  static ClassificationReport regression(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& labels,
                                         Comm& comm, double mean_loss) {
    at::Tensor preds = outputs.empty() ? at::empty({0}, at::kDouble) : at::cat(outputs).view({-1}).to(at::kDouble);
    at::Tensor truth = labels.empty() ? at::empty({0}, at::kDouble) : at::cat(labels).view({-1}).to(at::kDouble);
    const auto rows = gather_rows(at::stack({preds, truth}, 1), comm);
    std::vector<double> p, l;
    for (size_t i = 0; i + 1 < rows.size(); i += 2) p.push_back(rows[i]), l.push_back(rows[i + 1]);
    return regression_report(p, l, mean_loss);
  }

  // Each row's decision, label and class probabilities, gathered: the
  // report, and ROC / PR areas over the probabilities.
  static ClassificationReport single_label(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& labels,
                                           int64_t k, Comm& comm, double mean_loss) {
    at::Tensor logits = outputs.empty() ? at::empty({0, k}, at::kFloat) : at::cat(outputs);
    at::Tensor truth = labels.empty() ? at::empty({0}, at::kLong) : at::cat(labels);
    const at::Tensor local = at::cat({logits.argmax(1).unsqueeze(1).to(at::kDouble), truth.unsqueeze(1).to(at::kDouble),
                                      logits.softmax(1).to(at::kDouble)},
                                     1);
    const auto rows = gather_rows(local, comm);
    const size_t width = static_cast<size_t>(k) + 2;
    std::vector<int64_t> preds, gold;
    std::vector<double> probs;
    for (size_t i = 0; i + width <= rows.size(); i += width) {
      preds.push_back(static_cast<int64_t>(rows[i]));
      gold.push_back(static_cast<int64_t>(rows[i + 1]));
      probs.insert(probs.end(), rows.begin() + static_cast<std::ptrdiff_t>(i + 2),
                   rows.begin() + static_cast<std::ptrdiff_t>(i + width));
    }
    auto report = classification_report(preds, gold, k, mean_loss);
    add_ranking_scores(report, probs, gold, k);
    return report;
  }

  // Every row's sigmoid scores and true labels, gathered: the decisions at
  // the threshold are counted from them (ft/observe/metrics.h), and the ROC / PR
  // areas computed over them.
  ClassificationReport multi_label(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& labels,
                                   int64_t k, Comm& comm, double mean_loss) const {
    at::Tensor scores = outputs.empty() ? at::empty({0, k}, at::kFloat) : at::cat(outputs);
    at::Tensor truth = labels.empty() ? at::empty({0, k}, at::kFloat) : at::cat(labels);
    const auto rows = gather_rows(at::cat({scores.sigmoid(), truth.gt(0.5).to(at::kFloat)}, 1).to(at::kDouble), comm);
    std::vector<double> probs;
    std::vector<uint8_t> predicted, gold;
    const auto width = static_cast<size_t>(2 * k);
    // The scores are fp32 values held exactly in double: compared in fp32, as the tensor comparison would.
    const auto threshold = static_cast<float>(threshold_);
    for (size_t i = 0; i + width <= rows.size(); i += width) {
      for (size_t j = 0; j < static_cast<size_t>(k); ++j) {
        probs.push_back(rows[i + j]);
        predicted.push_back(static_cast<float>(rows[i + j]) >= threshold ? 1 : 0);
        gold.push_back(rows[i + static_cast<size_t>(k) + j] > 0.5 ? 1 : 0);
      }
    }
    auto report = multi_label_report(multi_label_counts(predicted, gold, k), mean_loss);
    add_multi_label_ranking_scores(report, probs, gold, k);
    return report;
  }

  bool weighted() const { return type_ == ProblemType::kSingleLabel && !class_loss_.plain(); }

  ProblemType type_;
  bool huber_;
  double threshold_;
  ClassLossOptions class_loss_;
  at::Tensor pos_weight_;  // multi-label's class_weights, [labels] on the CPU
};

class MaskedLm final : public TokenLevelObjective {
 public:
  explicit MaskedLm(MaskingOptions masking) : masking_(std::move(masking)) {}

  Batch batch(const Dataset& data, const std::vector<int64_t>& rows, int64_t epoch) const override {
    return mask_tokens(data.collate(rows), rows, epoch, masking_);
  }
  // Loss and accuracy over the masked tokens of the dev rows, masked the
  // same way at every evaluation (kEvalMaskEpoch).
  ClassificationReport evaluate(Strategy& strategy, const Dataset& dev, Comm& comm, EventLog& events,
                                int64_t per_rank) const override {
    auto batches = eval_batches(dev.size(), per_rank, comm.world_size(), comm.rank());
    double loss_sum = 0, correct = 0, tokens = 0;
    const auto total = static_cast<int64_t>(batches.size());
    int64_t done = 0;
    for (const auto& b : batches) {
      events.eval_progress(done++, total);
      Batch batch = batch_of(dev, b.rows);
      auto logits = strategy.forward(batch);
      // Rows past num_valid repeat a row to keep collectives even: their
      // masked tokens (the positions' tail) do not count.
      const int64_t valid_end = b.num_valid * batch.input_ids.size(1);
      const auto m = at::searchsorted(batch.positions, valid_end).item<int64_t>();
      if (m == 0) continue;
      auto valid_logits = logits.narrow(0, 0, m).to(at::kCPU, at::kFloat);
      auto valid_labels = batch.labels.narrow(0, 0, m);
      loss_sum += at::cross_entropy_loss(valid_logits, valid_labels, {}, at::Reduction::Sum).item<double>();
      correct += valid_logits.argmax(1).eq(valid_labels).sum().item<double>();
      tokens += static_cast<double>(m);
    }
    events.eval_progress(total, total);
    auto sums = at::tensor({loss_sum, correct, tokens}, at::kDouble);
    comm.all_reduce(sums, ReduceOp::Sum);
    const double* s = sums.data_ptr<double>();
    ClassificationReport r;
    r.total = static_cast<int64_t>(s[2]);
    r.loss = s[2] > 0 ? s[0] / s[2] : 0.0;
    r.accuracy = s[2] > 0 ? s[1] / s[2] : 0.0;
    return r;
  }

  void report(EventLog& events, int64_t step, int64_t epoch, const ClassificationReport& r,
              const std::vector<std::string>&) const override {
    events.eval_masked_lm(step, epoch, r);
  }

 private:
  Batch batch_of(const Dataset& dev, const std::vector<int64_t>& rows) const {
    return mask_tokens(dev.collate(rows), rows, kEvalMaskEpoch, masking_);
  }
  MaskingOptions masking_;
};

// The best checkpoint is judged by a metric this problem type reports.
void check_best_metric(const RunConfig& config, ProblemType type) {
  const std::string metric = best_metric_ref(config).metric;
  std::vector<std::string> names{"loss"};
  ClassificationReport empty;
  if (type == ProblemType::kSingleLabel) empty = classification_report({}, {}, 1, 0.0);
  if (type == ProblemType::kMultiLabel) empty = multi_label_report(MultiLabelCounts{{0}, {0}, {0}, 0, 0}, 0.0);
  if (type == ProblemType::kRegression) empty = regression_report({}, {}, 0.0);
  for (const auto& [name, value] : empty.scores) names.push_back(name);
  if (type != ProblemType::kRegression) names.insert(names.end(), {"roc_auc", "pr_auc"});
  if (std::find(names.begin(), names.end(), metric) != names.end()) return;
  // The default (accuracy) follows the problem type rather than failing.
  if (metric == "accuracy" && type != ProblemType::kSingleLabel) return;
  fail("{}: train.best_metric: '{}' is not a metric of {} (its metrics: {})", config.source, metric,
       problem_type_name(type), fmt::format("{}", fmt::join(names, ", ")));
}

// train.class_weights, label_smoothing_factor and focal_loss_gamma shape
// cross-entropy: single-label rows' and token classification's tokens'.
// Multi-label takes class_weights alone, as BCE's per-label pos_weight.
// Elsewhere they are refused, not ignored.
ClassLossOptions class_loss_options(const RunConfig& config, const RunInputs& inputs, ProblemType type) {
  const auto& t = config.train;
  ClassLossOptions o;
  const char* given = !t.class_weights.empty()      ? "train.class_weights"
                      : t.label_smoothing_factor > 0 ? "train.label_smoothing_factor"
                      : t.focal_loss_gamma > 0       ? "train.focal_loss_gamma"
                                                     : nullptr;
  if (given == nullptr) return o;
  const bool tokens = config.task == RunConfig::Task::kTokenClassify;
  const bool classify = config.task == RunConfig::Task::kClassify;
  if (classify && type == ProblemType::kMultiLabel) {
    const char* shaping = t.label_smoothing_factor > 0 ? "train.label_smoothing_factor"
                          : t.focal_loss_gamma > 0     ? "train.focal_loss_gamma"
                                                       : nullptr;
    if (shaping != nullptr) {
      fail("{}: {}: shapes cross-entropy over classes; multi_label_classification takes train.class_weights alone "
           "(BCE's pos_weight): remove the key",
           config.source, shaping);
    }
  } else if (!tokens && !(classify && type == ProblemType::kSingleLabel)) {
    fail("{}: {}: shapes cross-entropy over classes; this run is {} (remove the key)", config.source, given,
         classify ? problem_type_name(type) : task_name(config.task));
  }
  o.label_smoothing = t.label_smoothing_factor;
  o.focal_gamma = t.focal_loss_gamma;
  if (!t.class_weights.empty()) {
    const int64_t k = inputs.train ? inputs.train->num_labels() : inputs.model_config.num_labels;
    LabelCounts counts;
    if (inputs.train && t.class_weights.automatic) counts = count_labels(*inputs.train);
    o.class_weights = resolve_class_weights(t.class_weights, counts, inputs.label_names, k, config.source);
  }
  return o;
}

}  // namespace

at::Tensor TokenLevelObjective::loss(const at::Tensor& logits, const Batch& batch) const {
  return at::cross_entropy_loss(logits, batch.labels.to(logits.device()), {}, at::Reduction::Sum);
}

double TokenLevelObjective::step_divisor(const std::vector<Batch>& micro_batches, Comm& comm) const {
  double tokens = 0;
  for (const auto& b : micro_batches) tokens += scored_weight(b);
  if (comm.world_size() > 1) {
    auto t = at::tensor({tokens}, at::kDouble);
    comm.all_reduce(t, ReduceOp::Sum);
    tokens = t.item<double>();
  }
  return (tokens > 0 ? tokens : 1.0) / static_cast<double>(comm.world_size());
}

std::unique_ptr<Objective> make_objective(const RunConfig& config, const RunInputs& inputs) {
  if (config.task == RunConfig::Task::kTokenClassify) {
    const std::string metric = best_metric_ref(config).metric;
    if (metric != "loss" && metric != "accuracy" && metric != "f1" && metric != "precision" && metric != "recall") {
      fail("{}: train.best_metric: '{}' is not a metric of token classification (its metrics: loss, f1, precision, "
           "recall, accuracy)",
           config.source, metric);
    }
    return make_token_classification_objective(inputs.label_names,
                                               class_loss_options(config, inputs, ProblemType::kSingleLabel));
  }
  // The loss-shaping keys refuse a task they do not shape (token classification took them above).
  if (config.task != RunConfig::Task::kClassify) class_loss_options(config, inputs, ProblemType::kSingleLabel);
  if (config.task == RunConfig::Task::kSentenceEmbedding) {
    const bool scored = inputs.train && inputs.train->problem_type() == ProblemType::kRegression;
    const std::string metric = best_metric_ref(config).metric;
    const std::vector<std::string> metrics =
        scored ? std::vector<std::string>{"loss", "accuracy", "pearson", "spearman"}
               : std::vector<std::string>{"loss", "accuracy", "recall@1", "recall@10", "mrr@10"};
    if (std::find(metrics.begin(), metrics.end(), metric) == metrics.end()) {
      fail("{}: train.best_metric: '{}' is not a metric of {} (its metrics: {})", config.source, metric,
           scored ? "scored pairs" : "retrieval", fmt::join(metrics, ", "));
    }
    return make_sentence_embedding_objective(config.embedding, scored, inputs.model_config.sentence_dimension());
  }
  if (config.task == RunConfig::Task::kClassify) {
    const ProblemType type = inputs.train ? inputs.train->problem_type() : inputs.model_config.problem();
    check_best_metric(config, type);
    return std::make_unique<Classification>(type, config.train.regression_loss == "huber",
                                            config.train.multi_label_threshold, class_loss_options(config, inputs, type));
  }
  if (!inputs.tokenizer) fail("{}: masked-LM pretraining needs text data and data.vocab", config.source);
  // Its own stream of the run seed: masks do not move when dropout or init draws do.
  return std::make_unique<MaskedLm>(
      MaskingOptions::from(*inputs.tokenizer, config.pretrain, static_cast<uint64_t>(config.train.seed) ^ 0x4D4C4DULL));
}

}  // namespace ft
