// `ft sweep --config sweep.yaml`: a hyper-parameter search whose trials are
// `ft run` processes, K at a time, each in its own output directory and
// process group. Successive halving prunes at rungs: ASHA stops a trial that
// falls behind the ones already seen at its rung; SHA stops each trial at the
// rung (SIGSTOP: its process keeps its state and memory, and goes on exactly
// where it was) until every trial has reached it, then continues the best
// 1/eta. The sweep's state is written after every change, so a killed sweep
// run again continues where it stopped (docs/training-loop.md).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ft/config/config.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/observe/run_report.h"
#include "sweep_space.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct SweepFlags {
  std::string config;
  int parallel = 0;  // 0: the file's
  bool dry_run = false;
};

struct Trial {
  std::map<std::string, std::string> params;
  // pending | running | done | pruned | failed; SHA adds paused (stopped at
  // its last rung, waiting for the others) and promoted (waiting for a slot).
  std::string status = "pending";
  double best = std::nan("");
  int64_t steps = 0, pruned_at = 0;
  double seconds = 0;  // running time, pauses excluded
  std::map<int, double> rungs;  // the metric at each rung reached
  pid_t pid = 0;  // while paused or promoted
};

struct Running {
  size_t trial;
  pid_t pid;
  Clock::time_point start;
};

