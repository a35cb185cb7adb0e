#include "ft/observe/events.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/observe/run_report.h"
#include "ft/observe/tensorboard.h"

namespace ft {
namespace {

// JSON has no NaN/Infinity: write null so every line stays parseable.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// The per-class table and the confusion matrix, for the run report.
void add_class_tables(nlohmann::json& j, const ClassificationReport& r, const std::vector<std::string>& label_names) {
  if (r.precision.empty()) return;
  const auto& names = r.row_names.empty() ? label_names : r.row_names;  // entity types for token classification
  if (names.size() == r.precision.size()) j["labels"] = names;
  j["per_class"] = {{"precision", r.precision}, {"recall", r.recall}, {"f1", r.f1}, {"support", r.support}};
  if (!r.confusion.empty()) j["confusion"] = r.confusion;
}

}  // namespace

EventLog::EventLog(bool is_rank0, const std::string& metrics_path, bool progress, const std::string& tensorboard_dir)
    : rank0_(is_rank0), tty_(::isatty(STDOUT_FILENO) == 1), progress_enabled_(progress) {
  if (rank0_ && !tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (!rank0_ || metrics_path.empty()) return;
  // Created at the first event: a run that fails while starting up leaves no
  // file (and a previous run's intact). Whether it can be written is known now.
  const std::filesystem::path path(metrics_path);
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::error_code ec;
  const bool writable = std::filesystem::exists(path, ec)
                            ? !std::filesystem::is_directory(path, ec) && ::access(path.c_str(), W_OK) == 0
                            : ::access(dir.c_str(), W_OK | X_OK) == 0;
  if (!writable) fail("--metrics-out {}: cannot open for writing", metrics_path);
  metrics_path_ = metrics_path;
}

EventLog::~EventLog() {
  end_progress_line();
  if (metrics_) std::fclose(metrics_);
}

void EventLog::write_json(const std::string& line) {
  for (const auto& listener : listeners_) listener(line);
  if (!metrics_ && !metrics_path_.empty()) {
    metrics_ = std::fopen(metrics_path_.c_str(), append_ ? "a" : "w");
    if (!metrics_) fail("--metrics-out {}: cannot open for writing", metrics_path_);
  }
  if (!metrics_) return;
  std::fputs(line.c_str(), metrics_);
  std::fputc('\n', metrics_);
  std::fflush(metrics_);
}

void EventLog::end_progress_line() {
  if (progress_drawn_) {
    std::fputc('\n', stdout);
    progress_drawn_ = false;
  }
}

void EventLog::info(const std::string& line) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  end_progress_line();
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void EventLog::warn(const std::string& line) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  end_progress_line();
  std::fputs(("ft: warning: " + line + "\n").c_str(), stderr);
  std::fflush(stderr);
}

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  const int64_t h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  return h > 0 ? fmt::format("{}:{:02d}:{:02d}", h, m, sec) : fmt::format("{}:{:02d}", m, sec);
}

std::string format_progress(const ProgressLine& p) {
  constexpr int kWidth = 30;
  const int filled = p.total > 0 ? static_cast<int>(kWidth * std::min(p.step, p.total) / p.total) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::string line = fmt::format("[{}] {}/{}", bar, p.step, p.total);
  if (std::isfinite(p.loss)) line += fmt::format(" loss {:.4f}", p.loss);  // none logged yet: left out
  if (p.samples_per_s > 0) line += fmt::format(" | {:.1f} samples/s", p.samples_per_s);
  line += " | " + format_duration(p.elapsed_s) + " elapsed";
  if (p.eta_s >= 0) line += ", ETA " + format_duration(p.eta_s);
  return line;
}

std::string format_eval_progress(int64_t done, int64_t total) {
  return fmt::format("[eval] {}/{} batches", done, total);
}

ProgressLine EventLog::timing(int64_t step, int64_t total) {
  const auto now = std::chrono::steady_clock::now();
  if (!progress_started_) {
    progress_started_ = true;
    first_step_ = step;
    first_time_ = now;
  }
  ProgressLine p;
  p.step = step;
  p.total = total;
  p.elapsed_s = std::chrono::duration<double>(now - first_time_).count();
  if (step > first_step_ && total >= step) {
    p.eta_s = p.elapsed_s / static_cast<double>(step - first_step_) * static_cast<double>(total - step);
  }
  return p;
}

