// strategy.options for the zero* and fsdp strategies (keys documented in
// sharded_strategy.h), read with ft::OptionReader like every other plugin.
#include <string>
#include <vector>

#include "ft/base/error.h"
#include "ft/config/options.h"
#include "sharded_strategy.h"

namespace ft {
namespace {

// Keys both families share.
void read_common(const OptionReader& r, ShardingPolicy& p) {
  p.bucket_bytes = r.get_bucket_bytes("bucket_mb", p.bucket_bytes);
  p.limit_all_gathers = r.get_int("limit_all_gathers", p.limit_all_gathers, {0});
  p.grad_buckets = r.get_int("grad_buckets", p.grad_buckets, {1});
  const std::string acc = r.get_choice("grad_accumulation", "reduce", {"reduce", "no_sync"});
  p.accumulation = acc == "no_sync" ? GradAccumulation::kNoSync : GradAccumulation::kReduceEachMicroBatch;
  p.shard_word_table = r.get_bool("shard_word_table", p.shard_word_table);
}

FsdpSharding read_sharding(const OptionReader& r) {
  const std::string mode = r.get_choice("sharding_strategy", "FULL_SHARD",
                                        {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"});
  if (mode == "SHARD_GRAD_OP") return FsdpSharding::kShardGradOp;
  if (mode == "NO_SHARD") return FsdpSharding::kNoShard;
  if (mode == "HYBRID_SHARD") return FsdpSharding::kHybridShard;
  if (mode == "_HYBRID_SHARD_ZERO2") return FsdpSharding::kHybridShardZero2;
  return FsdpSharding::kFullShard;
}

bool is_hybrid(FsdpSharding mode) {
  return mode == FsdpSharding::kHybridShard || mode == FsdpSharding::kHybridShardZero2;
}

// FSDP spells it BackwardPrefetch.BACKWARD_PRE / None; a boolean is accepted
// too, so `prefetch`-style configs carry over.
bool read_backward_prefetch(const OptionReader& r, bool fallback) {
  if (!r.has("backward_prefetch")) return fallback;
  const std::string v = r.get_string("backward_prefetch", "");
  if (auto c = OptionReader::match_choice(v, {"BACKWARD_PRE", "NONE"})) return *c == "BACKWARD_PRE";
  if (auto b = OptionReader::parse_bool(v)) return *b;
  r.fail_value("backward_prefetch", v, std::string("BACKWARD_PRE, NONE or ") + OptionReader::boolean_rule());
}

}  // namespace

ShardingPolicy zero_policy_from_options(ZeroStage stage, const std::map<std::string, std::string>& options) {
  ShardingPolicy p = ShardingPolicy::zero(stage);
  const OptionReader r(options, p.name, {"bucket_mb", "prefetch", "limit_all_gathers", "grad_buckets", "grad_accumulation",
                                               "shard_word_table"});
  read_common(r, p);
  p.forward_prefetch = p.backward_prefetch = r.get_bool("prefetch", p.forward_prefetch);
  return p;
}

ShardingPolicy fsdp_policy_from_options(const std::map<std::string, std::string>& options, int world_size,
                                        int local_world_size) {
  const OptionReader r(options, "fsdp",
                       {"sharding_strategy", "shard_group_size", "forward_prefetch", "backward_prefetch",
                        "limit_all_gathers", "bucket_mb", "grad_buckets", "grad_accumulation", "shard_word_table"});
  const FsdpSharding mode = read_sharding(r);
  // As torch's HYBRID_SHARD: a host's ranks shard, hosts replicate.
  const int group = r.get_int("shard_group_size", local_world_size, {1});
  if (r.has("shard_group_size") && !is_hybrid(mode)) {
    fail("strategy.options.shard_group_size: only HYBRID_SHARD and _HYBRID_SHARD_ZERO2 shard in groups; "
         "drop it or set sharding_strategy: HYBRID_SHARD");
  }
  ShardingPolicy p = ShardingPolicy::fsdp(mode, world_size, is_hybrid(mode) ? group : 0);
  read_common(r, p);
  p.forward_prefetch = r.get_bool("forward_prefetch", p.forward_prefetch);
  p.backward_prefetch = read_backward_prefetch(r, p.backward_prefetch);
  return p;
}

}  // namespace ft
