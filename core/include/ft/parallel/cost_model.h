// The memory and α-β communication cost model: the arithmetic every
// strategy's MemoryModel (ft/parallel/abilities.h) builds its formula, its theory
// bytes and its estimate for `auto` from. Core knows no strategy by name:
// each plugin says what it holds and moves; `auto` weighs what the
// installed plugins say, and `ft bench` prints their theory column.
//
// Everything here except model_shape() is plain arithmetic and text, free of
// LibTorch, so it can be unit-tested in-process.
//
// Byte counting (BENCHMARK.md "Memory"): fp32 AdamW, Ψ trainable
// parameters, N ranks: 4 B param + 4 B grad + 8 B Adam moments = 16Ψ per
// full replica. DDP 16Ψ; ZeRO-1 8Ψ + 8Ψ/N; ZeRO-2 4Ψ + 12Ψ/N + B; ZeRO-3
// and FSDP full shard 16Ψ/N + G + B, where B is the pool of unit gradient
// buckets in flight and G the units gathered at once (both bounded, see
// sharded_state_bytes; the row-sharded word table is in neither). ZeRO's own accounting (2 + 2 + K bytes, K = 12 for
// mixed-precision Adam) is StateAccounting::mixed_precision(); with it
// zero_state_bytes reproduces the paper's Table 1. Mixed precision in ft
// adds the 16-bit weight copies autocast makes (2Ψ, or 2Ψ/N when sharded).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace ft {

struct BertConfig;
class EncoderModel;
struct ParamSettings;

// ---------------------------------------------------------------------------
// Cost model
// ---------------------------------------------------------------------------

/// Latency-bandwidth (α-β) model of one link: sending n bytes point to point
/// costs alpha_s + n * beta_s_per_byte seconds.
struct LinkModel {
  double alpha_s = 0.0;
  double beta_s_per_byte = 0.0;
};

/// Fits α and β from two timed all-reduces of `small_bytes` and `large_bytes`
/// (seconds per call) on a ring of `world_size` ranks, where one all-reduce of
/// n bytes costs 2(N-1)α + 2(N-1)/N·n·β. Negative fits (noise) clamp to 0.
/// World size 1 gives {0, 0}. Throws ft::Error if large_bytes <= small_bytes.
LinkModel fit_link_model(int world_size, int64_t small_bytes, double small_seconds, int64_t large_bytes,
                         double large_seconds);

/// Ring all-reduce of `bytes` split into `calls` collectives: 2(N-1)·calls·α + 2(N-1)/N·bytes·β.
double ring_allreduce_seconds(const LinkModel& link, int world_size, int64_t bytes, int64_t calls = 1);
/// Ring all-gather or reduce-scatter of `bytes` (the full tensor) in `calls`
/// collectives: (N-1)·calls·α + (N-1)/N·bytes·β.
double ring_allgather_seconds(const LinkModel& link, int world_size, int64_t bytes, int64_t calls = 1);

/// The model facts the estimates need (from a BertConfig and its parameters).
/// The word-embedding table ZeRO-2/3 split by rows (FlatParamGroupOptions::
/// shard_word_table): `rows` x `width` of unit 0's parameters, a flat param
/// of its own padded to whole rows per rank, never gathered and never in a
/// bucket. rows 0: the table stays in unit 0.
struct WordTableShape {
  int64_t rows = 0;
  int64_t width = 0;
};

struct ModelShape {
  int64_t params = 0;               ///< Ψ: trainable parameters
  int64_t embedding_params = 0;     ///< word-embedding parameters (no matmul FLOPs)
  /// The word table ZeRO-2/3 shard by rows (rows 0: none; see WordTableShape).
  WordTableShape sharded_words;
  int64_t largest_unit_params = 0;  ///< biggest shard unit (ZeRO-3/FSDP gather in flight)
  /// Trainable parameters of each shard unit in model order (empty:
  /// unknown; the estimates then use largest_unit_params).
  std::vector<int64_t> unit_params;
  int64_t num_units = 1;            ///< shard units (collectives per pass for ZeRO-3/FSDP)
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 1;
  /// What tensor parallelism cuts: the encoder layers' parameters and the
  /// word embeddings (the layers' LayerNorms and row-parallel biases, a
  /// fraction of a percent, are counted as cut too).
  int64_t sliceable_params = 0;
};

