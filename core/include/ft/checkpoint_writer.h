// CheckpointWriter: how a run puts its checkpoints on disk (the Trainer
// decides when and with what; ft/checkpoint.h is the directory format).
//
//  - write(): collective. Rank 0 writes the consolidated directory; when the
//    strategy can and train.save_sharded asks, every rank then adds its own
//    shard beside it; the manifest (ft/manifest.h) is hashed on a background
//    thread while the next steps run, and covers the shards too.
//  - rotate(): rank 0 keeps the newest train.save_total_limit checkpoint-N
//    directories under the output directory, never the best one, removing
//    the others atomically (a crash must not leave half a checkpoint).
//  - finish(): waits for the manifest in flight; a run is not done until its
//    last checkpoint is verifiable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "ft/checkpoint.h"
#include "ft/manifest.h"

namespace ft {

class Comm;
class EventLog;
class ShardedCheckpointing;

class CheckpointWriter {
 public:
  /// `save_sharded`: train.save_sharded; `save_total_limit`: train.save_total_limit (<= 0: keep all).
  CheckpointWriter(Comm& comm, EventLog& events, bool save_sharded, int64_t save_total_limit);

  /// Collective: writes `data` to `dir` (rank 0) and, with `sharded`, every rank's shard.
  void write(const std::filesystem::path& dir, CheckpointData data, ShardedCheckpointing* sharded);
  /// Rank 0 (others: no-op): rotation under `out`, sparing `best` (a path; empty: none).
  void rotate(const std::filesystem::path& out, const std::string& best) const;
  /// Rank 0: waits for the last manifest; rethrows its error.
  void finish();

 private:
  Comm& comm_;
  EventLog& events_;
  bool save_sharded_;
  int64_t save_total_limit_;
  ManifestWriter manifests_;  // rank 0: manifest.json of the newest checkpoint
};

}  // namespace ft
