// Crash safety and "no hang, ever", as randomized trials on the real `ft`:
//  (a) SIGKILL a run that saves every step at a random moment: every
//      checkpoint-* left behind loads completely (weights and training
//      state), the only debris is hidden temp directories, and the next run
//      removes them before its first save.
//  (b) SIGKILL a random rank of a 2- or 4-rank ddp / zero2 job at a random
//      moment (start-up, training, saving): the launcher ends every process
//      of the job and prints one line naming the dead rank, within the
//      timeout.
//  (c) SIGSTOP a random rank: the job ends within runtime.timeout_s plus a
//      margin, with a line naming the stalled rank and the collective it
//      never joined.
// Each trial draws its own seed (printed on failure; FT_TRIAL_SEED sets the
// base). FT_TRIALS=N runs N trials per case instead of the few CI runs
// (scripts/hardening-trials.sh); FT_TRIAL_LOG=FILE appends one JSON line per
// trial there for the script's summary.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/base/fs.h"
#include "ft_proc.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;
using ft_test::trial_count;
using ft_test::wait_until;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void log_trial(const nlohmann::json& record) {
  if (const char* path = std::getenv("FT_TRIAL_LOG")) std::ofstream(path, std::ios::app) << record.dump() << "\n";
}

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// ------------------------------------------------------------ (a) saves

const std::regex& checkpoint_name() {
  static const std::regex r("checkpoint-([0-9]+)");
  return r;
}

// fs::AtomicDir's temp names (ft/base/fs.h).
const std::regex& leftover_name() {
  static const std::regex r(R"(\..+\.(tmp|old)-[0-9a-f]{16})");
  return r;
}

std::vector<int64_t> checkpoint_steps(const fsys::path& out) {
  std::vector<int64_t> steps;
  if (!fsys::exists(out)) return steps;
  for (const auto& e : fsys::directory_iterator(out)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, checkpoint_name())) steps.push_back(std::stoll(m[1]));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// What is wrong with `dir` as a complete resumable checkpoint of step
// `step` (-1: any step); empty when nothing is.
std::string checkpoint_problem(const fsys::path& dir, int64_t step) {
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "training_state/optimizer.safetensors",
                        "training_state/trainer_state.json", "training_state/rng.safetensors",
                        "training_state/run.yaml"}) {
    if (!fsys::is_regular_file(dir / f)) return fmt::format("{}: {} is missing", dir.string(), f);
  }
  std::string problem;
  const std::string error = ft_test::error_of([&] {
    const auto c = ft::load_checkpoint(dir, /*with_training_state=*/true);
    if (c.model.empty() || !c.state || !c.optimizer || c.rng_states.size() != 1) {
      problem = "incomplete";
    } else if (step >= 0 && c.state->global_step != step) {
      problem = fmt::format("holds step {}", c.state->global_step);
    } else if (c.optimizer->step != c.state->global_step) {
      problem = fmt::format("optimizer step {} != trainer step {}", c.optimizer->step, c.state->global_step);
    }
  });
  if (error != "<no ft::Error>") return dir.string() + ": " + error;
  return problem.empty() ? "" : dir.string() + ": " + problem;
}

// Steps of the checkpoints that pass their manifest (what resume accepts).
std::vector<int64_t> complete_steps(const fsys::path& out) {
  std::vector<int64_t> ok;
  for (int64_t step : checkpoint_steps(out)) {
    const auto dir = out / fmt::format("checkpoint-{}", step);
    if (ft_test::error_of([&] { ft::verify_checkpoint(dir); }) == "<no ft::Error>") ok.push_back(step);
  }
  return ok;
}

struct Inspection {
  int checkpoints = 0;
  std::vector<std::string> leftovers;  // hidden temp names
  std::vector<std::string> problems;
};