void EventLog::progress(int64_t step, int64_t total, double loss, double samples_per_s) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_ || total <= 0) return;
  ProgressLine p = timing(step, total);  // piped too: the step lines' elapsed time counts from here
  if (!tty_ || !progress_enabled_) return;
  p.loss = loss;
  p.samples_per_s = samples_per_s;
  // "\r" redraws; the trailing clear wipes what a longer previous line left.
  std::fputs(("\r" + format_progress(p) + "\033[K").c_str(), stdout);
  std::fflush(stdout);
  progress_drawn_ = true;
}

void EventLog::eval_progress(int64_t done, int64_t total) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_ || !tty_ || !progress_enabled_ || total <= 0) return;
  if (done == 0) end_progress_line();  // the training bar keeps its line
  std::fputs(("\r" + format_eval_progress(done, total) + "\033[K").c_str(), stdout);
  std::fflush(stdout);
  progress_drawn_ = true;
}

void EventLog::step(const StepEvent& e, bool print_line) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  nlohmann::json j{{"event", "step"}, {"step", e.step}, {"epoch", e.epoch}, {"loss", number(e.loss)},
                   {"lr", e.lr}, {"samples_per_s", number(e.samples_per_s)}, {"grad_norm", number(e.grad_norm)}};
  if (e.skipped) j["skipped"] = true;
  if (e.loss_scale != 1.0) j["loss_scale"] = e.loss_scale;
  write_json(j.dump());
  if (tensorboard_) {
    tensorboard_->add_scalar("train/loss", e.loss, e.step);
    tensorboard_->add_scalar("train/lr", e.lr, e.step);
    tensorboard_->add_scalar("train/grad_norm", e.grad_norm, e.step);
    tensorboard_->add_scalar("train/samples_per_s", e.samples_per_s, e.step);
    tensorboard_->add_scalar("train/loss_scale", e.loss_scale, e.step);
  }
  const bool bar = tty_ && progress_enabled_;
  if (print_line) {
    const ProgressLine t = timing(e.step, e.total_steps);
    std::string line = fmt::format("step {}/{} epoch {} loss {:.6f} lr {:.3e} grad_norm {:.4f} {:.1f} samples/s{}", e.step,
                                   e.total_steps, e.epoch, e.loss, e.lr, e.grad_norm, e.samples_per_s,
                                   e.skipped ? " (skipped: fp16 overflow)" : "");
    // A piped log has no bar: each line carries the time (a slow rank, a long job's end).
    line += " | " + format_duration(t.elapsed_s) + " elapsed";
    if (t.eta_s >= 0) line += ", ETA " + format_duration(t.eta_s);
    if (bar && progress_drawn_) {
      // As tqdm's write(): the line goes above the bar, which is redrawn below it.
      std::fputs("\r\033[K", stdout);
      progress_drawn_ = false;
    }
    info(line);
  }
  if (bar) progress(e.step, e.total_steps, e.loss, e.samples_per_s);
}

namespace {

// An evaluation's opening fields; "dev" names data.dev's set when there are several.
nlohmann::json eval_record(const std::string& dev, int64_t step, int64_t epoch, double loss) {
  nlohmann::json j{{"event", "eval"}, {"step", step}, {"epoch", epoch}, {"loss", number(loss)}};
  if (!dev.empty()) j["dev"] = dev;
  return j;
}

// "eval step 40" or "eval step 40 (sst2)".
std::string eval_head(const std::string& dev, int64_t step) {
  return dev.empty() ? fmt::format("eval step {}", step) : fmt::format("eval step {} ({})", step, dev);
}

// "dev recall@1 0.61 recall@10 0.90 ...": every named score.
std::string dev_scores(const ClassificationReport& r) {
  std::string line = "dev";
  for (const auto& [name, value] : r.scores) line += fmt::format(" {} {:.4f}", name, value);
  return line;
}

}  // namespace

