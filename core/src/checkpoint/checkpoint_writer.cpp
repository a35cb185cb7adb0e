// CheckpointWriter (ft/checkpoint_writer.h): the Trainer's checkpoints on
// disk, consolidated, sharded, verified and rotated.
#include "ft/checkpoint_writer.h"

#include <algorithm>
#include <regex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ft/abilities.h"
#include "ft/comm.h"
#include "ft/events.h"
#include "ft/fs.h"

namespace ft {
namespace fsys = std::filesystem;

CheckpointWriter::CheckpointWriter(Comm& comm, EventLog& events, bool save_sharded, int64_t save_total_limit)
    : comm_(comm), events_(events), save_sharded_(save_sharded), save_total_limit_(save_total_limit) {}

void CheckpointWriter::write(const fsys::path& dir, CheckpointData data, ShardedCheckpointing* sharded) {
  const bool rank0 = comm_.rank() == 0;
  data.defer_manifest = true;
  if (rank0) save_checkpoint(dir, data);
  if (sharded && save_sharded_) {
    comm_.barrier();  // rank 0 has committed dir
    sharded->save_sharded(dir);
    comm_.barrier();  // every shard is on disk before anyone reads or rotates
  }
  // Hashing runs beside the next steps; the manifest covers the shards too.
  if (rank0) manifests_.write(dir);
  events_.info(fmt::format("saved {}", dir.string()));
}

void CheckpointWriter::rotate(const fsys::path& out, const std::string& best) const {
  if (comm_.rank() != 0 || save_total_limit_ <= 0) return;
  static const std::regex kName("checkpoint-([0-9]+)");
  std::vector<std::pair<int64_t, fsys::path>> found;
  for (const auto& e : fsys::directory_iterator(out)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (e.is_directory() && std::regex_match(name, m, kName)) found.emplace_back(std::stoll(m[1]), e.path());
  }
  std::sort(found.begin(), found.end());
  auto excess = static_cast<int64_t>(found.size()) - save_total_limit_;
  for (const auto& [step, path] : found) {
    if (excess <= 0) break;
    if (path.string() == best) continue;
    fs::remove_dir_atomic(path);
    --excess;
  }
}

void CheckpointWriter::finish() {
  if (comm_.rank() == 0) manifests_.wait();
}

}  // namespace ft
