// The launcher: environment and output relay, and "no hang, ever": a failing,
// killed or stuck rank stops the whole job quickly, names the rank, and
// leaves no process behind.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "ft/base/error.h"
#include "ft/comm/launcher.h"
#include "ft_test.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Processes (zombies included) whose parent is this test process.
std::vector<int> our_children() {
  std::vector<int> kids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_file(entry.path() / "stat");
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == ::getpid()) kids.push_back(std::stoi(name));
  }
  return kids;
}

// Runs the test worker under the launcher with output captured to files.
struct Run {
  ft_test::TempDir dir{"launcher"};
  ft::LaunchOptions options;
  ft::LaunchResult result;
  int exit_code = 0;
  double seconds = 0;
  std::string out, err;

  Run(int nproc, std::vector<std::string> args) {
    options.nproc = nproc;
    options.timeout_s = 5;
    options.kill_grace_s = 2;
    options.argv = {(ft_test::binary_dir() / "bin" / "ft_test_comm_worker").string()};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.extra_env["FT_TEST_COMM_TIMEOUT_MS"] = "1500";
  }

  // launch_and_supervise (which also prints the error line) when `print`.
  void go(bool print = false) {
    FILE* o = std::fopen((dir.path() / "out").c_str(), "w");
    FILE* e = std::fopen((dir.path() / "err").c_str(), "w");
    options.stdout_fd = ::fileno(o);
    options.stderr_fd = ::fileno(e);
    auto start = Clock::now();
    if (print) {
      exit_code = ft::launch_and_supervise(options);
    } else {
      result = ft::launch_workers(options);
      exit_code = result.exit_code;
    }
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::fclose(o);
    std::fclose(e);
    out = read_file(dir.path() / "out");
    err = read_file(dir.path() / "err");
  }
};

}  // namespace

TEST_CASE("workers get torchrun's variables and their output is relayed by rank") {
  Run run(2, {"echo"});
  run.options.extra_env["FT_TEST_EXTRA"] = "xyz";
  run.go();
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.result.failed_rank == -1);
  // Rank 0 passes through unchanged; rank 1's lines carry a prefix, and its
  // unterminated last line is completed.
  CHECK(run.out.find("hello from 0 of 2 launched=1 extra=xyz\nsecond line 0\n") != std::string::npos);
  CHECK(run.out.find("[rank 1] hello from 1 of 2 launched=1 extra=xyz\n[rank 1] second line 1\n") !=
        std::string::npos);
  CHECK(run.out.find("[rank 0]") == std::string::npos);
  CHECK(run.err.find("err from 0") != std::string::npos);
  CHECK(run.err.find("[rank 1] err from 1\n") != std::string::npos);
  CHECK(our_children().empty());
}

TEST_CASE("a rank exiting 3 stops the job and is named") {
  Run run(2, {"exit3", "1"});
  run.go(/*print=*/true);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 3);
  CHECK(run.err.find("ft: error: rank 1 exited with code 3\n") != std::string::npos);
  CHECK(run.seconds < 10);
  CHECK(our_children().empty());
}

TEST_CASE("a rank killed by SIGKILL is named as killed") {
  Run run(2, {"sigkill", "1"});
  run.go();
  INFO(run.out << run.err);
  CHECK(run.exit_code == 128 + SIGKILL);
  CHECK(run.result.failed_rank == 1);
  CHECK(run.result.error == "rank 1 was killed by signal SIGKILL");
  CHECK(our_children().empty());
}

TEST_CASE("a rank stuck in a collective with an absent peer fails on the Comm timeout") {
  // Rank 1 never joins the all_reduce; rank 0 must give up after 1.5 s, hand
  // its line to the launcher (FT_ERROR_FILE), and the launcher then stops
  // rank 1 and prints that line, once, naming rank 0.
  Run run(2, {"hang", "1"});
  run.go(/*print=*/true);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 2);
  CHECK(run.err.rfind("ft: error: rank 0: all_reduce failed", 0) == 0);
  CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  CHECK(run.seconds < run.options.timeout_s + 8);
  CHECK(our_children().empty());
}

