#include "ft/checkpoint/consolidate.h"

#include <map>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/io/manifest.h"
#include "ft/model/adapter.h"
#include "ft/model/lora.h"
#include "ft/model/model.h"
#include "ft/model/prompt_learning.h"
#include "ft/io/safetensors.h"

namespace ft {
namespace fsys = std::filesystem;
using nlohmann::json;

namespace {
constexpr const char* kFormat = "ft-sharded-v1";
}  // namespace

fsys::path shard_file(const fsys::path& dir, int rank, int world) {
  return dir / "sharded" / ("rank-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors");
}

void write_sharded_meta(const fsys::path& dir, const ShardedMeta& meta) {
  json j{{"format", kFormat},
         {"strategy", meta.strategy},
         {"world_size", meta.world_size},
         {"optimizer_step", meta.optimizer_step},
         {"optimizer_buffers", meta.optimizer_buffers}};
  auto& units = j["units"] = json::array();
  for (const auto& l : meta.units) units.push_back(json::parse(l.to_json()));
  fsys::create_directories(dir / "sharded");
  fs::write_file_atomic(dir / "sharded" / "meta.json", j.dump(1) + "\n");
}

void write_shard(const fsys::path& dir, int rank, const ShardedMeta& meta, const TensorList& tensors) {
  fsys::create_directories(dir / "sharded");
  safetensors::save(shard_file(dir, rank, meta.world_size).string(), tensors,
                    {{"rank", std::to_string(rank)}, {"world_size", std::to_string(meta.world_size)}});
}

ShardedMeta read_sharded_meta(const fsys::path& dir) {
  const fsys::path path = dir / "sharded" / "meta.json";
  if (!fsys::exists(path)) fail("{}: not found; {} holds no sharded checkpoint", path.string(), dir.string());
  ShardedMeta m;
  try {
    json j = json::parse(fs::read_file(path));
    if (j.value("format", "") != kFormat) fail("{}: format is not '{}'", path.string(), kFormat);
    m.strategy = j.at("strategy").get<std::string>();
    m.world_size = j.at("world_size").get<int>();
    m.optimizer_step = j.at("optimizer_step").get<int64_t>();
    m.optimizer_buffers = j.at("optimizer_buffers").get<std::vector<std::string>>();
    for (const auto& u : j.at("units")) m.units.push_back(FlatLayout::from_json(u.dump(), path.string()));
  } catch (const json::exception& e) {
    fail("{}: malformed ({})", path.string(), e.what());
  }
  if (m.world_size < 1) fail("{}: world_size must be >= 1", path.string());
  for (size_t u = 0; u < m.units.size(); ++u) {
    if (m.units[u].world != m.world_size) {
      fail("{}: unit {} is laid out for {} shards, not world_size {}", path.string(), u, m.units[u].world,
           m.world_size);
    }
  }
  return m;
}

ConsolidatedCheckpoint read_sharded_checkpoint(const fsys::path& dir) {
  ConsolidatedCheckpoint c;
  c.meta = read_sharded_meta(dir);
  const ShardedMeta& m = c.meta;
  std::vector<std::map<std::string, at::Tensor>> ranks(static_cast<size_t>(m.world_size));
  for (int r = 0; r < m.world_size; ++r) {
    const fsys::path file = shard_file(dir, r, m.world_size);
    if (!fsys::exists(file)) fail("{}: missing (shard of rank {} of {})", file.string(), r, m.world_size);
    for (auto& [name, t] : safetensors::load(file.string())) ranks[static_cast<size_t>(r)][name] = t;
  }
  auto gather = [&](size_t u, const std::string& what) {
    const FlatLayout& l = m.units[u];
    std::vector<at::Tensor> parts;
    const std::string key = "unit." + std::to_string(u) + "." + what;
    for (int r = 0; r < m.world_size; ++r) {
      auto& map = ranks[static_cast<size_t>(r)];
      auto it = map.find(key);
      const std::string file = shard_file(dir, r, m.world_size).string();
      if (it == map.end()) fail("{}: tensor '{}' is missing", file, key);
      if (it->second.numel() != l.shard_numel()) {
        fail("{}: tensor '{}' has {} elements, meta.json implies {}", file, key, it->second.numel(), l.shard_numel());
      }
      parts.push_back(it->second.reshape({-1}).to(at::kFloat));
    }
    return at::cat(parts);
  };
  c.optimizer.step = m.optimizer_step;
  for (size_t u = 0; u < m.units.size(); ++u) {
    for (auto& named : m.units[u].unflatten(gather(u, "param"))) c.model.push_back(std::move(named));
  }
  for (const auto& b : m.optimizer_buffers) {
    for (size_t u = 0; u < m.units.size(); ++u) {
      for (auto& named : m.units[u].unflatten(gather(u, b), "." + b, /*trainable_only=*/true)) {
        c.optimizer.tensors.push_back(std::move(named));
      }
    }
  }
  return c;
}

ConsolidatedCheckpoint consolidate_checkpoint(const fsys::path& dir, const fsys::path& out) {
  verify_checkpoint(dir);  // the shards are in the manifest too
  ConsolidatedCheckpoint c = read_sharded_checkpoint(dir);
  fsys::create_directories(out / "training_state");
  // A LoRA run keeps plain HF base weights in model.safetensors and the
  // adapters in PEFT's files, exactly as save_checkpoint lays them out.
  const bool lora = has_adapter(dir);
  const bool prompt = has_prompt_learning(dir);
  std::string base_model;
  if (lora || prompt) {
    const auto cfg = nlohmann::json::parse(fs::read_file(dir / "adapter_config.json"), nullptr, false);
    base_model = cfg.is_object() ? cfg.value("base_model_name_or_path", "") : "";
  }
  // Read only when needed: a bare sharded directory has no config.json.
  auto config = [&] { return BertConfig::from_json_file((dir / "config.json").string()); };
  if (lora) save_adapter(out, c.model, read_adapter_config(dir), base_model, config().head);
  // Prompt learning and bottleneck adapters likewise: base weights apart, the method (+ head) in its files.
  if (prompt) save_prompt_learning(out, c.model, read_prompt_learning_config(dir), config(), base_model);
  const bool bottleneck = has_bottleneck_adapter(dir);
  if (bottleneck) save_bottleneck_adapter(out, c.model, read_bottleneck_adapter_config(dir), config().hidden_size);
  TensorList base = lora         ? without_lora(c.model)
                    : bottleneck ? without_bottleneck_adapters(c.model)
                    : prompt     ? without_prompt_learning(c.model)
                                 : c.model;
  safetensors::save((out / "model.safetensors").string(), base, {{"format", "pt"}});
  safetensors::save((out / "training_state" / "optimizer.safetensors").string(), c.optimizer.tensors,
                    {{"step", std::to_string(c.optimizer.step)}});
  std::error_code ec;
  if (!fsys::equivalent(dir, out, ec)) {
    for (const char* name : {"config.json", "vocab.txt"}) {
      if (fsys::exists(dir / name)) fsys::copy_file(dir / name, out / name, fsys::copy_options::overwrite_existing);
    }
    for (const char* name : {"trainer_state.json", "rng.safetensors", "run.yaml"}) {
      const fsys::path src = dir / "training_state" / name;
      if (fsys::exists(src)) fsys::copy_file(src, out / "training_state" / name, fsys::copy_options::overwrite_existing);
    }
  }
  write_manifest(out);
  return c;
}

}  // namespace ft