/// What a strategy's estimate and plan_strategy() decide from. All ranks
/// must pass identical values (the auto strategy all-reduces its
/// measurements first) so that every rank picks the same strategy.
struct PlanInputs {
  ModelShape model;
  int world_size = 1;
  bool mixed_precision = false;
  int64_t batch_rows = 16;  ///< per-rank micro-batch rows (activation estimate)
  int64_t seq_len = 128;    ///< tokens per row (activation estimate)
  LinkModel link;
  double flops_per_s = 1e10;       ///< measured matmul throughput of one rank
  int64_t memory_limit_bytes = 0;  ///< per rank; 0 = no limit
  int64_t bucket_bytes = 25LL << 20;
};

/// One row of the estimate table.
struct CandidateEstimate {
  std::string name;
  std::string formula;           ///< model-state formula, e.g. "4Ψ+12Ψ/N"
  int64_t state_bytes = 0;       ///< params + grads + optimizer per rank (the formula)
  int64_t extra_bytes = 0;       ///< gathered unit in flight, 16-bit copies
  int64_t activation_bytes = 0;  ///< rough: Korthikanti et al. per layer
  int64_t total_bytes = 0;
  bool fits = true;
  int64_t comm_bytes = 0;  ///< bytes each rank moves per step (ring)
  int64_t collectives = 0;
  double comm_s = 0.0;
  double compute_s = 0.0;
  double step_s = 0.0;
};

/// The decision: every estimate, the chosen index into `table`, and why.
struct Plan {
  std::vector<CandidateEstimate> table;
  int chosen = -1;
  std::string reason;
  const CandidateEstimate& choice() const { return table.at(static_cast<size_t>(chosen)); }
};

/// Picks one of `estimates`, which come in preference order for near-ties
/// (the simplest strategy first): among those whose total per-rank memory
/// fits the limit, the fastest estimated step (one within 5 % of the fastest
/// that comes earlier wins, so the simpler DDP beats an equal-cost ZeRO-2);
/// if none fits, the one with the least memory. Throws ft::Error when
/// `estimates` is empty.
Plan plan_strategy(std::vector<CandidateEstimate> estimates, const PlanInputs& inputs);

/// The pieces every estimate shares. Saved activations per rank of a
/// micro-batch of `rows` (Korthikanti et al. 2022), their a·s²·b and 24·s·b·h
/// terms split over a tensor-parallel group of `tensor_group`.
int64_t activation_bytes(const PlanInputs& in, int64_t rows, int tensor_group = 1);
/// Forward + backward FLOPs of one micro-batch of `rows`.
double step_flops(const PlanInputs& in, int64_t rows);
/// An estimate named `name` with `formula`, the activations and compute of
/// one data-parallel micro-batch (batch_rows) filled in; the strategy adds
/// state, extra and communication, then calls finish_estimate.
CandidateEstimate begin_estimate(const std::string& name, const std::string& formula, const PlanInputs& in);
/// Totals the memory, checks it against the limit and adds up the step
/// (no overlap credit: on CPU communication competes with compute for the
/// same cores).
void finish_estimate(CandidateEstimate& e, const PlanInputs& in);

/// The shape facts of `model` that estimates and theory read: trainable
/// parameters per unit (`plan` marks the frozen ones; empty: all train),
/// the word table a classifier's sharding may split by rows, and the
/// parameters tensor parallelism over `world_size` ranks cuts.
ModelShape model_shape(const EncoderModel& model, const std::map<std::string, ParamSettings>& plan, int world_size);

/// The estimate table and the reason as printable lines (rank 0 prints it).
std::string format_plan(const Plan& plan, const PlanInputs& inputs);

