// The writers of `ft bench`'s table (markdown, CSV, JSON, SVG chart) and the
// Trainer preset row's overrides: plain arithmetic and text, free of
// LibTorch, unit-tested in-process (tests/unit/test_bench.cpp).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ft/parallel/cost_model.h"

namespace ft {

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
  std::string theory_strategy;  ///< whose MemoryModel applies (auto: its pick)
  std::string theory_formula;   ///< its model-state formula, "" without a MemoryModel
  int64_t theory_bytes = -1;    ///< what it says each rank holds; -1: unknown
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
  int64_t negatives_per_anchor = -1;  ///< ranking losses: candidates per anchor besides its positive
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
