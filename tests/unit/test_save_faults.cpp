// Fault injection into saving (docs/hardening.md "Interrupted saves").
//
// A run on the tiny task saves every 2 steps with save_total_limit 1, on
// single, ddp x2 and zero3 x2. Each trial starts it with `--resume auto`
// and strikes once: SIGINT to the whole process group (a terminal's
// Ctrl-C), SIGTERM to the top process (a scheduler) or SIGKILL to the
// group, most of them the moment a checkpoint's staging directory appears
// (inside a save), the rest at a random moment. After every strike:
//  - nothing crashed: the job ended by the signal it got, or finished;
//  - every visible entry of the output directory is a complete checkpoint;
//  - an interrupt that landed inside a save let that save finish: its
//    checkpoint is there, complete;
//  - the next run resumes from the newest complete checkpoint, having lost
//    at most save_every steps (SIGKILL: up to save_every more, those that
//    ran while the newest save was hashed in the background).
// The run that finally completes ends with the uninterrupted run's weights,
// bit for bit. FT_TRIALS=N strikes N times per strategy instead of CI's few
// (scripts/hardening-trials.sh); FT_TRIAL_LOG=FILE appends one JSON line a
// trial.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <functional>
#include <fstream>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/checkpoint/checkpoint_writer.h"
#include "ft/base/fs.h"
#include "ft/io/safetensors.h"
#include "ft_proc.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;
constexpr int64_t kSaveEvery = 2;
constexpr int64_t kSteps = 300;  // ~2 s of steps and saves: strikes land mid-run

struct Job {
  const char* strategy;
  int nproc;
};

std::vector<std::string> run_args(const Job& job, const fsys::path& dir, const fsys::path& out,
                                  const fsys::path& metrics) {
  std::vector<std::string> args{"run", "--config", (dir / "run.yaml").string(), "--strategy", job.strategy,
                                "--max-steps", std::to_string(kSteps), "--set",
                                fmt::format("train.save_every={}", kSaveEvery), "--set", "train.save_total_limit=1",
                                "--output-dir", out.string(), "--metrics-out", metrics.string(), "--resume", "auto"};
  if (job.nproc > 1) args.insert(args.end(), {"--nproc", std::to_string(job.nproc)});
  return args;
}

std::string command_line(const std::vector<std::string>& args) {
  std::string line;
  for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
  return line;
}

// A hidden staging directory of a checkpoint being saved (ft/base/fs.h's names).
std::optional<int64_t> staging_step(const fsys::path& out) {
  static const std::regex name(R"(\.checkpoint-([0-9]+)\.tmp-[0-9a-f]{16})");
  std::error_code ec;
  for (auto it = fsys::directory_iterator(out, ec); !ec && it != fsys::directory_iterator(); it.increment(ec)) {
    std::smatch m;
    const std::string n = it->path().filename().string();
    if (std::regex_match(n, m, name)) return std::stoll(m[1]);
  }
  return std::nullopt;
}