void EventLog::eval_scalar(const std::string& metric, double value, int64_t step) {
  if (tensorboard_) tensorboard_->add_scalar("eval/" + (dev_set_.empty() ? "" : dev_set_ + "_") + metric, value, step);
}

void EventLog::eval(int64_t step, int64_t epoch, const ClassificationReport& r,
                    const std::vector<std::string>& label_names) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  report_labels_ = label_names;
  if (r.problem_type != ProblemType::kSingleLabel || !r.task.empty()) return eval_scores(step, epoch, r);
  nlohmann::json j = eval_record(dev_set_, step, epoch, r.loss);
  for (const auto& [name, value] : r.scores) j[name] = number(value);
  j["samples"] = r.total;
  add_class_tables(j, r, label_names);
  write_json(j.dump());
  eval_scalar("loss", r.loss, step);
  for (const auto& [name, value] : r.scores) eval_scalar(name, value, step);
  info(fmt::format("{}: loss {:.4f} accuracy {:.4f} macro_f1 {:.4f} ({} samples)", eval_head(dev_set_, step), r.loss,
                   r.accuracy, r.macro_f1, r.total));
  refresh_report();
  // One line per evaluation; the per-label table once, at the end (summary).
}

void EventLog::eval_scores(int64_t step, int64_t epoch, const ClassificationReport& r) {
  nlohmann::json j = eval_record(dev_set_, step, epoch, r.loss);
  if (r.task.empty()) j["problem_type"] = problem_type_name(r.problem_type);
  if (!r.task.empty()) j["task"] = r.task;
  std::string line = fmt::format("{}: loss {:.4f}", eval_head(dev_set_, step), r.loss);
  for (const auto& [name, value] : r.scores) {
    j[name] = number(value);
    line += fmt::format(" {} {:.4f}", name, value);
    eval_scalar(name, value, step);
  }
  j["samples"] = r.total;
  add_class_tables(j, r, report_labels_);
  write_json(j.dump());
  eval_scalar("loss", r.loss, step);
  info(fmt::format("{} ({} samples)", line, r.total));
  refresh_report();
}

void EventLog::report(const ClassificationReport& r, const std::vector<std::string>& label_names) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  info(format_report(r, label_names));
}

void EventLog::eval_masked_lm(int64_t step, int64_t epoch, const ClassificationReport& r) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  const double perplexity = std::exp(r.loss);
  nlohmann::json j = eval_record(dev_set_, step, epoch, r.loss);
  j["task"] = "masked_lm";
  j["accuracy"] = r.accuracy;
  j["perplexity"] = number(perplexity);
  j["masked_tokens"] = r.total;
  write_json(j.dump());
  eval_scalar("loss", r.loss, step);
  eval_scalar("accuracy", r.accuracy, step);
  eval_scalar("perplexity", perplexity, step);
  info(fmt::format("{}: mlm loss {:.4f} perplexity {:.2f} masked-token accuracy {:.4f} ({} masked tokens)",
                   eval_head(dev_set_, step), r.loss, perplexity, r.accuracy, r.total));
  refresh_report();
}

