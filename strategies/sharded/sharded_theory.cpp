// What the sharded engine holds and moves, as its MemoryModel: the theory
// column of `ft bench` and the estimates `auto` weighs. The policy comes from
// read_policy(), the same function setup() uses, so a mode or option that
// changes the engine (NO_SHARD, SHARD_GRAD_OP, hybrid groups, the row-split
// word table, grad_buckets, limit_all_gathers) changes the theory with it.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "ft/model/model.h"
#include "sharded_strategy.h"

namespace ft {
namespace {

// The ZeRO stage whose formula the policy follows. SHARD_GRAD_OP shards its
// parameters but keeps them gathered from forward to backward: ZeRO-2's
// memory, though it all-gathers like ZeRO-3.
int formula_stage(const ShardingPolicy& p) {
  if (p.params_sharded) return p.reshard_after_forward ? 3 : 2;
  if (p.grads_sharded) return 2;
  return p.shard_optimizer ? 1 : 0;
}

// Ranks one copy of the state is sharded over.
int shard_ranks(const ShardingPolicy& p, int world_size) {
  return p.shard_group_size > 0 ? p.shard_group_size : std::max(1, world_size);
}

}  // namespace

std::string ShardedStrategy::memory_formula(const std::map<std::string, std::string>& options) const {
  // The formula does not depend on the rank count, but hybrid modes check
  // theirs: two shard groups of the given size (default 2) pass.
  const auto group = options.find("shard_group_size");
  const int size = group == options.end() ? 2 : std::max(2, std::atoi(group->second.c_str()));
  return zero_formula(formula_stage(read_policy(options, 2 * size, size)));
}

int64_t ShardedStrategy::theory_bytes(const TheoryInputs& in) const {
  const ShardingPolicy p = read_policy(in.options, in.world_size, in.world_size);
  const int stage = formula_stage(p);
  if (stage == 0) return 16 * in.model.params;
  std::vector<int64_t> units = in.model.unit_params;
  if (units.empty()) units = {in.model.params};
  // Hybrid sharding averages over the whole world, which the table's row
  // exchange inside a shard group would not: the table stays in its unit.
  const bool split_words = p.grads_sharded && p.shard_word_table && p.shard_group_size == 0;
  const WordTableShape words = split_words ? in.model.sharded_words : WordTableShape{};
  // Parameters kept from forward to backward are all gathered at once.
  const int gathers = p.params_sharded && !p.reshard_after_forward ? static_cast<int>(units.size()) : p.limit_all_gathers;
  const int engine_stage = p.params_sharded ? 3 : p.grads_sharded ? 2 : 1;
  return sharded_state_bytes(engine_stage, units, shard_ranks(p, in.world_size), p.grad_buckets, gathers, words).total();
}

std::vector<std::string> ShardedStrategy::memory_options() const {
  return {"sharding_strategy", "shard_group_size", "limit_all_gathers", "grad_buckets", "shard_word_table"};
}

std::optional<CandidateEstimate> ShardedStrategy::estimate(const PlanInputs& in, const EncoderModel&) const {
  // `auto` runs the strategy with its defaults: the constructor's policy.
  const ShardingPolicy& p = policy_;
  const int stage = formula_stage(p);
  if (stage == 0) return std::nullopt;  // NO_SHARD is ddp, which auto weighs itself
  const int n = std::max(1, in.world_size);
  const int64_t psi = in.model.params;
  const int64_t grad_bytes = 4 * psi;  // ft communicates fp32 gradients
  CandidateEstimate e = begin_estimate(p.name, zero_formula(stage), in);
  e.state_bytes = std::llround(zero_state_bytes(stage, static_cast<double>(psi), n, StateAccounting::fp32()));
  if (p.grads_sharded) {
    // The bucket pool of unit gradients in flight and (sharded parameters)
    // the gathered units, from the units when known.
    const bool known = !in.model.unit_params.empty();
    const std::vector<int64_t> units = known ? in.model.unit_params : std::vector<int64_t>{in.model.largest_unit_params};
    const ShardedStateBytes b = sharded_state_bytes(p.params_sharded ? 3 : 2, units, n, p.grad_buckets,
                                                    p.limit_all_gathers, known ? in.model.sharded_words : WordTableShape{});
    e.extra_bytes = b.buckets + b.gathered;
  }
  // Autocast's 16-bit copies: of the shard when parameters are sharded.
  if (in.mixed_precision) e.extra_bytes += p.params_sharded ? 2 * psi / n : 2 * psi;
  if (n > 1) {
    const double share = static_cast<double>(n - 1) / n;
    const int64_t buckets = (grad_bytes + in.bucket_bytes - 1) / std::max<int64_t>(1, in.bucket_bytes);
    const int64_t units = std::max<int64_t>(1, in.model.num_units);
    if (stage == 1) {
      // All-reduce the grads, then all-gather the updated parameters.
      e.collectives = buckets + 1;
      e.comm_bytes = static_cast<int64_t>(3.0 * share * grad_bytes);
      e.comm_s = ring_allreduce_seconds(in.link, n, grad_bytes, buckets) +
                 ring_allgather_seconds(in.link, n, grad_bytes, 1);
    } else if (!p.params_sharded) {
      // Reduce-scatter the grads, all-gather the updated parameters.
      e.collectives = buckets + 1;
      e.comm_bytes = static_cast<int64_t>(2.0 * share * grad_bytes);
      e.comm_s = ring_allgather_seconds(in.link, n, grad_bytes, buckets) +
                 ring_allgather_seconds(in.link, n, grad_bytes, 1);
    } else {
      // All-gather per unit in forward and again in backward, reduce-scatter
      // per unit.
      e.collectives = 3 * units;
      e.comm_bytes = static_cast<int64_t>(3.0 * share * grad_bytes);
      e.comm_s = 3.0 * ring_allgather_seconds(in.link, n, grad_bytes, units);
    }
  }
  finish_estimate(e, in);
  return e;
}

}  // namespace ft