TEST_CASE("a rank stuck outside a sub-group's collective is named by its job rank") {
  // Mesh {outer: 2, inner: 2}: rank 3 never joins the inner all_reduce of
  // {2, 3}; rank 2 times out and names rank 3, the job stops.
  Run run(4, {"mesh_hang", "3"});
  run.go(/*print=*/true);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 2);
  CHECK(run.err.rfind("ft: error: rank 2: all_reduce failed: rank 3 stalled: it never joined all_reduce #1", 0) == 0);
  CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  CHECK(run.seconds < run.options.timeout_s + 8);
  CHECK(our_children().empty());
}

TEST_CASE("a peer dying during a collective ends the job") {
  Run run(2, {"die", "1"});
  run.go();
  INFO(run.out << run.err);
  CHECK(run.exit_code != 0);
  // Rank 1 exits without an error report; rank 0's all_reduce then fails
  // and reports. Whichever is reaped first, the silent exit is the cause.
  CHECK(run.result.failed_rank == 1);
  CHECK(run.result.error == "rank 1 exited with code 3");
  CHECK(run.seconds < run.options.timeout_s + 8);
  CHECK(our_children().empty());
}

TEST_CASE("of two failing ranks the earlier error report is named, whatever the exit order") {
  // Rank 1 reports first but exits 0.3 s later; rank 0 reports 0.1 s after
  // rank 1 and exits at once, so it is reaped first. The launcher must still
  // print rank 1's line, once, and nothing from rank 0.
  Run run(2, {});
  run.options.argv = {"sh", "-c",
                      "if [ \"$RANK\" = 1 ]; then printf 'bad row 7' >\"$FT_ERROR_FILE\"; sleep 0.3; exit 4; fi;"
                      " sleep 0.1; printf 'connection closed by peer' >\"$FT_ERROR_FILE\"; exit 2"};
  run.go(/*print=*/true);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 4);
  CHECK(run.err == "ft: error: rank 1: bad row 7\n");
  CHECK(our_children().empty());
}

TEST_CASE("the error-report directory is gone after the launch") {
  ft_test::TempDir tmp("launcher-tmp");
  Run run(2, {});
  run.options.argv = {"sh", "-c", "test -n \"$FT_ERROR_FILE\" && printf 'x' >\"$FT_ERROR_FILE\"; exit 1"};
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  run.go();
  if (old) ::setenv("TMPDIR", saved.c_str(), 1); else ::unsetenv("TMPDIR");
  CHECK(run.result.error.rfind("rank ", 0) == 0);
  CHECK(run.result.error.find(": x") != std::string::npos);
  CHECK(std::filesystem::is_empty(tmp.path()));
}

TEST_CASE("SIGTERM to the launcher is forwarded and every worker is reaped") {
  Run run(2, {"exit3", "99"});  // no rank matches: both sleep until stopped
  std::thread killer([] {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (our_children().size() < 2 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(::getpid(), SIGTERM);
  });
  run.go();
  killer.join();
  CHECK(run.exit_code == 128 + SIGTERM);
  CHECK(run.result.error == "interrupted by SIGTERM; stopped all workers");
  CHECK(run.seconds < 12);
  CHECK(our_children().empty());
}

TEST_CASE("bad launch options and commands are clear errors") {
  auto error_of = [](const ft::LaunchOptions& o) -> std::string {
    try {
      ft::launch_workers(o);
    } catch (const ft::Error& e) {
      return e.what();
    }
    return "<no ft::Error>";
  };
  ft::LaunchOptions o;
  o.argv = {"/nonexistent/ft-worker"};
  o.nproc = 2;
  CHECK(error_of(o) == "cannot run worker command '/nonexistent/ft-worker': No such file or directory");
  CHECK(our_children().empty());
  o.nproc = 0;
  CHECK(error_of(o) == "--nproc must be at least 1, got 0");
  o.nproc = 1;
  o.nnodes = 2;
  CHECK(error_of(o) == "--master-port is required with --nnodes 2 (every node must use the same port)");
  o.master_port = 29500;
  o.node_rank = 2;
  CHECK(error_of(o) == "--node-rank 2 is not below --nnodes 2");
  o = {};
  CHECK(error_of(o) == "no worker command given");
  const int port = ft::pick_free_port("127.0.0.1");
  CHECK(port > 0);
  CHECK(port <= 65535);
}
