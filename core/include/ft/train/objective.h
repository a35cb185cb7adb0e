// What the Trainer optimises and how it judges the result. Sequence
// classification (`ft run`) and masked-LM pretraining (`ft pretrain`) share
// the whole loop (strategies, precision, accumulation, checkpoints, resume,
// progress) and differ only here: what a micro-batch is, its loss, how a
// step's loss is normalised, and the evaluation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/config/config.h"
#include "ft/data/data.h"
#include "ft/observe/metrics.h"
#include "ft/tasks/run_inputs.h"
#include "ft/base/types.h"

namespace ft {

class Comm;
class EventLog;
class Strategy;

class Objective {
 public:
  virtual ~Objective() = default;

  // The micro-batch of dataset `rows` in `epoch` (the masked LM masks it).
  virtual Batch batch(const Dataset& data, const std::vector<int64_t>& rows, int64_t epoch) const = 0;

  // One micro-batch's loss: the mean over rows (classification) or the sum
  // over masked tokens (masked LM).
  virtual at::Tensor loss(const at::Tensor& logits, const Batch& batch) const = 0;

  // What a step's micro-batch losses are divided by, so that the gradient
  // summed over its micro-batches and averaged over ranks (as every
  // strategy averages) is the gradient of the step's mean loss.
  // Classification: the micro-batch count (every rank's rows weigh the
  // same). Masked LM: the step's masked tokens on all ranks over the world
  // size, because ranks mask different numbers of tokens (collective then).
  virtual double step_divisor(const std::vector<Batch>& micro_batches, Comm& comm) const = 0;

  // Evaluates `data`, each rank its share (collective).
  virtual ClassificationReport evaluate(Strategy& strategy, const Dataset& data, Comm& comm, EventLog& events,
                                        int64_t per_rank_batch) const = 0;

  // Called once the strategy is set up, with its data-parallel group: a
  // loss that sees other ranks' rows (in-batch negatives) gathers over it.
  virtual void attach(Comm& data_comm) { (void)data_comm; }

  // One micro-batch's forward and backward, for an objective that runs
  // several forwards per micro-batch (a cached loss); returns its loss,
  // already divided by `divisor`. nullopt: the Trainer runs forward, loss()
  // and backward itself. `sync` as Strategy::backward's.
  virtual std::optional<double> train_micro_batch(Strategy& strategy, const Batch& batch, double divisor,
                                                  bool sync) const {
    (void)strategy, (void)batch, (void)divisor, (void)sync;
    return std::nullopt;
  }

  // Candidates per anchor besides its own positive, for a ranking loss
  // training on `train` with `rows_per_rank` rows per micro-batch on
  // `data_ranks` data-parallel ranks; -1 for other losses.
  virtual int64_t negatives_per_anchor(const Dataset& train, int64_t rows_per_rank, int data_ranks) const {
    (void)train, (void)rows_per_rank, (void)data_ranks;
    return -1;
  }

  // Whether the untrained model is evaluated once before the first step, so
  // the gain is visible (embeddings: the pretrained model's retrieval).
  virtual bool evaluates_first() const { return false; }

  // The evaluation's event line and metrics record.
  virtual void report(EventLog& events, int64_t step, int64_t epoch, const ClassificationReport& r,
                      const std::vector<std::string>& label_names) const = 0;
};

// An objective scored per token (the masked LM, token classification): the
// cross-entropy summed over the labelled tokens, divided by the tokens the
// step's micro-batches score on all ranks over the world size (collective),
// so that any split of the global batch trains as one process on all of it
// (transformers' models take the mean over their batch's labelled tokens).
class TokenLevelObjective : public Objective {
 public:
  at::Tensor loss(const at::Tensor& logits, const Batch& batch) const override;
  double step_divisor(const std::vector<Batch>& micro_batches, Comm& comm) const override;

 protected:
  // What `batch`'s tokens weigh in the step's mean: their count, or with
  // class weights the sum of their labels' weights (CrossEntropyLoss's
  // weighted mean).
  virtual double scored_weight(const Batch& batch) const { return static_cast<double>(batch.labels.numel()); }
};

struct ClassLossOptions;

// Token classification over these tags (their ids are the model's labels),
// its cross-entropy shaped by `class_loss` (ft/tasks/class_loss.h).
std::unique_ptr<Objective> make_token_classification_objective(std::vector<std::string> label_names,
                                                               const ClassLossOptions& class_loss);

// Sentence embedding (ft/tasks/sentence_pairs.h's batches) with the loss of
// `config`; `scored`: the rows carry scores; `dimension`: the embeddings'.
std::unique_ptr<Objective> make_sentence_embedding_objective(const EmbeddingConfig& config, bool scored,
                                                             int64_t dimension);

// config.task's objective (the masked LM masks with inputs.tokenizer).
std::unique_ptr<Objective> make_objective(const RunConfig& config, const RunInputs& inputs);

}  // namespace ft
