// CheckpointWriter (ft/checkpoint/checkpoint_writer.h): the Trainer's checkpoints on
// disk, staged, verified, committed and rotated.
#include "ft/checkpoint/checkpoint_writer.h"

#include <algorithm>
#include <optional>
#include <regex>
#include <utility>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/parallel/abilities.h"
#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/observe/events.h"
#include "ft/base/fs.h"
#include "ft/io/manifest.h"
#include "ft/checkpoint/save_signals.h"

namespace ft {
namespace fsys = std::filesystem;

namespace {

const std::regex& checkpoint_name() {
  static const std::regex r("checkpoint-([0-9]+)");
  return r;
}

// The checkpoint-N directories directly under `out`, by step.
std::vector<std::pair<int64_t, fsys::path>> step_checkpoints(const fsys::path& out) {
  std::vector<std::pair<int64_t, fsys::path>> found;
  std::error_code ec;
  for (auto it = fsys::directory_iterator(out, ec); !ec && it != fsys::directory_iterator(); it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (it->is_directory(ec) && std::regex_match(name, m, checkpoint_name())) {
      found.emplace_back(std::stoll(m[1]), it->path());
    }
  }
  if (ec) fail("cannot list {}: {}", out.string(), ec.message());
  std::sort(found.begin(), found.end());
  return found;
}

// Keeps `limit` checkpoint-N directories under `out`: `committed` and
// `best` always, then the newest others (HF's rule: the best counts toward
// the limit, and a limit of 1 keeps the best beside the newest).
void rotate(const fsys::path& out, int64_t limit, const fsys::path& committed, const std::string& best) {
  if (limit <= 0) return;
  auto found = step_checkpoints(out);
  const bool best_apart = !best.empty() && fsys::path(best) != committed &&
                          std::any_of(found.begin(), found.end(), [&](const auto& f) { return f.second == fsys::path(best); });
  int64_t others = limit - 1 - (best_apart ? 1 : 0);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const fsys::path& path = it->second;
    if (path == committed || (!best.empty() && path == fsys::path(best))) continue;
    if (others > 0) {
      --others;
      continue;
    }
    fs::remove_dir_atomic(path);
  }
}

// The staging directory's path, from rank 0 to every rank (they write their
// shards into it).
fsys::path broadcast_path(Comm& comm, const fsys::path& path) {
  const std::string text = path.string();
  at::Tensor size = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  comm.broadcast(size, 0);
  at::Tensor bytes = at::zeros({size.item<int64_t>()}, at::kLong);
  if (comm.rank() == 0) {
    for (size_t i = 0; i < text.size(); ++i) bytes[static_cast<int64_t>(i)] = static_cast<unsigned char>(text[i]);
  }
  comm.broadcast(bytes, 0);
  std::string out(static_cast<size_t>(bytes.numel()), '\0');
  const int64_t* b = bytes.data_ptr<int64_t>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(b[i]);
  return out;
}

}  // namespace

CheckpointWriter::CheckpointWriter(Comm& comm, EventLog& events, CheckpointPolicy policy)
    : comm_(comm), events_(events), policy_(policy) {
  hold_interrupts_during_saves(policy_.interrupt_grace_s);
}

CheckpointWriter::~CheckpointWriter() {
  if (finisher_.joinable()) finisher_.join();
  if (!error_.empty()) events_.warn(error_);
}

void CheckpointWriter::write(const fsys::path& dir, CheckpointData data, ShardedCheckpointing* sharded,
                             const fsys::path& rotate_under, const std::string& best) {
  // Saves overlap (this one is staged while the last is hashed), so an
  // interrupt held for the last one would otherwise wait for a moment with
  // none in flight, which a run saving faster than it hashes never has.
  if (interrupt_held()) finish();  // the held interrupt stops the process there
  const bool rank0 = comm_.rank() == 0;
  auto in_flight = std::make_unique<SaveInFlight>();
  std::unique_ptr<fs::AtomicDir> staging;
  if (rank0) {
    staging = std::make_unique<fs::AtomicDir>(dir);
    write_checkpoint_files(staging->path(), data);
  }
  if (sharded && policy_.save_sharded) {
    const fsys::path where = broadcast_path(comm_, rank0 ? staging->path() : fsys::path());
    sharded->save_sharded(where);
    comm_.barrier();  // every shard is in before rank 0 hashes the directory
  }
  if (!rank0) return;
  finish();  // one checkpoint in flight at a time: rotation must see the previous one committed
  finisher_ = std::thread([this, dir, rotate_under, best, staging = std::move(staging),
                           in_flight = std::move(in_flight)]() mutable {
    try {
      write_manifest(staging->path());
      staging->commit();
      events_.info(fmt::format("saved {}", dir.string()));
      if (!rotate_under.empty()) rotate(rotate_under, policy_.save_total_limit, dir, best);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    staging.reset();  // an uncommitted staging directory goes before the process may stop
    in_flight.reset();
  });
}

void CheckpointWriter::finish() {
  if (finisher_.joinable()) finisher_.join();
  if (!error_.empty()) fail("{}", std::exchange(error_, std::string()));
}

std::vector<std::string> clean_output_dir(const fsys::path& out) {
  std::vector<std::string> lines;
  std::error_code ec;
  if (!fsys::is_directory(out, ec)) return lines;
  for (const auto& line : fs::recover_atomic_dirs(out)) lines.push_back("interrupted save: " + line);
  for (const auto& [step, path] : step_checkpoints(out)) {
    if (fsys::exists(path / kManifestFile, ec)) continue;
    const fsys::path state = path / "training_state" / "trainer_state.json";
    bool due = false;
    try {
      due = nlohmann::json::parse(fs::read_file(state)).value("manifest", false);
    } catch (const std::exception&) {
      continue;  // not written by ft, or unreadable: not ours to remove
    }
    if (!due) continue;
    fs::remove_dir_atomic(path);
    lines.push_back(fmt::format("removed {}: it was committed without its manifest (a run stopped while verifying it)",
                                path.string()));
  }
  return lines;
}

}  // namespace ft
