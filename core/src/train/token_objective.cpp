// Token classification's objective: the cross-entropy of the labelled
// tokens (with train.class_weights, label smoothing or focal loss as for
// rows), normalised over the step's labelled tokens on every rank (their
// weights' sum when weighted), so that any split of the global batch trains
// as one process on all of it, and seqeval's entity scores at evaluation.
#include <algorithm>

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/observe/events.h"
#include "ft/train/objective.h"
#include "ft/data/sampler.h"
#include "ft/parallel/strategy.h"
#include "ft/tasks/class_loss.h"
#include "ft/tasks/token_classification.h"

namespace ft {
namespace {

class TokenClassification final : public TokenLevelObjective {
 public:
  TokenClassification(std::vector<std::string> label_names, ClassLossOptions class_loss)
      : label_names_(std::move(label_names)), types_(entity_types(label_names_)), class_loss_(std::move(class_loss)) {
    if (!class_loss_.class_weights.empty()) weights_ = at::tensor(class_loss_.class_weights, at::kDouble);
  }

  Batch batch(const Dataset& data, const std::vector<int64_t>& rows, int64_t) const override {
    return data.collate(rows);
  }
  at::Tensor loss(const at::Tensor& logits, const Batch& batch) const override {
    if (class_loss_.plain()) return TokenLevelObjective::loss(logits, batch);
    return class_loss_terms(logits, batch.labels.to(logits.device()), class_loss_).losses.sum();
  }
  // As run_ner.py's compute_metrics: the labelled tokens' predicted and true
  // tags per sentence through seqeval; the counts add up over ranks.
  ClassificationReport evaluate(Strategy& strategy, const Dataset& dev, Comm& comm, EventLog& events,
                                int64_t per_rank) const override {
    auto batches = eval_batches(dev.size(), per_rank, comm.world_size(), comm.rank());
    EntityCounts counts;
    counts.types = types_;
    counts.true_entities.assign(types_.size(), 0);
    counts.predicted_entities.assign(types_.size(), 0);
    counts.correct_entities.assign(types_.size(), 0);
    double loss_sum = 0.0, weight_sum = 0.0;
    const auto total = static_cast<int64_t>(batches.size());
    int64_t done = 0;
    for (const auto& b : batches) {
      events.eval_progress(done++, total);
      Batch batch = dev.collate(b.rows);
      auto logits = strategy.forward(batch);
      // Rows past num_valid repeat a row to keep collectives even: their tokens do not count.
      const int64_t seq = batch.input_ids.size(1);
      const auto m = at::searchsorted(batch.positions, b.num_valid * seq).item<int64_t>();
      if (m == 0) continue;
      const at::Tensor valid = logits.narrow(0, 0, m).to(at::kCPU, at::kFloat);
      const at::Tensor truth = batch.labels.narrow(0, 0, m);
      const auto terms = class_loss_terms(valid, truth, class_loss_);  // the training loss's (weighted) mean
      loss_sum += terms.losses.sum().item<double>();
      weight_sum += terms.weights.sum().item<double>();
      counts += count_entities(sentences(truth, batch.positions, seq), sentences(valid.argmax(1), batch.positions, seq),
                               types_);
    }
    events.eval_progress(total, total);
    std::vector<int64_t> v = counts.to_vector();
    const auto n = static_cast<int64_t>(v.size());
    at::Tensor sums = at::empty({n + 2}, at::kDouble);
    for (size_t i = 0; i < v.size(); ++i) sums[static_cast<int64_t>(i)] = static_cast<double>(v[i]);
    sums[n] = loss_sum;
    sums[n + 1] = weight_sum;
    comm.all_reduce(sums, ReduceOp::Sum);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(sums[static_cast<int64_t>(i)].item<double>());
    const EntityCounts all = EntityCounts::from_vector(types_, v);
    const double weights = sums[n + 1].item<double>();
    const double loss = weights > 0 ? sums[n].item<double>() / weights : 0.0;
    return entity_task_report(entity_report(all), loss);
  }

  void report(EventLog& events, int64_t step, int64_t epoch, const ClassificationReport& r,
              const std::vector<std::string>& label_names) const override {
    events.eval(step, epoch, r, label_names);
  }

 private:
  // Label ids at flat positions (ascending) -> one list of tag names per row.
  std::vector<std::vector<std::string>> sentences(const at::Tensor& ids, const at::Tensor& positions, int64_t seq) const {
    std::vector<std::vector<std::string>> out;
    const int64_t* id = ids.data_ptr<int64_t>();
    const int64_t* pos = positions.data_ptr<int64_t>();
    int64_t row = -1;
    for (int64_t i = 0; i < ids.numel(); ++i) {
      if (pos[i] / seq != row) {
        row = pos[i] / seq;
        out.emplace_back();
      }
      out.back().push_back(label_names_.at(static_cast<size_t>(id[i])));
    }
    return out;
  }

  double scored_weight(const Batch& batch) const override {
    if (!weights_.defined()) return TokenLevelObjective::scored_weight(batch);
    return weights_.index_select(0, batch.labels.to(at::kCPU)).sum().item<double>();
  }

  std::vector<std::string> label_names_;
  std::vector<std::string> types_;
  ClassLossOptions class_loss_;
  at::Tensor weights_;  // class_weights as a CPU tensor, empty without them
};

}  // namespace

std::unique_ptr<Objective> make_token_classification_objective(std::vector<std::string> label_names,
                                                               const ClassLossOptions& class_loss) {
  return std::make_unique<TokenClassification>(std::move(label_names), class_loss);
}

}  // namespace ft
