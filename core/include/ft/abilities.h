// Optional abilities: small interfaces a Strategy may implement beside the
// seam (ft/strategy.h). The Trainer asks for them with Strategy::ability<T>(),
// never with a dynamic_cast of its own, so a strategy that wraps another
// (`auto`) can forward the abilities of the one it wraps.
#pragma once

#include <cstdint>
#include <filesystem>

namespace ft {

class Comm;

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

}  // namespace ft