// Every entry of `out` must be a loadable, verified checkpoint or a hidden
// leftover: a checkpoint is hashed before it is committed, so a kill while
// hashing leaves only the hidden staging directory.
Inspection inspect_output(const fsys::path& out) {
  Inspection r;
  if (!fsys::is_directory(out)) {
    r.problems.push_back(out.string() + " is missing");
    return r;
  }
  for (const auto& e : fsys::directory_iterator(out)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    std::string problem;
    if (std::regex_match(name, m, checkpoint_name())) {
      problem = checkpoint_problem(e.path(), std::stoll(m[1]));
      ++r.checkpoints;
    } else if (name == "final") {
      problem = checkpoint_problem(e.path(), -1);
    } else if (std::regex_match(name, leftover_name())) {
      r.leftovers.push_back(name);
    } else if (name == "report.html" || name == "metrics.jsonl") {
      // the run's report and metrics, written atomically beside the checkpoints
    } else {
      problem = "unexpected entry in the output directory: " + name;
    }
    if (!problem.empty()) r.problems.push_back(problem);
  }
  if (r.checkpoints == 0) r.problems.push_back("no checkpoint-* left");
  return r;
}

// The kill trials of a run saving every step, one after the other in one
// output directory: each resumes from what the kills before it left.
struct SaveTrials {
  fsys::path dir, out;
  std::vector<std::string> previous_leftovers;  // the last kill's debris, gone by the next run's first save
  int mid_save = 0, failures = 0;
};

// One trial: start (or resume) the run, kill it once it saves, inspect what is left.
void kill_during_saves(SaveTrials& t, int trial, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Resume from the newest complete one or the one before: then the run
  // overwrites an existing checkpoint-N, the commit path that swaps directories.
  const auto steps = complete_steps(t.out);
  std::string resume;
  if (!steps.empty()) {
    const size_t back = steps.size() > 1 ? static_cast<size_t>(uniform(rng, 1, 2)) : 1;
    resume = (t.out / fmt::format("checkpoint-{}", steps[steps.size() - back])).string();
  }
  const int64_t delay_ms = uniform(rng, 0, 300);
  CAPTURE(trial);
  CAPTURE(seed);
  CAPTURE(delay_ms);
  CAPTURE(resume);
  const auto metrics = t.dir / fmt::format("m{}.jsonl", trial);
  const auto log = t.dir / fmt::format("log{}.txt", trial);
  std::vector<std::string> args{"run", "--config", (t.dir / "run.yaml").string(), "--max-steps", "100000",
                                "--set", "train.save_every=1", "--set", "train.save_total_limit=2",
                                "--output-dir", t.out.string(), "--metrics-out", metrics.string()};
  // With nothing complete to resume, the trial starts over in the killed trial's directory.
  if (resume.empty()) args.push_back("--overwrite-output-dir");
  if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
  const pid_t pid = ft_test::spawn_ft(args, log);
  REQUIRE(pid > 0);
  // Saving is under way once a checkpoint is committed (hashed off the step
  // loop, so step 2 may be logged before checkpoint-1 appears).
  const bool started = wait_until(
      pid, [&] { return ft_test::step_losses(metrics).size() >= 2 && !checkpoint_steps(t.out).empty(); }, 60);
  if (!started) {
    ft_test::wait_exit(pid, std::chrono::seconds(1));
    FAIL("the run did not start training: " << ft_test::read_text(log));
  }
  // This run cleaned the previous trial's debris before its first save.
  int stale = 0;
  for (const auto& name : t.previous_leftovers) stale += fsys::exists(t.out / name) ? 1 : 0;
  CHECK(stale == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  ::kill(pid, SIGKILL);
  const auto status = ft_test::wait_exit(pid, std::chrono::seconds(10));
  REQUIRE(status.has_value());
  CHECK(WIFSIGNALED(*status));
  const Inspection seen = inspect_output(t.out);
  for (const auto& p : seen.problems) FAIL_CHECK(p);
  const bool ok = seen.problems.empty() && stale == 0 && WIFSIGNALED(*status);
  t.failures += ok ? 0 : 1;
  if (!seen.leftovers.empty()) ++t.mid_save;
  t.previous_leftovers = seen.leftovers;
  log_trial({{"kind", "kill-save"}, {"trial", trial}, {"seed", seed}, {"delay_ms", delay_ms},
             {"checkpoints", seen.checkpoints}, {"leftovers", seen.leftovers.size()}, {"ok", ok}});
}

// A run that finishes normally after the kills leaves no debris, and every
// checkpoint it wrote verifies. It runs past the highest checkpoint, so a
// stale unverified one above its start is rewritten too.
void finish_after_kills(const SaveTrials& t) {
  INFO("the run that finishes after the kills");
  const auto steps = complete_steps(t.out);
  REQUIRE_FALSE(steps.empty());
  const int64_t from = steps.back(), to = std::max(from, checkpoint_steps(t.out).back()) + 2;
  const auto last = ft_test::run_ft(fmt::format(
      "run --config {}/run.yaml --max-steps {} --set train.save_every=1 --output-dir {} --resume {}/checkpoint-{}",
      t.dir.string(), to, t.out.string(), t.out.string(), from));
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  const Inspection clean = inspect_output(t.out);
  for (const auto& p : clean.problems) FAIL_CHECK(p);
  CHECK(clean.leftovers.empty());
  CHECK(fsys::exists(t.out / "final"));
}

}  // namespace

