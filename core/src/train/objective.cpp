// The two objectives: sequence classification and masked-LM pretraining.
#include "ft/objective.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ft/comm.h"
#include "ft/error.h"
#include "ft/events.h"
#include "ft/mlm.h"
#include "ft/sampler.h"
#include "ft/strategy.h"

namespace ft {
namespace {

class Classification final : public Objective {
 public:
  Batch batch(const Dataset& data, const std::vector<int64_t>& rows, int64_t) const override {
    return data.collate(rows);
  }
  at::Tensor loss(const at::Tensor& logits, const Batch& batch) const override {
    // Strategies move the model inputs, never the caller's batch, so its
    // labels are still on the CPU (a no-op copy there; dp gathers its logits on ctx.device).
    return at::cross_entropy_loss(logits, batch.labels.to(logits.device()));
  }
  // The mean over the step's micro-batches (each already a mean over its rows).
  double step_divisor(const std::vector<Batch>& micro_batches, Comm&) const override {
    return static_cast<double>(micro_batches.size());
  }

  ClassificationReport evaluate(Strategy& strategy, const Dataset& dev, Comm& comm, EventLog& events,
                                int64_t per_rank) const override {
    auto batches = eval_batches(dev.size(), per_rank, comm.world_size(), comm.rank());
    std::vector<int64_t> preds, labels;
    double loss_sum = 0.0;
    const auto total = static_cast<int64_t>(batches.size());
    int64_t done = 0;
    for (const auto& b : batches) {
      events.eval_progress(done++, total);
      Batch batch = dev.collate(b.rows);
      auto logits = strategy.forward(batch);
      auto n = b.num_valid;
      if (n == 0) continue;
      auto valid_logits = logits.narrow(0, 0, n).to(at::kCPU, at::kFloat);
      auto valid_labels = batch.labels.narrow(0, 0, n);
      loss_sum += at::cross_entropy_loss(valid_logits, valid_labels, {}, at::Reduction::Sum).item<double>();
      auto p = valid_logits.argmax(1).contiguous();
      preds.insert(preds.end(), p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
      auto l = valid_labels.contiguous();
      labels.insert(labels.end(), l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + n);
    }
    events.eval_progress(total, total);
    auto both = at::cat({at::tensor(preds, at::kLong), at::tensor(labels, at::kLong)});
    auto gathered = comm.all_gather_varlen(both);
    std::vector<int64_t> all_preds, all_labels;
    for (const auto& g : gathered) {
      const int64_t half = g.numel() / 2;
      auto* d = g.data_ptr<int64_t>();
      all_preds.insert(all_preds.end(), d, d + half);
      all_labels.insert(all_labels.end(), d + half, d + 2 * half);
    }
    auto loss_t = at::tensor({loss_sum}, at::kDouble);
    comm.all_reduce(loss_t, ReduceOp::Sum);
    const double mean_loss = all_labels.empty() ? 0.0 : loss_t.item<double>() / static_cast<double>(all_labels.size());
    return classification_report(all_preds, all_labels, dev.num_labels(), mean_loss);
  }

  void report(EventLog& events, int64_t step, int64_t epoch, const ClassificationReport& r,
              const std::vector<std::string>& label_names) const override {
    events.eval(step, epoch, r, label_names);
  }
};

class MaskedLm final : public Objective {
 public:
  explicit MaskedLm(MaskingOptions masking) : masking_(std::move(masking)) {}

  Batch batch(const Dataset& data, const std::vector<int64_t>& rows, int64_t epoch) const override {
    return mask_tokens(data.collate(rows), rows, epoch, masking_);
  }
  at::Tensor loss(const at::Tensor& logits, const Batch& batch) const override {
    return at::cross_entropy_loss(logits, batch.labels.to(logits.device()), {}, at::Reduction::Sum);
  }
  double step_divisor(const std::vector<Batch>& micro_batches, Comm& comm) const override {
    double masked = 0;
    for (const auto& b : micro_batches) masked += static_cast<double>(b.labels.numel());
    if (comm.world_size() > 1) {
      auto t = at::tensor({masked}, at::kDouble);
      comm.all_reduce(t, ReduceOp::Sum);
      masked = t.item<double>();
    }
    return std::max(1.0, masked) / static_cast<double>(comm.world_size());
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
      const auto m = at::searchsorted(batch.mlm_positions, valid_end).item<int64_t>();
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

}  // namespace

std::unique_ptr<Objective> make_objective(const RunConfig& config, const RunInputs& inputs) {
  if (config.task == RunConfig::Task::kClassify) return std::make_unique<Classification>();
  if (!inputs.tokenizer) fail("{}: masked-LM pretraining needs text data and data.vocab", config.source);
  // Its own stream of the run seed: masks do not move when dropout or init draws do.
  return std::make_unique<MaskedLm>(
      MaskingOptions::from(*inputs.tokenizer, config.pretrain, static_cast<uint64_t>(config.train.seed) ^ 0x4D4C4DULL));
}

}  // namespace ft