/// Parameters Megatron tensor parallelism cuts in a BERT of this shape, all
/// trainable: per layer the query, key, value and intermediate weights and
/// biases and the two row-parallel weights, plus the word embeddings (vocab
/// rows of `embedding_width`: ELECTRA's are narrower than the layers) when
/// they are vocab-parallel (docs/model-parallel.md).
int64_t tensor_sliced_params(int64_t hidden, int64_t intermediate, int64_t layers, int64_t vocab, int64_t embedding_width,
                             bool vocab_parallel);
/// The same for a model config, by the cuts its backbone declares
/// (tensor_parallel_linears, ft/model/model.h): ModernBERT's fused Wqkv and GeGLU
/// Wi hold other shapes than BERT's four Linears.
int64_t tensor_sliced_params(const BertConfig& c, int ranks);

/// Bytes per parameter of each kind of model state.
struct StateAccounting {
  double param = 4.0;      ///< the weights
  double grad = 4.0;       ///< their gradients
  double optimizer = 8.0;  ///< K: optimizer state (fp32 Adam: two moments)
  /// ft's: fp32 weights, gradients and Adam moments (16Ψ per replica).
  static StateAccounting fp32() { return {}; }
  /// ZeRO's (Rajbhandari et al., 2020, section 3.1): fp16 weights and
  /// gradients, K bytes of fp32 master weights, momentum and variance.
  static StateAccounting mixed_precision(double k = 12.0) { return {2.0, 2.0, k}; }
};

/// ZeRO's model-state bytes per rank for `stage` (0: data parallel; 1: P_os;
/// 2: P_os+g; 3: P_os+g+p) with Ψ = `params` over N_d = `world_size`:
/// (p+g+K)Ψ, (p+g)Ψ + KΨ/N, pΨ + (g+K)Ψ/N, (p+g+K)Ψ/N. Buckets and gathered
/// units in flight are not in it (sharded_state_bytes has them).
double zero_state_bytes(int stage, double params, int world_size, const StateAccounting& accounting);

/// ZeRO Table 1's row (Ψ = 7.5 B, K = 12, N_d = 64) in ZeRO's accounting, in
/// GB (1e9 B): baseline, P_os, P_os+g, P_os+g+p, as lines to print.
std::string zero_table1_report();

/// Elements of the gradient bucket pool (ft::GradBucketPool) for units of
/// `unit_numels` with at most `max_buckets` alive at once: the largest unit,
/// or the sum of the `max_buckets` largest other units, whichever is more.
/// Units beside the largest then wait for it rather than doubling the pool.
int64_t grad_pool_capacity(const std::vector<int64_t>& unit_numels, int max_buckets);

/// What ft's sharded engine holds per rank (rank 0; later ranks hold up to
/// 8 B less per unit of padding in optimizer state), every parameter
/// trainable, fp32: units padded to a multiple of N, split in equal shards.
struct ShardedStateBytes {
  int64_t params = 0;     ///< persistent weights: full (zero1/2) or the shard
  int64_t gathered = 0;   ///< zero3/fsdp: full units gathered at once, at most
  int64_t grads = 0;      ///< full buffer (zero1) or shards
  int64_t buckets = 0;    ///< zero2/3/fsdp: the bucket pool
  int64_t optimizer = 0;  ///< Adam moments of the shard
  int64_t total() const { return params + gathered + grads + buckets + optimizer; }
};
/// For ZeRO stage 1, 2 or 3 (3: FSDP's FULL_SHARD too) with `grad_buckets`
/// units in flight and `limit_all_gathers` prefetched units; `unit_params`:
/// each unit's parameters, model order (unit 0 with the word table). Any
/// other stage: all 0.
ShardedStateBytes sharded_state_bytes(int stage, const std::vector<int64_t>& unit_params, int world_size,
                                      int grad_buckets = 2, int limit_all_gathers = 1, WordTableShape words = {});

/// ZeRO's model-state formula of `stage` in ft's fp32 accounting, as
/// `ft bench` and `auto` print it: "16Ψ", "8Ψ+8Ψ/N", "4Ψ+12Ψ/N+B",
/// "16Ψ/N+G+B" (B: the bucket pool, G: the gathered units).
std::string zero_formula(int stage);

}  // namespace ft