TEST_CASE("SIGKILL at random moments of a run saving every step leaves only loadable checkpoints") {
  const int trials = trial_count(5);
  std::mt19937_64 seeds(ft_test::trial_seed());
  ft_test::TempDir tmp("crash-save");
  ft_test::write_tiny_task(tmp.path());
  SaveTrials t{tmp.path(), tmp.path() / "out", {}};
  for (int trial = 0; trial < trials; ++trial) kill_during_saves(t, trial, seeds());
  MESSAGE(trials << " kills, " << t.failures << " failed; " << t.mid_save
                 << " left a half-written save behind (hidden, removed by the next run)");
  finish_after_kills(t);
}

TEST_CASE("recover_atomic_dirs removes temp leftovers and restores a directory moved aside") {
  ft_test::TempDir tmp("crash-recover");
  const fsys::path& d = tmp.path();
  auto make = [](const fsys::path& dir) {
    fsys::create_directories(dir / "training_state");
    std::ofstream(dir / "training_state" / "x") << "x";
  };
  make(d / ".checkpoint-3.tmp-0123456789abcdef");  // a save killed midway
  make(d / ".checkpoint-2.old-00000000000000aa");  // the fallback commit's window: no checkpoint-2
  make(d / "checkpoint-4");
  make(d / ".checkpoint-4.old-00000000000000bb");  // ... after the new one landed
  make(d / ".keep-me");                            // not ours
  std::ofstream(d / ".run.yaml.tmp-fedcba9876543210") << "half";
  const auto done = ft::fs::recover_atomic_dirs(d);
  CHECK(done.size() == 4);
  CHECK(fsys::exists(d / "checkpoint-2" / "training_state" / "x"));
  CHECK(fsys::exists(d / "checkpoint-4" / "training_state" / "x"));
  CHECK(fsys::exists(d / ".keep-me"));
  for (const char* gone : {".checkpoint-3.tmp-0123456789abcdef", ".checkpoint-2.old-00000000000000aa",
                           ".checkpoint-4.old-00000000000000bb", ".run.yaml.tmp-fedcba9876543210"}) {
    CAPTURE(std::string(gone));
    CHECK_FALSE(fsys::exists(d / gone));
  }
  ft::fs::remove_dir_atomic(d / "checkpoint-4");
  CHECK_FALSE(fsys::exists(d / "checkpoint-4"));
  ft::fs::remove_dir_atomic(d / "checkpoint-4");  // absent: nothing to do
  CHECK(ft::fs::recover_atomic_dirs(d / "missing").empty());
}