std::string params_text(const std::map<std::string, std::string>& p) {
  std::string out;
  for (const auto& [k, v] : p) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

class Sweep {
 public:
  Sweep(SweepSpec spec, int parallel) : spec_(std::move(spec)), dir_(spec_.output_dir) {
    if (parallel > 0) spec_.parallel = parallel;
    ConfigFlags base;
    base.config_path = spec_.base;
    base.overrides = spec_.overrides;
    const RunConfig config = load_run_config(base);  // the base must load before any trial starts
    RunConfig judged = config;  // with named dev sets, the metric is read on one of them
    if (!spec_.metric.empty()) judged.train.best_metric = spec_.metric;
    const BestMetricRef ref = best_metric_ref(judged);
    metric_ = ref.metric;
    dev_ = ref.dev;
    greater_ = sweep_greater_is_better(spec_, metric_);
    pruner_ = std::make_unique<AshaPruner>(spec_.min_steps, spec_.reduction_factor, greater_);
    for (auto& p : sweep_trials(spec_)) trials_.push_back(Trial{std::move(p)});
  }

  void print_plan() const {
    for (size_t i = 0; i < trials_.size(); ++i) std::cout << fmt::format("trial {:02d}: {}\n", i, params_text(trials_[i].params));
  }

  int run();

 private:
  fsys::path trial_dir(size_t i) const { return dir_ / fmt::format("trial-{:02d}", i); }
  void load_state();
  void save_state() const;
  pid_t launch(size_t i, const sigset_t& blocked);
  void poll(const Running& r);
  void decide_rungs();
  void prune_paused(size_t i, int rung);
  bool sha() const { return pruner_->enabled() && spec_.scheduler == "sha"; }
  void print_table() const;
  void write_outputs() const;

  SweepSpec spec_;
  fsys::path dir_;
  std::string metric_;
  std::string dev_;  // the data.dev set metric_ is read on ("" for a single set)
  bool greater_ = true;
  std::unique_ptr<AshaPruner> pruner_;
  std::vector<Trial> trials_;
};

void Sweep::load_state() {
  const fsys::path file = dir_ / "sweep_state.json";
  std::error_code ec;
  if (!fsys::exists(file, ec)) return;
  const json state = json::parse(fs::read_file(file), nullptr, false);
  if (!state.is_object() || !state.contains("trials")) fail("{}: not a sweep state; remove it to start over", file.string());
  if (state.value("spec", "") != spec_.text) {
    fail("{}: the sweep there was started from another {}; give a new output_dir, or remove it to start over",
         file.string(), spec_.source);
  }
  const auto& saved = state.at("trials");
  for (size_t i = 0; i < trials_.size() && i < saved.size(); ++i) {
    Trial& t = trials_[i];
    const std::string status = saved[i].value("status", "pending");
    if (status != "done" && status != "pruned") continue;  // an interrupted trial runs again from its start
    t.status = status;
    t.best = saved[i].value("best", json()).is_number() ? saved[i].at("best").get<double>() : std::nan("");
    t.steps = saved[i].value("steps", int64_t{0});
    t.seconds = saved[i].value("seconds", 0.0);
    t.pruned_at = saved[i].value("pruned_at", int64_t{0});
    const json rungs = saved[i].value("rungs", json::object());
    for (const auto& [rung, value] : rungs.items()) {
      t.rungs[std::stoi(rung)] = value.get<double>();
      pruner_->restore(std::stoi(rung), value.get<double>());
    }
  }
  size_t kept = 0;
  for (const auto& t : trials_) kept += t.status == "pending" ? 0 : 1;
  std::cout << fmt::format("resuming the sweep in {}: {} of {} trials already ended\n", dir_.string(), kept, trials_.size());
}

void Sweep::save_state() const {
  json trials = json::array();
  for (const auto& t : trials_) {
    json rungs = json::object();
    for (const auto& [k, v] : t.rungs) rungs[std::to_string(k)] = v;
    trials.push_back({{"params", t.params}, {"status", t.status}, {"best", std::isfinite(t.best) ? json(t.best) : json()},
                      {"steps", t.steps}, {"seconds", t.seconds}, {"pruned_at", t.pruned_at}, {"rungs", rungs}});
  }
  fs::write_file_atomic(dir_ / "sweep_state.json",
                        json{{"spec", spec_.text}, {"metric", metric_}, {"trials", trials}}.dump(1));
}

// The trial as `ft run`, in a process group of its own (killing the group
// stops its workers too), dying with the sweep, its output in trial.log.
pid_t Sweep::launch(size_t i, const sigset_t& blocked) {
  const fsys::path dir = trial_dir(i);
  fsys::create_directories(dir);
  trials_[i].seconds = 0;
  const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
  std::vector<std::string> args{fsys::read_symlink("/proc/self/exe").string(), "run"};
  if (!spec_.base.empty()) args.insert(args.end(), {"--config", spec_.base});
  for (const auto& o : spec_.overrides) args.insert(args.end(), {"--set", o});
  for (const auto& [k, v] : trials_[i].params) args.insert(args.end(), {"--set", k + "=" + v});
  if (pruner_->enabled()) args.insert(args.end(), {"--set", fmt::format("train.eval_every={}", spec_.min_steps)});
  args.insert(args.end(), {"--output-dir", dir.string(), "--overwrite-output-dir", "--set", "runtime.progress=false",
                           "--threads", std::to_string(std::max(1U, cores / static_cast<unsigned>(spec_.parallel)))});
  const std::string log = (dir / "trial.log").string();
  const pid_t pid = ::fork();
  if (pid < 0) fail("cannot start trial {}: fork failed", i);
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // This very binary even when a rebuild has replaced the file at its path
    // (the path then names a deleted inode): every trial runs the sweep's ft.
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // both sides: no race with an early kill
  trials_[i].status = "running";
  std::cout << fmt::format("trial {:02d} started: {}\n", i, params_text(trials_[i].params)) << std::flush;
  return pid;
}

// New evaluations of a running trial: its best value, and ASHA's verdict
// at each rung it reached.
void Sweep::poll(const Running& r) {
  Trial& t = trials_[r.trial];
  std::ifstream in(trial_dir(r.trial) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    const std::string event = j.value("event", "");
    // Steps are logged every log_every; an evaluation (a rung) may come later.
    if (event == "step" || event == "eval") t.steps = std::max(t.steps, j.value("step", int64_t{0}));
    if (event != "eval" || !j.contains(metric_) || !j.at(metric_).is_number()) continue;
    if (j.value("dev", std::string()) != dev_) continue;
    const double v = j.at(metric_).get<double>();
    const int64_t step = j.value("step", int64_t{0});
    if (t.status == "pruned" && step > t.pruned_at) continue;  // written before the stop reached it
    if (!std::isfinite(t.best) || (greater_ ? v > t.best : v < t.best)) t.best = v;
    const int rung = pruner_->rung_of(step);
    if (rung < 0 || t.rungs.count(rung) || t.status != "running") continue;
    t.rungs[rung] = v;
    if (sha()) {
      t.status = "paused";
      ::kill(-r.pid, SIGSTOP);
      std::cout << fmt::format("trial {:02d} paused at step {} ({} {:.4f}, rung {}): the rung decides when every trial "
                               "has reached it\n",
                               r.trial, step, metric_, v, rung)
                << std::flush;
      return;
    }
    if (!pruner_->keep(rung, v)) {
      t.status = "pruned";
      t.pruned_at = step;
      ::kill(-r.pid, SIGTERM);
      std::cout << fmt::format("trial {:02d} pruned at step {} ({} {:.4f}, rung {})\n", r.trial, step, metric_, v, rung)
                << std::flush;
    }
  }
}

// SHA's decisions, rung by rung: rung r is decided once every trial still
// in the bracket (all of them at rung 0, the best at r-1 after) has a value
// there or has ended; the best max(1, n / eta) of the n values go on. A
// decision is a function of the values alone, so a resumed sweep, whose
// interrupted trials run again to the rung, takes the same one.
void Sweep::decide_rungs() {
  std::vector<size_t> bracket;
  for (size_t i = 0; i < trials_.size(); ++i) {
    if (trials_[i].status != "failed") bracket.push_back(i);
  }
  for (int r = 0; !bracket.empty(); ++r) {
    std::vector<size_t> reported;
    for (size_t i : bracket) {
      const Trial& t = trials_[i];
      if (t.rungs.count(r)) reported.push_back(i);
      else if (t.status != "done" && t.status != "failed") return;  // still on its way to rung r
    }
    std::stable_sort(reported.begin(), reported.end(), [&](size_t a, size_t b) {
      const double x = trials_[a].rungs.at(r), y = trials_[b].rungs.at(r);
      return greater_ ? x > y : x < y;
    });
    const size_t keep = pruner_->survivors(reported.size());
    for (size_t k = 0; k < reported.size(); ++k) {
      Trial& t = trials_[reported[k]];
      if (t.status != "paused" || t.rungs.rbegin()->first != r) continue;
      if (k < keep) {
        t.status = "promoted";
        std::cout << fmt::format("trial {:02d} goes on from rung {} ({} {:.4f}, {} of {})\n", reported[k], r, metric_,
                                 t.rungs.at(r), k + 1, reported.size())
                  << std::flush;
      } else {
        prune_paused(reported[k], r);
      }
    }
    reported.resize(std::min(keep, reported.size()));
    bracket = std::move(reported);
  }
}

// A stopped trial is killed outright: it has nothing to save, and a stopped
// process would not act on SIGTERM before it is continued.
void Sweep::prune_paused(size_t i, int rung) {
  Trial& t = trials_[i];
  ::kill(-t.pid, SIGKILL);
  ::waitpid(t.pid, nullptr, 0);
  t.status = "pruned";
  t.pid = 0;
  t.pruned_at = pruner_->step_of(rung);
  std::cout << fmt::format("trial {:02d} pruned at step {} ({} {:.4f}, rung {})\n", i, t.pruned_at, metric_,
                           t.rungs.at(rung), rung)
            << std::flush;
  save_state();
}

int Sweep::run() {
  fsys::create_directories(dir_);
  load_state();
  save_state();
  // SIGINT / SIGTERM are taken synchronously (sigtimedwait): the trials get
  // them too, through their groups, and the state is saved before exiting.
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &blocked, nullptr);
  std::vector<Running> running;
  int stop_signal = 0;
  const auto sweep_start = Clock::now();
  const auto has_slot = [&] { return !stop_signal && running.size() < static_cast<size_t>(spec_.parallel); };
  for (;;) {
    if (sha()) decide_rungs();
    // Promoted trials first: the deeper rungs finish the sweep.
    for (size_t i = 0; i < trials_.size() && has_slot(); ++i) {
      Trial& t = trials_[i];
      if (t.status != "promoted") continue;
      ::kill(-t.pid, SIGCONT);
      t.status = "running";
      running.push_back({i, t.pid, Clock::now()});
      t.pid = 0;
    }
    for (size_t i = 0; i < trials_.size() && has_slot(); ++i) {
      if (trials_[i].status == "pending") running.push_back({i, launch(i, blocked), Clock::now()});
    }
    if (running.empty()) {
      // Every trial has ended (or, interrupted, stopped): paused ones cannot
      // be waiting on a rung any more, which decide_rungs has settled.
      for (auto& t : trials_) {
        if (t.pid == 0) continue;
        ::kill(-t.pid, SIGTERM);
        ::kill(-t.pid, SIGCONT);
        ::waitpid(t.pid, nullptr, 0);
        t.pid = 0;
        t.status = "pending";
      }
      break;
    }
    timespec tick{0, 200'000'000};  // a trial's new evaluations are read within 0.2 s
    const int sig = ::sigtimedwait(&blocked, nullptr, &tick);
    if (sig > 0 && !stop_signal) {
      stop_signal = sig;
      std::cout << "sweep interrupted: stopping the running trials; run the same command to continue\n" << std::flush;
      for (const auto& r : running) ::kill(-r.pid, SIGTERM);
    }
    for (auto it = running.begin(); it != running.end();) {
      poll(*it);
      Trial& t = trials_[it->trial];
      if (t.status == "paused") {
        t.seconds += std::chrono::duration<double>(Clock::now() - it->start).count();
        t.pid = it->pid;
        it = running.erase(it);
        save_state();
        continue;
      }
      int status = 0;
      if (::waitpid(it->pid, &status, WNOHANG) != it->pid) {
        ++it;
        continue;
      }
      poll(*it);  // the records written before it exited
      t.seconds += std::chrono::duration<double>(Clock::now() - it->start).count();
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (stop_signal && t.status == "running") {
        t.status = "pending";
      } else if (t.status == "running") {
        t.status = ok ? "done" : "failed";
        std::cout << fmt::format("trial {:02d} {}{}\n", it->trial, ok ? "done" : "failed: see ",
                                 ok ? fmt::format(" ({} {:.4f}, {:.0f} s)", metric_, t.best, t.seconds)
                                    : (trial_dir(it->trial) / "trial.log").string())
                  << std::flush;
      }
      it = running.erase(it);
      save_state();
    }
  }
  save_state();
  if (stop_signal) return 128 + stop_signal;
  print_table();
  write_outputs();
  std::cout << fmt::format("sweep time {:.0f} s\n", std::chrono::duration<double>(Clock::now() - sweep_start).count());
  return 0;
}