// Complete (verified) checkpoint-N steps; every other visible entry is a problem.
std::vector<int64_t> complete_steps(const fsys::path& out, std::vector<std::string>& problems) {
  static const std::regex name("checkpoint-([0-9]+)");
  std::vector<int64_t> steps;
  if (!fsys::exists(out)) return steps;
  for (const auto& e : fsys::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    if (n[0] == '.') continue;  // hidden leftovers: the next run removes them
    if (n == "report.html" || n == "metrics.jsonl") continue;  // the run's report, not a checkpoint
    std::smatch m;
    const std::string why = ft_test::error_of([&] { ft::verify_checkpoint(e.path()); });
    if (why != "<no ft::Error>") problems.push_back(why);
    if (std::regex_match(n, m, name) && why == "<no ft::Error>") steps.push_back(std::stoll(m[1]));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Whether `pid` has exited, without reaping it (wait_exit does that).
bool exited(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

// Polls `ready()` every `poll` until it holds, `pid` exits or `limit_s` passes.
bool poll_until(pid_t pid, const std::function<bool()>& ready, double limit_s, std::chrono::microseconds poll) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (!ready()) {
    if (exited(pid) || std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

int64_t last_step(const fsys::path& metrics) { return static_cast<int64_t>(ft_test::step_losses(metrics).size()); }

// "resumed from DIR at step S" in a run's log; 0 when it started afresh.
int64_t resumed_at(const std::string& log) {
  static const std::regex line("resumed from \\S+ at step ([0-9]+)");
  std::smatch m;
  return std::regex_search(log, m, line) ? std::stoll(m[1]) : 0;
}

struct Tally {
  int trials = 0, in_save = 0, held = 0, finished = 0, failures = 0;
};

void log_trial(const nlohmann::json& record) {
  if (const char* path = std::getenv("FT_TRIAL_LOG")) std::ofstream(path, std::ios::app) << record.dump() << "\n";
}

// One strike. Returns false once a run got to the end before the strike.
bool strike(const Job& job, const fsys::path& dir, int trial, std::mt19937_64& rng, Tally& tally,
            int64_t& previous_resume) {
  const fsys::path out = dir / "out", metrics = dir / fmt::format("m{}.jsonl", trial), log = dir / fmt::format("log{}.txt", trial);
  const int kinds[] = {SIGINT, SIGTERM, SIGKILL};
  const int sig = kinds[std::uniform_int_distribution<int>(0, 2)(rng)];
  const bool at_save = std::uniform_int_distribution<int>(0, 9)(rng) < 7;
  const int delay_ms = std::uniform_int_distribution<int>(0, 400)(rng);
  CAPTURE(trial);
  CAPTURE(sig);
  CAPTURE(at_save);
  const pid_t pid = ft_test::spawn_ft(run_args(job, dir, out, metrics), log);
  REQUIRE(pid > 0);
  // Training has begun once the first step is logged.
  poll_until(pid, [&] { return last_step(metrics) >= 1; }, 60, std::chrono::milliseconds(5));
  std::optional<int64_t> saving;
  if (at_save) {
    poll_until(pid, [&] { return (saving = staging_step(out)).has_value(); }, 30, std::chrono::microseconds(200));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
  ::kill(sig == SIGTERM ? pid : -pid, sig);
  const auto status = ft_test::wait_exit(pid, std::chrono::seconds(60));
  const std::string text = ft_test::read_text(log);
  INFO(text);
  REQUIRE(status.has_value());  // no hang
  ++tally.trials;
  tally.in_save += saving ? 1 : 0;
  // A signal that lands after the last step (under load: while the process
  // exits) ends a run that trained to the end and wrote final/.
  const bool done = (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) || text.find("\ndone: ") != std::string::npos;
  // Ended by the signal (itself, or the launcher's 128 + N), or finished first.
  const bool by_signal = (WIFSIGNALED(*status) && WTERMSIG(*status) == sig) ||
                         (WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + sig);
  CHECK((done || by_signal));
  CHECK(text.find("Segmentation") == std::string::npos);
  const bool held = text.find("while saving a checkpoint: finishing it first") != std::string::npos;
  tally.held += held ? 1 : 0;
  std::vector<std::string> problems;
  const auto steps = complete_steps(out, problems);
  for (const auto& p : problems) FAIL_CHECK(p);
  // An interrupt inside a save lets it finish: that checkpoint (or a newer one) is there.
  if (saving && sig != SIGKILL && !done) {
    CHECK_FALSE(steps.empty());
    if (!steps.empty()) CHECK(steps.back() >= *saving);
  }
  // This run resumed from the newest complete checkpoint the previous strike left.
  const int64_t resumed = resumed_at(text);
  CHECK(resumed == previous_resume);
  const int64_t last = resumed + last_step(metrics);
  const bool ok = problems.empty() && (done || by_signal);
  tally.failures += ok ? 0 : 1;
  const char* kind = sig == SIGINT ? "save-SIGINT" : sig == SIGTERM ? "save-SIGTERM" : "save-SIGKILL";
  log_trial({{"kind", kind}, {"strategy", job.strategy}, {"nproc", job.nproc}, {"trial", trial},
             {"in_save", saving.has_value()},
             {"held", held}, {"resumed_at", resumed}, {"last_step", last}, {"finished", done}, {"ok", ok}});
  previous_resume = steps.empty() ? 0 : steps.back();
  // SIGINT/SIGTERM: at most save_every steps are lost; SIGKILL may also lose
  // the steps run while the newest save was hashed (up to save_every more).
  if (!done) CHECK(last - previous_resume <= (sig == SIGKILL ? 2 * kSaveEvery : kSaveEvery));
  if (done) ++tally.finished;
  return !done;
}

void fault_trials(const Job& job, int strikes) {
  INFO(job.strategy << " x" << job.nproc);
  ft_test::TempDir tmp(fmt::format("save-faults-{}", job.strategy));
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  // The uninterrupted run.
  const auto ref = ft_test::run_ft(command_line(run_args(job, dir, dir / "ref", dir / "ref.jsonl")));
  INFO(ref.output);
  REQUIRE(ref.exit_code == 0);
  std::mt19937_64 rng(ft_test::trial_seed() + static_cast<uint64_t>(job.nproc) * 7919 + job.strategy[0]);
  Tally tally;
  int64_t previous_resume = 0;
  for (int trial = 0; trial < strikes; ++trial) {
    if (!strike(job, dir, trial, rng, tally, previous_resume)) break;
  }
  // The run to the end, resumed from what the strikes left.
  const auto rest = ft_test::run_ft(command_line(run_args(job, dir, dir / "out", dir / "rest.jsonl")));
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  CHECK(rest.output.find("Segmentation") == std::string::npos);
  const auto want = ft::safetensors::load((dir / "ref/final/model.safetensors").string());
  const auto got = ft::safetensors::load((dir / "out/final/model.safetensors").string());
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(want[i].first == got[i].first);
    CHECK(at::equal(want[i].second, got[i].second));
  }
  // Nothing hidden is left once a run completed.
  int hidden = 0;
  for (const auto& e : fsys::directory_iterator(dir / "out")) hidden += e.path().filename().string()[0] == '.' ? 1 : 0;
  CHECK(hidden == 0);
  MESSAGE(fmt::format("{} x{}: {} strikes, {} inside a save, {} interrupts held until the save finished, {} failed; "
                      "final weights equal the uninterrupted run's",
                      job.strategy, job.nproc, tally.trials, tally.in_save, tally.held, tally.failures));
}

}  // namespace

TEST_CASE("SIGINT, SIGTERM and SIGKILL during saves: every run resumes to the uninterrupted weights") {
  const int strikes = ft_test::trial_count(4);
  for (const Job job : {Job{"single", 1}, Job{"ddp", 2}, Job{"zero3", 2}}) fault_trials(job, strikes);
}

TEST_CASE("a save every step under ddp x2 with save_total_limit 1 finishes, keeping one complete checkpoint") {
  ft_test::TempDir tmp("save-every-step");
  ft_test::write_tiny_task(tmp.path());
  const auto run = ft_test::run_ft(fmt::format(
      "run --config {0}/run.yaml --strategy ddp --nproc 2 --max-steps 60 --set train.save_every=1 "
      "--set train.save_total_limit=1 --output-dir {0}/out",
      tmp.path().string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::vector<std::string> problems;
  const auto steps = complete_steps(tmp.path() / "out", problems);
  CHECK(problems.empty());
  CHECK(steps == std::vector<int64_t>{59});
  CHECK(fsys::exists(tmp.path() / "out/final/manifest.json"));
}

TEST_CASE("leftovers of interrupted saves are ignored by resume auto and cleaned with one line each") {
  ft_test::TempDir tmp("save-leftovers");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  const std::string base = fmt::format("run --config {0}/run.yaml --set train.save_every=2 --output-dir {0}/out", dir.string());
  REQUIRE(ft_test::run_ft(base + " --max-steps 4").exit_code == 0);
  // An older ft's checkpoint committed without its manifest, above the newest complete one ...
  fsys::copy(dir / "out/checkpoint-2", dir / "out/checkpoint-6", fsys::copy_options::recursive);
  fsys::remove(dir / "out/checkpoint-6/manifest.json");
  // ... and a save killed while staging.
  fsys::copy(dir / "out/checkpoint-2", dir / "out/.checkpoint-8.tmp-0123456789abcdef", fsys::copy_options::recursive);
  fsys::remove(dir / "out/.checkpoint-8.tmp-0123456789abcdef/config.json");
  const auto run = ft_test::run_ft(base + " --max-steps 8 --resume auto");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("removed " + (dir / "out/checkpoint-6").string() +
                        ": it was committed without its manifest") != std::string::npos);
  CHECK(run.output.find("interrupted save: removed " + (dir / "out/.checkpoint-8.tmp-0123456789abcdef").string()) !=
        std::string::npos);
  CHECK(run.output.find("resumed from " + (dir / "out/final").string() + " at step 4") != std::string::npos);
  CHECK_FALSE(fsys::exists(dir / "out/.checkpoint-8.tmp-0123456789abcdef"));
}

TEST_CASE("rotation never removes the checkpoint just committed, nor the best one") {
  ft_test::TempDir tmp("rotation");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  // A stale checkpoint-39 of an earlier, longer run sits above this run's saves.
  const std::string base = fmt::format("run --config {0}/run.yaml --output-dir {0}/out --set train.save_total_limit=1", dir.string());
  REQUIRE(ft_test::run_ft(base + " --max-steps 40 --set train.save_every=39").exit_code == 0);
  CHECK(fsys::exists(dir / "out/checkpoint-39/manifest.json"));
  const auto run = ft_test::run_ft(base + " --max-steps 6 --set train.save_every=2 --overwrite-output-dir");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(fsys::exists(dir / "out/checkpoint-4/manifest.json"));  // the newest this run committed
  CHECK_FALSE(fsys::exists(dir / "out/checkpoint-2"));
  CHECK_FALSE(fsys::exists(dir / "out/checkpoint-39"));
}