// ------------------------------------------------------------ (b), (c) ranks

namespace {

struct Job {
  int nproc;
  const char* strategy;
};


struct Started {
  pid_t launcher = -1;
  std::vector<std::pair<int, pid_t>> ranks;  // (rank, pid)
};

// `ft run --nproc N` on the tiny task, saving every 4 steps, until killed.
Started start_job(const Job& job, const fsys::path& dir, double timeout_s) {
  Started s;
  const std::vector<std::string> args{
      "run", "--config", (dir / "run.yaml").string(), "--strategy", job.strategy, "--nproc", std::to_string(job.nproc),
      "--max-steps", "100000", "--timeout", fmt::format("{}", timeout_s), "--set", "train.save_every=4",
      "--output-dir", (dir / "out").string(), "--metrics-out", (dir / "m.jsonl").string()};
  s.launcher = ft_test::spawn_ft(args, dir / "log.txt");
  const bool all_up = wait_until(
      s.launcher,
      [&] {
        s.ranks.clear();
        for (pid_t p : ft_test::children_of(s.launcher)) s.ranks.emplace_back(ft_test::env_rank(p), p);
        return static_cast<int>(s.ranks.size()) == job.nproc &&
               std::none_of(s.ranks.begin(), s.ranks.end(), [](const auto& r) { return r.first < 0; });
      },
      30);
  if (!all_up) s.ranks.clear();
  return s;
}

pid_t pid_of(const Started& s, int rank) {
  for (const auto& [r, p] : s.ranks)
    if (r == rank) return p;
  return -1;
}

struct Ended {
  std::optional<int> status;  // nullopt: still running at the limit (then killed)
  double workers_s = -1;      // from the fault until every worker was gone (reaped)
  double launcher_s = -1;     // ... until the launcher itself had exited
};

// Reaps the launcher, noting when its workers disappeared.
Ended wait_job(const Started& s, Clock::time_point fault, double limit_s) {
  Ended e;
  int status = 0;
  for (;;) {
    if (e.workers_s < 0 && std::all_of(s.ranks.begin(), s.ranks.end(),
                                       [](const auto& r) { return ::kill(r.second, 0) != 0; })) {
      e.workers_s = seconds_since(fault);
    }
    if (::waitpid(s.launcher, &status, WNOHANG) == s.launcher) {
      e.status = status;
      break;
    }
    if (seconds_since(fault) > limit_s) {
      ::kill(-s.launcher, SIGKILL);
      ::waitpid(s.launcher, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  e.launcher_s = seconds_since(fault);
  if (e.workers_s < 0) e.workers_s = e.launcher_s;
  return e;
}

struct Teardowns {
  std::vector<double> workers, launcher;
  int failures = 0;
};

void summarize(const std::string& what, Teardowns& t) {
  if (t.launcher.empty()) return;
  std::sort(t.workers.begin(), t.workers.end());
  std::sort(t.launcher.begin(), t.launcher.end());
  MESSAGE(what << ": " << t.launcher.size() << " trials, " << t.failures << " failed; workers gone after median "
               << t.workers[t.workers.size() / 2] << " s, max " << t.workers.back()
               << " s; launcher exited after median " << t.launcher[t.launcher.size() / 2] << " s, max "
               << t.launcher.back() << " s");
}

// After the launcher is gone: no process of the job may be left.
// "ft: error:" lines in a job's log: the launcher's is the only one.
int error_lines(const std::string& log) {
  int n = 0;
  for (size_t at = 0; (at = log.find("ft: error: ", at)) != std::string::npos; at += 11) ++n;
  return n;
}

void check_no_survivors(const Started& s) {
  CHECK_FALSE(ft_test::group_alive(s.launcher));
  for (const auto& [rank, pid] : s.ranks) {
    CAPTURE(rank);
    CHECK(::kill(pid, 0) != 0);
  }
}

// One trial's random draws: which rank, and how long after the start.
struct Draw {
  uint64_t seed;
  int victim;
  int64_t delay_ms;
};

Draw draw(std::mt19937_64& seeds, const Job& job, int64_t max_delay_ms) {
  const uint64_t seed = seeds();
  std::mt19937_64 rng(seed);
  const int victim = static_cast<int>(uniform(rng, 0, job.nproc - 1));
  return {seed, victim, uniform(rng, 0, max_delay_ms)};
}

// Sends `signal` to the drawn rank after the drawn delay; the job's end, timed from the signal.
Ended fault_and_wait(const Started& s, const Draw& d, int signal, double limit_s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(d.delay_ms));
  const auto at = Clock::now();
  ::kill(pid_of(s, d.victim), signal);
  return wait_job(s, at, limit_s);
}

// What every fault trial checks and records once the job has ended.
void finish_trial(const char* kind, const Job& job, const Draw& d, const Started& s, const Ended& end, bool ok,
                  Teardowns& all) {
  check_no_survivors(s);
  all.workers.push_back(end.workers_s);
  all.launcher.push_back(end.launcher_s);
  if (!ok) ++all.failures;
  log_trial({{"kind", kind}, {"nproc", job.nproc}, {"strategy", job.strategy}, {"seed", d.seed},
             {"victim", d.victim}, {"delay_ms", d.delay_ms}, {"workers_s", end.workers_s},
             {"teardown_s", end.launcher_s}, {"ok", ok}});
}

// One kind of fault, as the trials below strike it.
struct Fault {
  const char* kind;        // recorded with each trial: "kill-rank", "stall-rank"
  int signal;              // sent to the drawn rank
  double timeout_s;        // the job's comm timeout
  int64_t max_delay_ms;    // the drawn delay before the signal, at most
  // Waits for the moment to strike (the job started: its workers exist;
  // stalls: it is training); false when the job never got there.
  std::function<bool(const Started&, const std::filesystem::path& dir)> ready;
  std::string not_ready;   // what the failure says then
  // CHECKs the job's end; returns whether the trial passed.
  std::function<bool(const Ended&, const std::string& log, int victim)> judge;
};

// `trials` faults of a random rank of `job`, each seeded from `seeds`.
void fault_trials(const Job& job, std::mt19937_64& seeds, int trials, const Fault& f, const std::string& summary) {
  Teardowns all;
  for (int trial = 0; trial < trials; ++trial) {
    const Draw d = draw(seeds, job, f.max_delay_ms);
    CAPTURE(trial);
    CAPTURE(d.seed);
    CAPTURE(d.victim);
    CAPTURE(d.delay_ms);
    ft_test::TempDir tmp(fmt::format("crash-{}-{}-{}", f.kind, job.strategy, job.nproc));
    ft_test::write_tiny_task(tmp.path());
    const Started s = start_job(job, tmp.path(), f.timeout_s);
    if (s.ranks.empty() || !f.ready(s, tmp.path())) {
      ft_test::wait_exit(s.launcher, std::chrono::seconds(1));
      FAIL_CHECK(f.not_ready << ": " << ft_test::read_text(tmp.path() / "log.txt"));
      ++all.failures;
      continue;
    }
    const Ended end = fault_and_wait(s, d, f.signal, f.timeout_s + 30);
    const std::string log = ft_test::read_text(tmp.path() / "log.txt");
    INFO(log);
    CHECK(end.status.has_value());
    const bool ok = end.status.has_value() && f.judge(end, log, d.victim);
    CHECK(error_lines(log) == 1);  // the peers' follow-on failures are not printed
    finish_trial(f.kind, job, d, s, end, ok, all);
  }
  summarize(summary, all);
}

// kill -9, from the first instants (rendezvous, data loading) into training
// and saves: the launcher names the rank and exits 128 + SIGKILL within the
// timeout plus the kill grace.
void kill_rank_trials(const Job& job, std::mt19937_64& seeds, int trials) {
  Fault f{"kill-rank", SIGKILL, 10, 2000, [](const Started&, const std::filesystem::path&) { return true; },
          "the workers did not start", nullptr};
  f.judge = [timeout = f.timeout_s](const Ended& end, const std::string& log, int victim) {
    const int status = *end.status;
    const bool exit_ok = WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL;
    const bool named = log.find(fmt::format("ft: error: rank {} was killed by signal SIGKILL\n", victim)) != std::string::npos;
    CHECK(exit_ok);
    CHECK(named);
    CHECK(end.launcher_s < timeout + 5);
    return exit_ok && named && end.launcher_s < timeout + 5;
  };
  fault_trials(job, seeds, trials, f, fmt::format("kill -9 a rank of {} x{}", job.strategy, job.nproc));
}

// SIGSTOP mid-training: the peers wait the timeout, look for the culprit (at
// most the grace of comm.cpp's stall report plus a second), then the
// launcher stops all, naming the rank and the collective it never joined.
void stall_rank_trials(const Job& job, std::mt19937_64& seeds, int trials) {
  constexpr double kMargin = 8;
  Fault f{"stall-rank", SIGSTOP, 3, 500, nullptr, "the job did not start training", nullptr};
  f.ready = [](const Started& s, const std::filesystem::path& dir) {
    return wait_until(s.launcher, [&] { return ft_test::step_losses(dir / "m.jsonl").size() >= 2; }, 60);
  };
  f.judge = [timeout = f.timeout_s](const Ended& end, const std::string& log, int victim) {
    const int status = *end.status;
    // e.g. "rank 0: all_reduce failed: rank 1 stalled: it never joined all_reduce #57 (rank 0 waited 3 s in it)"
    const std::regex named(fmt::format(R"(rank {} stalled: .*never joined [a-z_]+ #[0-9]+)", victim));
    const bool exit_ok = WIFEXITED(status) && WEXITSTATUS(status) != 0;
    const bool found = std::regex_search(log, named);
    CHECK(exit_ok);
    CHECK(found);
    CHECK(log.find(fmt::format("rank {} was stalled (its process is stopped)", victim)) != std::string::npos);
    CHECK(end.launcher_s < timeout + kMargin);
    return exit_ok && found && end.launcher_s < timeout + kMargin;
  };
  fault_trials(job, seeds, trials, f, fmt::format("SIGSTOP a rank of {} x{}", job.strategy, job.nproc));
}

// Runs `trials_of(job)` trials of each job in a subcase of its own, named
// after the job. Each job starts where the one seed stream of all jobs
// stood after the jobs before it, so a subcase run alone (-sc) draws the
// same trials as in the whole test case.
void each_job_subcase(std::initializer_list<Job> jobs, uint64_t seed, const std::function<int(const Job&)>& trials_of,
                      const std::function<void(const Job&, std::mt19937_64&, int)>& run) {
  std::mt19937_64 seeds(seed);
  for (const Job& job : jobs) {
    const int trials = trials_of(job);
    SUBCASE(fmt::format("{} x{}", job.strategy, job.nproc).c_str()) {
      std::mt19937_64 own = seeds;
      run(job, own, trials);
    }
    seeds.discard(static_cast<unsigned long long>(trials));
  }
}

}  // namespace

TEST_CASE("SIGKILL of a random rank at a random moment ends the whole job with one line naming it") {
  each_job_subcase({Job{2, "ddp"}, Job{2, "zero2"}, Job{4, "ddp"}, Job{4, "zero2"}}, ft_test::trial_seed() + 1,
                   [](const Job& job) { return trial_count(job.nproc == 2 ? 2 : 1); }, kill_rank_trials);
}

TEST_CASE("a stalled rank (SIGSTOP) ends the job within the timeout, named with the collective it never joined") {
  each_job_subcase({Job{2, "ddp"}, Job{4, "zero2"}}, ft_test::trial_seed() + 2,
                   [](const Job&) { return trial_count(1); }, stall_rank_trials);
}
