// What a run tells the outside world: console lines (rank 0), an optional
// progress bar on a terminal, and the metrics JSON Lines contract
// (`--metrics-out`, ARCHITECTURE.md "Output"), and TensorBoard scalars
// (`runtime.tensorboard_dir`, docs/observability.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ft/observe/metrics.h"
#include "ft/observe/strategy_events.h"

namespace ft {

class TensorBoardWriter;

struct StepEvent {
  int64_t step = 0;
  int64_t total_steps = 0;
  int64_t epoch = 0;
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double samples_per_s = 0.0;
  double loss_scale = 1.0;
  bool skipped = false;
};

/// One redraw of the terminal progress bar.
struct ProgressLine {
  int64_t step = 0;
  int64_t total = 0;
  double loss = 0.0;
  double samples_per_s = 0.0;  ///< <= 0: not known yet (left out)
  double elapsed_s = 0.0;      ///< since the bar's first step
  double eta_s = -1.0;         ///< < 0: not known yet (left out)
};
/// "[#########.....] 37/200 loss 0.7173 | 45.3 samples/s | 0:41 elapsed, ETA 3:01"
std::string format_progress(const ProgressLine& p);
/// "[eval] 12/40 batches" (the evaluation's own line)
std::string format_eval_progress(int64_t done, int64_t total);
/// Seconds as m:ss, or h:mm:ss from an hour on.
std::string format_duration(double seconds);

struct SummaryEvent {
  std::string strategy;
  std::string precision;
  int world_size = 1;
  int threads_per_rank = 1;
  int64_t steps = 0;
  int64_t samples = 0;
  double train_seconds = 0.0;
  double samples_per_s = 0.0;
  double final_loss = 0.0;
  std::vector<double> peak_rss_mb;          // per rank
  std::vector<double> peak_device_mb;       // per rank, CUDA allocator peak; empty on CPU
  std::vector<int64_t> model_state_bytes;   // per rank: params + grads + optimizer
  std::vector<int64_t> param_bytes, grad_bytes, optimizer_bytes;  // per rank
  int64_t trainable_params = 0;
  // A ranking loss's candidates per anchor besides its own positive
  // (in-batch negatives: the global micro-batch's other positives and every
  // negative column's rows); -1 where the loss has none.
  int64_t negatives_per_anchor = -1;
  bool has_eval = false;
  bool masked_lm = false;  // eval is over masked tokens (ft pretrain), not rows
  ClassificationReport eval;
  std::string eval_dev;  // the data.dev set `eval` is of (the one best_metric reads); "" for a single set
  std::string checkpoint;  // final model dir, if saved
};

class EventLog {
 public:
  // Only rank 0 writes anything (but strategy() lines); other ranks get a silent log.
  // metrics_path empty: no JSONL file. progress: draw a bar when stdout is a TTY.
  // tensorboard_dir empty: no event file; else step and eval scalars go there.
  EventLog(bool is_rank0, const std::string& metrics_path, bool progress, const std::string& tensorboard_dir = {});
  ~EventLog();

  void info(const std::string& line);
  // "ft: warning: <line>" on stderr, as the launcher's own warnings.
  void warn(const std::string& line);
  void step(const StepEvent& e, bool print_line);
  // Progress bar tick (no JSONL); `loss` is the latest known.
  /// Redraws the bar (rank 0, a terminal, progress on); `samples_per_s`
  /// <= 0 when not known. Elapsed time and ETA count from the first call.
  void progress(int64_t step, int64_t total, double loss, double samples_per_s);
  /// During evaluation: a line of its own, "[eval] done/total batches".
  void eval_progress(int64_t done, int64_t total);
  void eval(int64_t step, int64_t epoch, const ClassificationReport& r,
            const std::vector<std::string>& label_names);
  /// The per-label precision / recall / F1 table (the summary prints the
  /// last evaluation's).
  void report(const ClassificationReport& r, const std::vector<std::string>& label_names);
  /// The evaluation records until the next call belong to data.dev's set
  /// `name` ("" for a single set): their JSON carries "dev": name, their
  /// TensorBoard tags are eval/<name>_<metric> (transformers' names for an
  /// eval_dataset dict) and their line says it.
  void dev_set(const std::string& name) { dev_set_ = name; }
  /// Masked-LM evaluation: r.loss and r.accuracy over r.total masked tokens.
  void eval_masked_lm(int64_t step, int64_t epoch, const ClassificationReport& r);
  /// The eval line and record of a multi-label or regression evaluation.
  void eval_scores(int64_t step, int64_t epoch, const ClassificationReport& r);
  // Early stopping ended the run at `step`: `patience` evaluations in a row
  // did not improve `metric` beyond its best, `best` at `best_step`.
  void early_stopping(int64_t step, const std::string& metric, double best, int64_t best_step, int64_t patience);
  void summary(const SummaryEvent& s);
  /// The run's opening record, which the report shows: the command line,
  /// the effective config (YAML), the task, the strategy and world size.
  void run_started(const std::string& command, const std::string& config_yaml, const std::string& task,
                   const std::string& strategy, int world_size);
  /// Rank 0 keeps `path` (report.html, ft/observe/run_report.h) current: rebuilt
  /// from the metrics file after every evaluation and at the summary. Needs
  /// a metrics file; a report that cannot be written warns once and
  /// training goes on.
  void keep_report(const std::string& path);
  /// Rank 0 also hands every metrics record (one JSON object per call, as
  /// written to the metrics file) to `listener`: an experiment tracker.
  void listen(std::function<void(const std::string& record)> listener) { listeners_.push_back(std::move(listener)); }
  /// Appends to the metrics file instead of replacing it (a resumed run
  /// continuing its own history). Call before the first event.
  void append_metrics() { append_ = true; }
  /// A strategy's statistic (StrategyContext::events): its line is printed
  /// on every rank, since a per-rank statistic is reported by its own rank
  /// (as strategies printed before); rank 0 also writes
  /// {"event":"strategy","name":...,"data":{...}}, which may follow the
  /// summary (statistics reported at teardown). Throws ft::Error when the
  /// data is not a JSON object.
  void strategy(const StrategyEvent& e);

 private:
  void write_json(const std::string& line);
  // Elapsed time and ETA of `step` of `total`, counted from the first call.
  ProgressLine timing(int64_t step, int64_t total);
  void end_progress_line();
  bool rank0_;
  bool tty_;
  bool progress_enabled_;
  bool progress_drawn_ = false;
  bool progress_started_ = false;  // first_step_ / first_time_ are set
  int64_t first_step_ = 0;
  std::chrono::steady_clock::time_point first_time_{};
  std::FILE* metrics_ = nullptr;  // opened at the first event
  std::string metrics_path_;
  bool append_ = false;
  std::vector<std::function<void(const std::string&)>> listeners_;
  std::string report_path_;
  bool report_failed_ = false;  // warned once
  void refresh_report();
  std::vector<std::string> report_labels_;  // of the last eval(), for the summary's table
  std::string dev_set_;                      // see dev_set()
  // An eval scalar's TensorBoard point, under the current dev set's name.
  void eval_scalar(const std::string& metric, double value, int64_t step);
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  // A checkpoint finished on a background thread says so (CheckpointWriter)
  // while the step loop prints: whole lines, never interleaved.
  std::recursive_mutex mutex_;
};

}  // namespace ft
