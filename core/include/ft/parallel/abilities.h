// Optional abilities: small interfaces a Strategy may implement beside the
// seam (ft/parallel/strategy.h). The Trainer asks for them with Strategy::ability<T>(),
// never with a dynamic_cast of its own, so a strategy that wraps another
// (`auto`) can forward the abilities of the one it wraps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ft/parallel/cost_model.h"

namespace ft {

class Comm;
class EncoderModel;

/// Rows per micro-batch (per data-parallel group) and micro-batches per step.
struct MicroBatching {
  int64_t rows = 1;
  int64_t micro_batches = 1;
};

/// A strategy that can write its state as per-rank shards without
/// gathering (zero1/2/3, fsdp).
class __attribute__((visibility("default"))) ShardedCheckpointing {
 public:
  virtual ~ShardedCheckpointing();  // out of line: anchors type_info in ft_core
  /// Writes this rank's weight and optimizer-state shards to
  /// `<dir>/sharded/rank-<r>-of-<w>.safetensors`; rank 0 also writes
  /// `<dir>/sharded/meta.json` (layouts, names, offsets, padding, world
  /// size, optimizer step). No communication: the caller makes sure `dir`
  /// exists on every rank before (barrier) and that nobody reads the
  /// shards before every rank returned (barrier). Read back with
  /// ft::read_sharded_checkpoint / `ft consolidate`.
  virtual void save_sharded(const std::filesystem::path& dir) = 0;
};

/// A strategy whose ranks are not all data-parallel: the ranks of one
/// pipeline (or tensor-parallel group) read the same batch. The Trainer then
/// shards training and evaluation data, and normalises losses, over
/// data_comm() (the data-parallel group holding this rank; a world of one
/// when there is no data parallelism) instead of the job's Comm. Evaluation
/// forwards must return the same logits on every rank of such a group.
/// Valid from setup() to teardown().
class __attribute__((visibility("default"))) DataParallelGroup {
 public:
  virtual ~DataParallelGroup();
  virtual Comm& data_comm() = 0;
  /// False where a training forward returns placeholder logits (a
  /// pipeline's stages before the last): the Trainer leaves this rank's loss
  /// out of the logged average, and the strategy's backward() ignores it.
  virtual bool holds_loss() const { return true; }
  /// How the Trainer reads train.batch_size and train.grad_accum for this
  /// group: rows per micro-batch per data-parallel group, and micro-batches
  /// per step. The default takes them as given (DeepSpeed's and Megatron's
  /// rule: the micro-batch is per data-parallel rank, so the global batch is
  /// batch_size x data-parallel groups x grad_accum). `auto` scales them
  /// when it picks pipeline or tensor, keeping the global batch of the
  /// data-parallel strategies it weighed them against.
  virtual MicroBatching micro_batching(int64_t batch_size, int64_t grad_accum) const {
    return {batch_size, grad_accum};
  }
};

/// A strategy whose ranks all live in the one process `ft run` starts
/// (single; dp, whose replicas are threads): `ft run` without --nproc runs
/// it as meant, and `ft bench` starts one process for its row with all the
/// cores, handing the row's ranks to ranks_option().
class __attribute__((visibility("default"))) OneProcess {
 public:
  virtual ~OneProcess();
  /// The strategy.options key that sets how many ranks run inside the
  /// process (dp: "replicas"); empty when it runs exactly one.
  virtual std::string ranks_option() const = 0;
};

/// What a strategy's memory theory reads: the model's shape, the ranks and
/// the run's strategy.options (only the keys memory_options() names).
struct TheoryInputs {
  ModelShape model;
  int world_size = 1;
  std::map<std::string, std::string> options;
};

/// A strategy that says what it holds and moves, so that core and the CLI
/// never need its name: `ft bench` prints its formula and theory bytes beside
/// what each rank measured, and `auto` weighs its estimate against the other
/// installed strategies'. Called on a strategy that was created but never set
/// up; every method is pure arithmetic on its arguments.
class __attribute__((visibility("default"))) MemoryModel {
 public:
  virtual ~MemoryModel();
  /// The model-state formula under `options`, e.g. "8Ψ+8Ψ/N" (Ψ trainable
  /// parameters, N ranks; ft/parallel/cost_model.h has the notation).
  virtual std::string memory_formula(const std::map<std::string, std::string>& options) const = 0;
  /// Bytes per rank the theory predicts for what state_bytes() measures:
  /// parameters, gradients and optimizer state, with whatever the strategy
  /// keeps in flight (bucket pools, gathered units); -1 when the shape does
  /// not say enough. Throws ft::Error for options the strategy refuses.
  virtual int64_t theory_bytes(const TheoryInputs& in) const = 0;
  /// The strategy.options keys that change the formula or the bytes.
  virtual std::vector<std::string> memory_options() const { return {}; }
  /// `auto`'s estimate of one step of `model` over all in.world_size ranks:
  /// memory, communication and compute (begin_estimate/finish_estimate in
  /// ft/parallel/cost_model.h do the shared parts). Empty when this strategy cannot
  /// or should not run this job: the default, for strategies `auto` never
  /// picks.
  virtual std::optional<CandidateEstimate> estimate(const PlanInputs& in, const EncoderModel& model) const {
    (void)in;
    (void)model;
    return std::nullopt;
  }
};

}  // namespace ft
