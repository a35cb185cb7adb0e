// Sharded checkpoints and their consolidation (DeepSpeed's zero_to_fp32).
//
// Layout written by ShardedCheckpointing::save_sharded (ft/parallel/abilities.h; written by strategies/sharded):
//
//   <dir>/sharded/meta.json                     written by rank 0
//       {"format": "ft-sharded-v1", "strategy", "world_size",
//        "optimizer_step", "optimizer_buffers": ["exp_avg", ...],
//        "units": [FlatLayout JSON: world, numel, padded_numel,
//                  entries: [{name, shape, offset, numel, trainable}]]}
//   <dir>/sharded/rank-<r>-of-<w>.safetensors   written by rank r
//       "unit.<u>.param"        fp32 shard of unit u's flat parameters
//       "unit.<u>.<buffer>"     fp32 shard of unit u's flat optimizer state
//                               (zeros over padding and frozen parameters)
//
// Every shard of a unit has padded_numel / world_size elements; concatenating
// ranks 0..w-1 and dropping the padding gives the unit's flat buffer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/parallel/flat_shard.h"
#include "ft/base/types.h"

namespace ft {

/// meta.json of a sharded checkpoint.
struct ShardedMeta {
  std::string strategy;
  int world_size = 1;
  int64_t optimizer_step = 0;
  std::vector<std::string> optimizer_buffers;  ///< e.g. {"exp_avg", "exp_avg_sq"}; empty for plain SGD
  std::vector<FlatLayout> units;
};

/// `<dir>/sharded/rank-<r>-of-<w>.safetensors`.
std::filesystem::path shard_file(const std::filesystem::path& dir, int rank, int world);

/// Writes `<dir>/sharded/meta.json` (creating `sharded/`).
void write_sharded_meta(const std::filesystem::path& dir, const ShardedMeta& meta);
/// Writes one rank's shard file (creating `sharded/`). `tensors` named as above.
void write_shard(const std::filesystem::path& dir, int rank, const ShardedMeta& meta, const TensorList& tensors);

/// Reads `<dir>/sharded/meta.json`; errors name the file and the problem.
ShardedMeta read_sharded_meta(const std::filesystem::path& dir);

/// Full weights (HF names, model order) and full optimizer state (keyed
/// "<param>.<buffer>", step from meta) rebuilt from every rank's shard.
/// Errors name the missing/mis-sized shard file or tensor.
struct ConsolidatedCheckpoint {
  TensorList model;
  OptimizerState optimizer;
  ShardedMeta meta;
};
ConsolidatedCheckpoint read_sharded_checkpoint(const std::filesystem::path& dir);

/// `ft consolidate DIR --out OUT`: writes OUT/model.safetensors and
/// OUT/training_state/optimizer.safetensors from DIR/sharded/. When OUT is
/// not DIR, also copies DIR's config.json, vocab.txt and the rest of
/// training_state/ (trainer_state.json, rng.safetensors, run.yaml) when
/// present, so OUT is a complete checkpoint. Returns what was read.
ConsolidatedCheckpoint consolidate_checkpoint(const std::filesystem::path& dir, const std::filesystem::path& out);

}  // namespace ft