void EventLog::strategy(const StrategyEvent& e) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const nlohmann::json data = nlohmann::json::parse(e.data, nullptr, /*allow_exceptions=*/false);
  if (!data.is_object()) fail("strategy event '{}': its data is not a JSON object: {}", e.name, e.data.substr(0, 80));
  if (rank0_) write_json(nlohmann::json{{"event", "strategy"}, {"name", e.name}, {"data", data}}.dump());
  if (e.line.empty()) return;
  if (rank0_) end_progress_line();
  std::fputs((e.line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void EventLog::early_stopping(int64_t step, const std::string& metric, double best, int64_t best_step,
                              int64_t patience) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  write_json(nlohmann::json{{"event", "early_stopping"}, {"step", step}, {"metric", metric}, {"best", number(best)},
                            {"best_step", best_step}, {"patience", patience}}
                 .dump());
  info(fmt::format("early stopping at step {}: {} has not improved in {} evaluation(s); the best was {:.4f} at step {}",
                   step, metric, patience, best, best_step));
}

void EventLog::run_started(const std::string& command, const std::string& config_yaml, const std::string& task,
                           const std::string& strategy, int world_size) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  write_json(nlohmann::json{{"event", "run"},
                            {"command", command},
                            {"config", config_yaml},
                            {"task", task},
                            {"strategy", strategy},
                            {"world_size", world_size}}
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void EventLog::keep_report(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (rank0_ && !metrics_path_.empty()) report_path_ = path;
}

void EventLog::refresh_report() {
  if (report_path_.empty() || report_failed_ || !metrics_) return;
  try {
    const std::filesystem::path dir = std::filesystem::path(report_path_).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);  // before the first checkpoint makes it
    write_run_report(report_path_, {{dir.string(), metrics_path_}});
  } catch (const std::exception& e) {
    report_failed_ = true;  // the report is a view of the metrics: never worth stopping a run for
    warn(fmt::format("{}; the run report is no longer updated", e.what()));
  }
}

void EventLog::summary(const SummaryEvent& s) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!rank0_) return;
  nlohmann::json j{{"event", "summary"},
                   {"strategy", s.strategy},
                   {"precision", s.precision},
                   {"world_size", s.world_size},
                   {"threads_per_rank", s.threads_per_rank},
                   {"steps", s.steps},
                   {"samples", s.samples},
                   {"train_seconds", s.train_seconds},
                   {"samples_per_s", number(s.samples_per_s)},
                   {"peak_rss_mb", s.peak_rss_mb},
                   {"model_state_bytes", s.model_state_bytes},
                   {"param_bytes", s.param_bytes},
                   {"grad_bytes", s.grad_bytes},
                   {"optimizer_bytes", s.optimizer_bytes},
                   {"trainable_params", s.trainable_params},
                   {"final_loss", number(s.final_loss)}};
  if (!s.peak_device_mb.empty()) j["peak_device_mb"] = s.peak_device_mb;
  if (s.negatives_per_anchor >= 0) j["negatives_per_anchor"] = s.negatives_per_anchor;
  if (s.has_eval) {
    j["eval_accuracy"] = s.eval.accuracy;
    j["eval_macro_f1"] = s.eval.macro_f1;
    for (const auto& [name, value] : s.eval.scores) j["eval_" + name] = number(value);
    j["eval_loss"] = number(s.eval.loss);
    if (s.masked_lm) j["task"] = "masked_lm";
    if (!s.eval_dev.empty()) j["eval_dev"] = s.eval_dev;
  }
  if (!s.checkpoint.empty()) j["checkpoint"] = s.checkpoint;
  write_json(j.dump());
  info(fmt::format("done: {} ({}, {} rank(s) x {} thread(s)) {} steps in {:.2f} s, {:.1f} samples/s, final loss {:.4f}",
                   s.strategy, s.precision, s.world_size, s.threads_per_rank, s.steps, s.train_seconds,
                   s.samples_per_s, s.final_loss));
  if (s.has_eval) {
    if (!s.eval_dev.empty()) info(fmt::format("the summary's evaluation is dev set '{}'", s.eval_dev));
    info(s.masked_lm ? fmt::format("dev masked-token accuracy {:.4f}, mlm loss {:.4f}", s.eval.accuracy, s.eval.loss)
         : s.eval.task == "sentence-embedding" ? dev_scores(s.eval)
         : !s.eval.task.empty() ? fmt::format("dev entity f1 {:.4f} precision {:.4f} recall {:.4f}, token accuracy {:.4f}",
                                              s.eval.score("f1").value_or(0.0), s.eval.score("precision").value_or(0.0),
                                              s.eval.score("recall").value_or(0.0), s.eval.accuracy)
                                : fmt::format("dev accuracy {:.4f} macro_f1 {:.4f}", s.eval.accuracy, s.eval.macro_f1));
    if (!s.masked_lm && !report_labels_.empty()) report(s.eval, report_labels_);
  }
  refresh_report();
}

}  // namespace ft
