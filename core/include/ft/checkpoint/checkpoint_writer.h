// CheckpointWriter: how a run puts its checkpoints on disk (the Trainer
// decides when and with what; ft/checkpoint/checkpoint.h is the directory format).
//
// A checkpoint only ever appears complete. write() is collective:
//  1. rank 0 writes every file into a hidden staging directory beside the
//     target (fs::AtomicDir); with train.save_sharded and a strategy that
//     can, every rank then adds its own shard there;
//  2. a background thread of rank 0 hashes the staging directory into
//     manifest.json, syncs it and renames it into place, while the next
//     steps run;
//  3. only then does it rotate: train.save_total_limit checkpoint-N
//     directories stay, the one just committed and the best one always,
//     then the newest others. Rotation and hashing run on that one thread, one checkpoint
//     after the other, so neither can see the other's directory vanish.
// A SIGINT/SIGTERM during any of this lets the save finish first
// (ft/checkpoint/save_signals.h). A crash leaves at most a hidden directory, which
// the next run removes (clean_output_dir).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ft/checkpoint/checkpoint.h"

namespace ft {

class Comm;
class EventLog;
class ShardedCheckpointing;

struct CheckpointPolicy {
  bool save_sharded = false;      ///< train.save_sharded
  int64_t save_total_limit = 0;   ///< train.save_total_limit (<= 0: keep all)
  double interrupt_grace_s = 120; ///< runtime.save_grace_s
};

class CheckpointWriter {
 public:
  CheckpointWriter(Comm& comm, EventLog& events, CheckpointPolicy policy);
  /// Waits for the checkpoint in flight (its error, if any, is reported as a warning).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Collective: writes `data` as `dir` (see the class comment). With
  /// `rotate_under`, rank 0 then rotates the checkpoint-N directories there,
  /// sparing `best` (a path; empty: none).
  void write(const std::filesystem::path& dir, CheckpointData data, ShardedCheckpointing* sharded,
             const std::filesystem::path& rotate_under = {}, const std::string& best = {});
  /// Rank 0: waits until the last checkpoint is committed; rethrows its error.
  void finish();

 private:
  Comm& comm_;
  EventLog& events_;
  CheckpointPolicy policy_;
  std::thread finisher_;  // rank 0: hashes, commits and rotates the newest checkpoint
  std::string error_;     // what the finisher threw
};

/// Before a run's first save into `out`: removes what interrupted saves
/// left (hidden staging directories) and checkpoint-N directories that were
/// committed without the manifest they were due (by an older ft that died
/// hashing them). One line each, for the caller to print.
std::vector<std::string> clean_output_dir(const std::filesystem::path& out);

}  // namespace ft
