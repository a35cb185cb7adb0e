// A dead rank stops the whole job promptly: kill one worker of a running
// `ft run --nproc N` and the launcher must exit non-zero, name the rank,
// and leave no process behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "ft_proc.h"
#include "ft_run.h"

namespace {

namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Model-parallel strategies run the whole batch on every rank: "pipeline" in
// 4 micro-batches through nproc stages, "tensor" on one group of nproc ranks.
void kill_rank_and_check(int nproc, int victim_rank, const std::string& strategy = "ddp") {
  ft_test::TempDir tmp(fmt::format("kill-{}", nproc));
  const auto metrics = tmp.path() / "m.jsonl";
  const auto log = tmp.path() / "out.log";
  const bool pipeline = strategy == "pipeline";
  const std::string batch = std::to_string(pipeline ? 8 : strategy == "tensor" ? 32 : 32 / nproc);
  const pid_t launcher = ft_test::spawn_ft(
      {"run", "--config", "configs/parity-tiny.yaml", "--strategy", strategy, "--nproc", std::to_string(nproc),
       "--threads", "1", "--max-steps", "100000", "--timeout", "10", "--set", "train.batch_size=" + batch, "--set",
       std::string("train.grad_accum=") + (pipeline ? "4" : "1"), "--metrics-out", metrics.string()},
      log);
  REQUIRE(launcher > 0);
  // Wait until training is under way (two logged steps).
  const auto start = Clock::now();
  while (ft_test::step_losses(metrics).size() < 2) {
    int status;
    if (::waitpid(launcher, &status, WNOHANG) == launcher) FAIL("ft exited before training started: " << ft_test::read_text(log));
    if (Clock::now() - start > std::chrono::seconds(120)) {
      ::kill(-launcher, SIGKILL);
      FAIL("training did not start: " << ft_test::read_text(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto workers = ft_test::children_of(launcher);
  REQUIRE(static_cast<int>(workers.size()) == nproc);
  pid_t victim = -1;
  for (pid_t w : workers)
    if (ft_test::env_rank(w) == victim_rank) victim = w;
  REQUIRE(victim > 0);
  const auto killed_at = Clock::now();
  ::kill(victim, SIGKILL);
  int status = 0;
  while (::waitpid(launcher, &status, WNOHANG) != launcher) {
    if (Clock::now() - killed_at > std::chrono::seconds(40)) {
      ::kill(-launcher, SIGKILL);
      FAIL("ft did not stop within 40 s of a rank dying");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  const std::string out = ft_test::read_text(log);
  INFO(out);
  MESSAGE("job stopped " << seconds << " s after rank " << victim_rank << " was killed");
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(seconds < 10 + 5);  // within --timeout (plus the kill grace)
  CHECK(out.find(fmt::format("rank {} was killed by signal SIGKILL", victim_rank)) != std::string::npos);
  for (pid_t w : workers) CHECK_FALSE(alive(w));
}

}  // namespace

TEST_CASE("killing a rank stops the job, names the rank, leaves no process") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  SUBCASE("2 ranks, rank 1 killed") { kill_rank_and_check(2, 1); }
  SUBCASE("2 ranks, rank 0 killed") { kill_rank_and_check(2, 0); }
  // A middle stage: its neighbours wait on its activation and its gradient.
  SUBCASE("pipeline of 4 stages, stage 2 killed") { kill_rank_and_check(4, 2, "pipeline"); }
  SUBCASE("tensor x2, rank 1 killed") { kill_rank_and_check(2, 1, "tensor"); }
}
