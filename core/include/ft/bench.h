// Reusable pieces of `ft bench` and of the `auto` strategy: the memory and
// α-β communication cost model that picks a strategy, and the writers of the
// benchmark table (markdown, CSV, JSON, SVG chart).
//
// Everything here is plain arithmetic and text, free of LibTorch, so it can
// be unit-tested in-process and shared by the CLI and a plugin.
//
// Byte counting (BENCHMARK.md "Memory"): fp32 AdamW, Ψ trainable
// parameters, N ranks: 4 B param + 4 B grad + 8 B Adam moments = 16Ψ per
// full replica. DDP 16Ψ; ZeRO-1 8Ψ + 8Ψ/N; ZeRO-2 4Ψ + 12Ψ/N; ZeRO-3 and
// FSDP full shard 16Ψ/N (plus the gathered unit in flight). Mixed precision
// adds the 16-bit weight copies autocast makes (2Ψ, or 2Ψ/N when sharded).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ft {

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
struct ModelShape {
  int64_t params = 0;               ///< Ψ: trainable parameters
  int64_t embedding_params = 0;     ///< word-embedding parameters (no matmul FLOPs)
  int64_t largest_unit_params = 0;  ///< biggest shard unit (ZeRO-3/FSDP gather in flight)
  int64_t num_units = 1;            ///< shard units (collectives per pass for ZeRO-3/FSDP)
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 1;
};

/// What plan_strategy() decides from. All ranks must pass identical values
/// (the auto strategy all-reduces its measurements first) so that every rank
/// picks the same strategy.
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
  /// Installed strategy names, in preference order for near-ties. Names the
  /// model does not know (dp, horovod, third-party) are ignored.
  std::vector<std::string> candidates;
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

/// Estimates each known candidate and picks one: among those whose total
/// per-rank memory fits the limit, the fastest estimated step (a candidate
/// within 5 % of the fastest that comes earlier in `candidates` wins, so the
/// simpler DDP beats an equal-cost ZeRO-2); if none fits, the one with the
/// least memory. Under mixed precision `ddp` is skipped for `ddp_amp` and the
/// other way round under fp32 (they differ only in their default precision).
/// Throws ft::Error when no candidate is known ("none of ... is installed").
Plan plan_strategy(const PlanInputs& inputs);

/// The estimate table and the reason as printable lines (rank 0 prints it).
std::string format_plan(const Plan& plan, const PlanInputs& inputs);

/// Model-state bytes per rank the theory predicts for `strategy` with Ψ =
/// `params`, N = `world_size`, R = `replicas` (dp only); -1 when the strategy
/// is unknown to the model. single/ddp/ddp_amp/horovod: 16Ψ; dp: 16Ψ +
/// 8Ψ(R-1) (every extra replica holds params and grads); zero1/2/3, fsdp as
/// in the file comment (without the gathered unit).
int64_t theory_state_bytes(const std::string& strategy, int64_t params, int world_size, int replicas = 1);
/// The formula theory_state_bytes uses, e.g. "8Ψ+8Ψ/N"; empty when unknown.
std::string theory_formula(const std::string& strategy);

// ---------------------------------------------------------------------------
// Benchmark report
// ---------------------------------------------------------------------------

/// The Trainer preset (the seeds' fastest run: HF Trainer with fp16) as
/// config overrides on a workload: dynamic padding, the strategy's mixed
/// precision (`ft bench` runs it with ddp_amp), evaluate and save every
/// epoch, keep 3 checkpoints and the best by macro-F1, checkpoints in
/// `output_dir`. configs/trainer-preset.yaml carries the same values.
std::vector<std::string> trainer_preset_overrides(const std::string& output_dir);

/// One row of the matrix: what ran and what it measured. Numbers a row does
/// not have are NaN (doubles) or empty (lists).
struct BenchRow {
  std::string id;        ///< row id used by --strategies, e.g. "ddp_launcher"
  std::string label;     ///< shown in the table, e.g. "ddp (external launcher)"
  std::string strategy;  ///< registered strategy name that ran
  std::string seed_row;  ///< the seed table's row, "" if none
  double seed_minutes = std::numeric_limits<double>::quiet_NaN();
  std::string theory_strategy;  ///< whose memory formula applies (auto: its pick)
  int replicas = 1;             ///< dp replicas (theory)
  bool ok = false;
  std::string error;  ///< first error line of a failed row
  std::string note;   ///< e.g. "auto picked ddp"
  std::string command;
  double wall_seconds = 0.0;  ///< whole row including start-up

  // From the run's summary event (rank 0).
  std::string precision;
  int world_size = 0;
  int threads_per_rank = 0;
  int64_t steps = 0;
  int64_t samples = 0;
  double train_seconds = std::numeric_limits<double>::quiet_NaN();
  double samples_per_s = std::numeric_limits<double>::quiet_NaN();
  double final_loss = std::numeric_limits<double>::quiet_NaN();
  double dev_accuracy = std::numeric_limits<double>::quiet_NaN();
  double dev_macro_f1 = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> peak_rss_mb;
  std::vector<int64_t> model_state_bytes;
  int64_t trainable_params = 0;
};

/// Fills a row's measured fields from one `summary` JSON line of a metrics
/// file. Throws ft::Error when the line is not a summary event.
void fill_row_from_summary(BenchRow& row, const std::string& summary_json_line);

/// The whole matrix and how it was made (the table's header says so).
struct BenchReport {
  std::string workload;  ///< "mini" or the config path
  std::string config;    ///< config file the rows ran
  int nproc = 2;
  int cores = 2;
  int global_batch = 32;
  int64_t steps = 0;  ///< per row; 0 = one epoch
  std::string command;
  std::string machine;  ///< free text, e.g. "2-core shared machine"
  std::vector<BenchRow> rows;
};

/// train_seconds of the `single` row divided by the row's; NaN without one.
double speedup_vs_single(const BenchReport& report, const BenchRow& row);

/// Markdown: a header paragraph (workload, steps, threads rule, byte
/// counting) and one table line per row; failed rows show their error.
std::string bench_markdown(const BenchReport& report);
/// CSV with the header bench_csv_header(); per-rank lists joined with ';'.
std::string bench_csv(const BenchReport& report);
std::string bench_csv_header();
/// JSON: {"workload", "config", "nproc", ..., "rows": [{...}, ...]}.
std::string bench_json(const BenchReport& report);
/// A self-contained SVG: bars of train seconds and of peak RSS (max over
/// ranks) per row; failed rows are drawn as a labelled gap.
std::string bench_svg(const BenchReport& report);

}  // namespace ft