void Sweep::print_table() const {
  std::cout << fmt::format("\n{:<6} {:<48} {:>10} {:>6} {:>8}  {}\n", "trial", "params", metric_, "steps", "time s", "status");
  for (size_t i = 0; i < trials_.size(); ++i) {
    const Trial& t = trials_[i];
    const std::string status = t.status == "pruned" ? fmt::format("pruned at {}", t.pruned_at) : t.status;
    std::cout << fmt::format("{:<6} {:<48} {:>10.4f} {:>6} {:>8.0f}  {}\n", fmt::format("{:02d}", i),
                             params_text(t.params), t.best, t.steps, t.seconds, status);
  }
}

// best.yaml (the base with the best trial's params) and sweep.html (every trial's curves).
void Sweep::write_outputs() const {
  std::optional<size_t> best;
  std::vector<ReportRun> runs;
  for (size_t i = 0; i < trials_.size(); ++i) {
    const Trial& t = trials_[i];
    std::error_code ec;
    if (fsys::exists(trial_dir(i) / "metrics.jsonl", ec)) runs.push_back({fmt::format("trial-{:02d}", i), trial_dir(i) / "metrics.jsonl"});
    if (t.status != "done" || !std::isfinite(t.best)) continue;
    if (!best || (greater_ ? t.best > trials_[*best].best : t.best < trials_[*best].best)) best = i;
  }
  if (!runs.empty()) write_run_report(dir_ / "sweep.html", runs, "ft sweep: " + spec_.source);
  if (!best) {
    std::cout << "no trial finished: no best config\n";
    return;
  }
  ConfigFlags flags;
  flags.config_path = spec_.base;
  flags.overrides = spec_.overrides;
  for (const auto& [k, v] : trials_[*best].params) flags.overrides.push_back(k + "=" + v);
  fs::write_file_atomic(dir_ / "best.yaml", to_yaml(load_run_config(flags)));
  std::cout << fmt::format("best: trial {:02d} ({}) {} {:.4f}; its config: {}; curves: {}\n", *best,
                           params_text(trials_[*best].params), metric_, trials_[*best].best,
                           (dir_ / "best.yaml").string(), (dir_ / "sweep.html").string());
}

}  // namespace

void add_sweep_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<SweepFlags>();
  auto* cmd = app.add_subcommand("sweep", "hyper-parameter search: trials as ft run processes, pruned by successive halving (ASHA or SHA)");
  cmd->add_option("-c,--config", flags->config, "the sweep file (docs/training-loop.md)")->required();
  cmd->add_option("--parallel", flags->parallel, "trials at once, sharing the cores (default: the file's, else 1)");
  cmd->add_flag("--dry-run", flags->dry_run, "list the trials and stop");
  cmd->callback([flags, &exit_code] {
    Sweep sweep(read_sweep_spec(flags->config), flags->parallel);
    if (flags->dry_run) {
      sweep.print_plan();
      exit_code = 0;
      return;
    }
    exit_code = sweep.run();
  });
}

}  // namespace ft::app
