// Recovery, on the real `ft` and the tiny task:
//  - `--max-restarts`: a ddp / zero2 job whose random rank is killed 3 times
//    at random moments completes, with final weights bit-equal to an
//    uninterrupted run's (FT_TRIALS=N for N trials per strategy; CI runs 2;
//    scripts/hardening-trials.sh runs 10);
//  - train.resume_from: auto picks the newest complete checkpoint and skips
//    one whose manifest never landed;
//  - manifests: a flipped byte, a truncation or a deletion of any file makes
//    resume and eval refuse the checkpoint, naming the file;
//  - kill -9 of the launcher leaves no worker alive.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/io/manifest.h"
#include "ft_proc.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string run_args(const fsys::path& dir, const std::string& strategy, int steps, const fsys::path& out) {
  return fmt::format("run --config {0}/run.yaml --strategy {1} --nproc 2 --max-steps {2} --set train.save_every=7 "
                     "--set train.save_total_limit=2 --timeout 10 --output-dir {3}",
                     dir.string(), strategy, steps, out.string());
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Running and not a zombie (a zombie still answers kill(pid, 0)).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

// The workers of `launcher` once both are up (rank known), none of them in
// `old` (the group just killed); empty if the job ended first.
std::vector<pid_t> live_workers(pid_t launcher, const std::vector<pid_t>& old = {}) {
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < 30) {
    std::vector<pid_t> up;
    for (pid_t p : ft_test::children_of(launcher))
      if (ft_test::env_rank(p) >= 0 && alive(p) && std::find(old.begin(), old.end(), p) == old.end()) up.push_back(p);
    if (up.size() == 2) return up;
    int status;
    if (::waitpid(launcher, &status, WNOHANG) == launcher) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {};
}

void flip_byte(const fsys::path& file, uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x20));
}

}  // namespace

TEST_CASE("--max-restarts: a rank killed 3 times at random moments; the job completes with bit-equal weights") {
  std::mt19937_64 seeds(ft_test::trial_seed() + 7);
  for (const char* strategy : {"ddp", "zero2"}) {
    ft_test::TempDir tmp(fmt::format("restart-{}", strategy));
    ft_test::write_tiny_task(tmp.path());
    constexpr int kSteps = 400;
    auto ref = ft_test::run_ft(run_args(tmp.path(), strategy, kSteps, tmp.path() / "ref"));
    INFO(ref.output);
    REQUIRE(ref.exit_code == 0);
    const std::string want = ft_test::read_text(tmp.path() / "ref" / "final" / "model.safetensors");
    for (int trial = 0; trial < ft_test::trial_count(2); ++trial) {
      const uint64_t seed = seeds();
      std::mt19937_64 rng(seed);
      const fsys::path out = tmp.path() / fmt::format("out{}", trial);
      auto args = split(run_args(tmp.path(), strategy, kSteps, out) + " --max-restarts 3");
      const pid_t launcher = ft_test::spawn_ft(args, tmp.path() / "log.txt");
      std::string kills;
      std::vector<pid_t> killed_group;
      for (int k = 0; k < 3; ++k) {
        const auto workers = live_workers(launcher, killed_group);
        if (workers.empty()) break;
        killed_group.insert(killed_group.end(), workers.begin(), workers.end());
        const int64_t delay_ms = std::uniform_int_distribution<int64_t>(0, 1200)(rng);
        const size_t victim = std::uniform_int_distribution<size_t>(0, 1)(rng);
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        kills += fmt::format(" kill {} (rank {}) after {} ms;", workers[victim], ft_test::env_rank(workers[victim]), delay_ms);
        ::kill(workers[victim], SIGKILL);
      }
      const auto t0 = Clock::now();
      const auto status = ft_test::wait_exit(launcher, std::chrono::seconds(120));
      const std::string log = ft_test::read_text(tmp.path() / "log.txt");
      CAPTURE(strategy);
      CAPTURE(seed);
      CAPTURE(kills);
      INFO(log);
      MESSAGE(std::string(strategy) << " trial " << trial << " seed " << seed << ":" << kills);
      REQUIRE(status.has_value());
      CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
      int restarts = 0;
      for (size_t at = 0; (at = log.find("ft: restart ", at)) != std::string::npos; ++at) ++restarts;
      CHECK(restarts >= 1);
      CHECK(restarts <= 3);
      const bool equal = ft_test::read_text(out / "final" / "model.safetensors") == want;
      CHECK(equal);
      CHECK_FALSE(ft_test::group_alive(launcher));
      const bool ok = status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0 && equal;
      if (const char* path = std::getenv("FT_TRIAL_LOG")) {
        std::ofstream(path, std::ios::app)
            << nlohmann::json{{"kind", "restart"}, {"nproc", 2}, {"strategy", strategy}, {"seed", seed},
                              {"restarts", restarts}, {"ok", ok},
                              {"teardown_s", std::chrono::duration<double>(Clock::now() - t0).count()}}
                   .dump()
            << "\n";
      }
    }
  }
}

