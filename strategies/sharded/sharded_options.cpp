// strategy.options parsing for the zero* and fsdp strategies (see
// sharded_strategy.h for the keys). Lives in core so errors are thrown from
// ft_core (see strategies/ddp/ddp_options.cpp on ft::Error and plugins).
#include <cmath>
#include <cstdlib>
#include <string>

#include "ft/error.h"
#include "sharded_strategy.h"

namespace ft {
namespace {

std::string key_of(const std::string& k) { return "strategy.options." + k; }

bool parse_bool(const std::string& k, const std::string& v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  fail("{}: '{}' is not true or false", key_of(k), v);
}

int parse_int(const std::string& k, const std::string& v, int min) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || x < min || x > 1000000) {
    fail("{}: '{}' is not an integer >= {}", key_of(k), v, min);
  }
  return static_cast<int>(x);
}

double parse_mb(const std::string& k, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x * 1024.0 * 1024.0 < 4.0) {
    fail("{}: '{}' is not a size in MiB > 0 (e.g. 25)", key_of(k), v);
  }
  return x;
}

// Keys both families share; false when `k` is not one of them.
bool parse_common(ShardingPolicy& p, const std::string& k, const std::string& v) {
  if (k == "limit_all_gathers") {
    p.limit_all_gathers = parse_int(k, v, 0);
  } else if (k == "max_inflight_reduces") {
    p.max_inflight_reduces = parse_int(k, v, 1);
  } else if (k == "bucket_mb") {
    p.bucket_mb = parse_mb(k, v);
  } else {
    return false;
  }
  return true;
}

}  // namespace

ShardingPolicy zero_policy_from_options(ZeroStage stage, const std::map<std::string, std::string>& options) {
  ShardingPolicy p = ShardingPolicy::zero(stage);
  for (const auto& [k, v] : options) {
    if (parse_common(p, k, v)) continue;
    if (k == "prefetch") {
      p.forward_prefetch = p.backward_prefetch = parse_bool(k, v);
    } else {
      fail("{}: unknown option for {} (known: bucket_mb, prefetch, limit_all_gathers, max_inflight_reduces)",
           key_of(k), p.name);
    }
  }
  return p;
}

ShardingPolicy fsdp_policy_from_options(const std::map<std::string, std::string>& options, int nnodes) {
  FsdpSharding mode = FsdpSharding::kFullShard;
  if (auto it = options.find("sharding_strategy"); it != options.end()) {
    const std::string& v = it->second;
    if (v == "FULL_SHARD" || v == "full_shard") {
      mode = FsdpSharding::kFullShard;
    } else if (v == "SHARD_GRAD_OP" || v == "shard_grad_op") {
      mode = FsdpSharding::kShardGradOp;
    } else if (v == "NO_SHARD" || v == "no_shard") {
      mode = FsdpSharding::kNoShard;
    } else if (v == "HYBRID_SHARD" || v == "hybrid_shard") {
      mode = FsdpSharding::kHybridShard;
    } else {
      fail("{}: '{}' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD", key_of("sharding_strategy"), v);
    }
  }
  ShardingPolicy p = ShardingPolicy::fsdp(mode, nnodes);
  for (const auto& [k, v] : options) {
    if (k == "sharding_strategy" || parse_common(p, k, v)) continue;
    if (k == "forward_prefetch") {
      p.forward_prefetch = parse_bool(k, v);
    } else if (k == "backward_prefetch") {
      if (v == "BACKWARD_PRE" || v == "backward_pre") {
        p.backward_prefetch = true;
      } else if (v == "NONE" || v == "none") {
        p.backward_prefetch = false;
      } else {
        p.backward_prefetch = parse_bool(k, v);
      }
    } else {
      fail("{}: unknown option for fsdp (known: sharding_strategy, forward_prefetch, backward_prefetch, "
           "limit_all_gathers, max_inflight_reduces, bucket_mb)",
           key_of(k));
    }
  }
  return p;
}

}  // namespace ft