TEST_CASE("resume_from: auto takes the newest complete checkpoint, skipping one without its manifest") {
  ft_test::TempDir tmp("resume-auto");
  ft_test::write_tiny_task(tmp.path());
  const fsys::path out = tmp.path() / "out";
  const std::string base = fmt::format("run --config {}/run.yaml --output-dir {} --set train.resume_from=auto ",
                                       tmp.path().string(), out.string());
  auto fresh = ft_test::run_ft(base + "--max-steps 8 --set train.save_every=3 --set train.save_total_limit=0");
  INFO(fresh.output);
  REQUIRE(fresh.exit_code == 0);
  CHECK(fresh.output.find("resume_from=auto: no complete checkpoint in " + out.string() + "; starting at step 0") !=
        std::string::npos);
  // final (step 8) is complete: a rerun asking for 8 steps resumes there and has nothing left to do.
  auto again = ft_test::run_ft(base + "--max-steps 8");
  INFO(again.output);
  CHECK(again.output.find("resumed from " + (out / "final").string() + " at step 8") != std::string::npos);
  // A checkpoint whose manifest never landed (the run died while hashing) is skipped.
  fsys::remove(out / "final" / ft::kManifestFile);
  std::vector<std::string> skipped;
  const auto found = ft::latest_checkpoint(out, &skipped);
  REQUIRE(found.has_value());
  CHECK(found->dir == out / "checkpoint-6");
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].find((out / "final").string() + ": manifest.json is missing") != std::string::npos);
  auto skip = ft_test::run_ft(base + "--max-steps 8");
  INFO(skip.output);
  CHECK(skip.output.find("resumed from " + (out / "checkpoint-6").string() + " at step 6") != std::string::npos);
  CHECK(skip.output.find("resume_from=auto skips") != std::string::npos);
}

TEST_CASE("a flipped byte, a truncation or a deletion of any checkpoint file is refused, naming the file") {
  ft_test::TempDir tmp("manifest");
  ft_test::write_tiny_task(tmp.path());
  const fsys::path out = tmp.path() / "out";
  auto run = ft_test::run_ft(fmt::format("run --config {}/run.yaml --max-steps 2 --output-dir {}", tmp.path().string(),
                                         out.string()));
  REQUIRE(run.exit_code == 0);
  const fsys::path good = out / "final";
  CHECK(ft::verify_checkpoint(good) == ft::CheckpointCheck::kVerified);
  const auto files = ft::build_manifest(good);
  // config, weights, vocab + 2 tokenizer files, 4 training_state files.
  REQUIRE(files.size() == 9);
  for (const auto& f : files) {
    for (const char* how : {"flip", "truncate", "delete"}) {
      const fsys::path copy = tmp.path() / "bad";
      fsys::remove_all(copy);
      fsys::copy(good, copy, fsys::copy_options::recursive);
      const fsys::path victim = copy / f.path;
      if (std::string(how) == "flip") flip_byte(victim, f.bytes / 2);
      if (std::string(how) == "truncate") fsys::resize_file(victim, f.bytes - 1);
      if (std::string(how) == "delete") fsys::remove(victim);
      CAPTURE(f.path);
      CAPTURE(how);
      // What resume does first.
      const std::string err = ft_test::error_of([&] { (void)ft::load_checkpoint(copy, /*with_training_state=*/true); });
      CHECK(err.find("checkpoint " + copy.string() + ": " + f.path + " ") != std::string::npos);
      // One file per way of breaking it also goes through the commands.
      if (f.path == "model.safetensors" || f.path == "training_state/optimizer.safetensors") {
        auto resume = ft_test::run_ft(fmt::format("run --config {}/run.yaml --max-steps 4 --resume {}", tmp.path().string(),
                                                  copy.string()));
        auto eval = ft_test::run_ft(fmt::format("eval --config {}/run.yaml --checkpoint {} --data {}/train.jsonl",
                                                tmp.path().string(), copy.string(), tmp.path().string()));
        for (const auto* r : {&resume, &eval}) {
          INFO(r->output);
          CHECK(r->exit_code != 0);
          CHECK(r->output.find("ft: error: ") != std::string::npos);
          CHECK(r->output.find(f.path) != std::string::npos);
        }
      }
    }
  }
  // A checkpoint from before manifests: loads, reported unverified.
  const fsys::path old = tmp.path() / "old";
  fsys::copy(good, old, fsys::copy_options::recursive);
  fsys::remove(old / ft::kManifestFile);
  {
    std::string state = ft_test::read_text(old / "training_state" / "trainer_state.json");
    state.replace(state.find("\"manifest\": true"), 16, "\"manifest\": false");
    std::ofstream(old / "training_state" / "trainer_state.json") << state;
  }
  CHECK(ft::load_checkpoint(old, true).check == ft::CheckpointCheck::kUnverified);
  auto verify = ft_test::run_ft("checkpoint verify " + old.string() + " " + good.string());
  INFO(verify.output);
  CHECK(verify.exit_code == 0);
  CHECK(verify.output.find(old.string() + " has no manifest.json") != std::string::npos);
  CHECK(verify.output.find(good.string() + ": verified, 9 files") != std::string::npos);
}

TEST_CASE("kill -9 of the launcher leaves no worker alive within 2 s") {
  ft_test::TempDir tmp("launcher-death");
  ft_test::write_tiny_task(tmp.path());
  const pid_t launcher =
      ft_test::spawn_ft(split(fmt::format("run --config {}/run.yaml --strategy ddp --nproc 2 --max-steps 1000000",
                                          tmp.path().string())),
                        tmp.path() / "log.txt");
  const auto workers = live_workers(launcher);
  REQUIRE(workers.size() == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto killed = Clock::now();
  ::kill(launcher, SIGKILL);  // the launcher alone, not its group
  int status;
  ::waitpid(launcher, &status, 0);
  bool gone = false;
  while (std::chrono::duration<double>(Clock::now() - killed).count() < 2.0) {
    gone = !alive(workers[0]) && !alive(workers[1]);
    if (gone) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MESSAGE("workers gone " << std::chrono::duration<double>(Clock::now() - killed).count() << " s after the launcher's kill");
  CHECK(gone);
  ::kill(-launcher, SIGKILL);  // whatever is left, so a failure leaves no stray process
}
