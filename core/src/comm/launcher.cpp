// launch_workers(): fork/exec N workers, relay their output, stop them all
// when one fails. See launcher.h for the contract.
#include "ft/comm/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "ft/comm/dist_env.h"
#include "ft/base/error.h"
#include "rank_relay.h"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;

// The one piece of process-wide state: a signal handler can only reach a
// static. Written by the handler, read by the supervision loop. The handler
// may run on any of the launcher's threads (the output relays too), so both
// are lock-free atomics (async-signal-safe), and the count is raised before
// the signal is published: the loop that sees the signal then sees it
// counted, and never takes the first interrupt for a second one.
std::atomic<int> g_launcher_signal{0};
std::atomic<int> g_launcher_signals{0};  // how many: a second one stops the workers at once

void on_signal(int sig) {
  g_launcher_signals.fetch_add(1);
  g_launcher_signal.store(sig);
}

// Installs SIGINT/SIGTERM forwarding for the duration of a launch.
class SignalForwarding {
 public:
  SignalForwarding() {
    g_launcher_signal.store(0);
    g_launcher_signals.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalForwarding() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGPIPE: return "SIGPIPE";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return "signal " + std::to_string(sig);
  }
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  std::unique_ptr<RankRelay> relay;
};

// argv/envp as the child needs them, built before fork (the child may only
// make async-signal-safe calls).
struct CStrings {
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
  explicit CStrings(std::vector<std::string> items) : storage(std::move(items)) {
    for (auto& s : storage) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
};

std::string error_file(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".err"; }

std::vector<std::string> worker_env(const LaunchOptions& o, int local_rank, int port,
                                    const std::string& error_dir) {
  std::map<std::string, std::string> env = process_env();
  for (const auto& [k, v] : o.extra_env) env[k] = v;
  env["RANK"] = std::to_string(o.node_rank * o.nproc + local_rank);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = std::to_string(o.nnodes * o.nproc);
  env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
  env["GROUP_RANK"] = std::to_string(o.node_rank);
  env["MASTER_ADDR"] = o.master_addr;
  env["MASTER_PORT"] = std::to_string(port);
  env["FT_LAUNCHED"] = "1";
  env["FT_ERROR_FILE"] = error_file(error_dir, o.node_rank * o.nproc + local_rank);
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("launcher: cannot create a pipe: {}", std::strerror(errno));
}

// Child side of fork: wire up fds, die with the launcher, exec. On failure,
// report errno through the close-on-exec pipe.
[[noreturn]] void exec_child(pid_t launcher, int out_fd, int err_fd, int report_fd,
                             CStrings& args, CStrings& env) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(1);  // launcher died before prctl took effect
  if (out_fd != STDOUT_FILENO) ::dup2(out_fd, STDOUT_FILENO);
  if (err_fd != STDERR_FILENO) ::dup2(err_fd, STDERR_FILENO);
  ::execvpe(args.ptrs[0], args.ptrs.data(), env.ptrs.data());
  int err = errno;
  ssize_t ignored = ::write(report_fd, &err, sizeof(err));
  (void)ignored;
  ::_exit(127);
}

// Where workers leave their error line (FT_ERROR_FILE, one file per rank)
// instead of printing it: the launcher then prints one line for the job,
// with the cause's own words, rather than every rank's follow-on failure.
struct ErrorDir {
  std::string path;
  ErrorDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/ft-launch-XXXXXX";
    if (!::mkdtemp(templ.data())) {
      fail("launcher: cannot create a temp directory {}: {}; set TMPDIR to a writable directory", templ,
           std::strerror(errno));
    }
    path = templ;
  }
  ~ErrorDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ErrorDir(const ErrorDir&) = delete;
  ErrorDir& operator=(const ErrorDir&) = delete;
};

// A worker's error line, "" when it left none.
std::string read_error_report(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "r");
  if (!f) return "";
  char buf[8192];
  const size_t n = std::fread(buf, 1, sizeof(buf), f);
  std::fclose(f);
  std::string text(buf, n);
  text = text.substr(0, text.find('\n'));
  return text;
}

// When the report was written, to order follow-on failures after their cause.
std::optional<std::chrono::nanoseconds> report_time(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::nullopt;
  return std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
}

class Supervisor {
 public:
  Supervisor(const LaunchOptions& o, int port) : o_(o), port_(port), sink_{{}, o.stdout_fd, o.stderr_fd} {}
  ~Supervisor() { stop_all(); }

  void spawn_all() {
    CStrings args(o_.argv);
    for (int local = 0; local < o_.nproc; ++local) spawn(local, args);
  }

  LaunchResult supervise() {
    LaunchResult result;
    std::optional<Clock::time_point> clean_deadline;
    int first_clean_rank = -1;
    while (any_running()) {
      if (int sig = g_launcher_signal.load()) {
        result = {128 + sig, -1, "interrupted by " + signal_name(sig) + "; stopped all workers", true};
        // This interrupt (at least one) is the one being obeyed; only a
        // later one abandons the workers' saves.
        stop_all(sig, std::max(1, g_launcher_signals.load()));
        break;
      }
      Worker* failed = nullptr;
      for (auto& w : workers_) {
        if (!w.running) continue;
        pid_t got = ::waitpid(w.pid, &w.status, WNOHANG);
        if (got != w.pid) continue;
        w.running = false;
        if (WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) {
          if (!clean_deadline) {
            first_clean_rank = w.rank;
            clean_deadline = Clock::now() + seconds(o_.timeout_s);
          }
          continue;
        }
        failed = &w;
        break;
      }
      if (failed) {
        result = describe_failure(root_cause(*failed));
        stop_all();
        break;
      }
      if (clean_deadline && Clock::now() > *clean_deadline && any_running()) {
        int late = -1;
        for (auto& w : workers_) {
          if (w.running) {
            late = w.rank;
            break;
          }
        }
        result = {1, late,
                  fmt::format("rank {} did not exit within {} s after rank {} finished",
                              late, o_.timeout_s, first_clean_rank)};
        stop_all();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (auto& w : workers_) {
      if (w.relay) w.relay->stop();
    }
    return result;
  }

 private:
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  void spawn(int local, CStrings& args) {
    Worker w;
    w.rank = o_.node_rank * o_.nproc + local;
    CStrings env(worker_env(o_, local, port_, error_dir_.path));
    int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2];
    make_pipe(report);
    if (w.rank != 0) {
      make_pipe(out);
      make_pipe(err);
    }
    const pid_t launcher = ::getpid();
    // Signals stay blocked across fork so none reaches the child while it
    // still runs the launcher's handler (it would be swallowed there).
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      exec_child(launcher, w.rank == 0 ? o_.stdout_fd : out[1],
                 w.rank == 0 ? o_.stderr_fd : err[1], report[1], args, env);
    }
    const int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) {
      for (int fd : {report[0], report[1], out[0], out[1], err[0], err[1]}) {
        if (fd >= 0) ::close(fd);
      }
      fail("launcher: fork failed for rank {}: {}", w.rank, std::strerror(fork_errno));
    }
    w.pid = pid;
    w.running = true;
    ::close(report[1]);
    if (w.rank != 0) {
      ::close(out[1]);
      ::close(err[1]);
      w.relay = std::make_unique<RankRelay>(w.rank, out[0], err[0], sink_);
    }
    workers_.push_back(std::move(w));
    int child_errno = 0;
    ssize_t n;
    do {
      n = ::read(report[0], &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    ::close(report[0]);
    if (n == static_cast<ssize_t>(sizeof(child_errno))) {
      stop_all();
      fail("cannot run worker command '{}': {}", o_.argv[0], std::strerror(child_errno));
    }
  }

  // A rank that crashed (killed by a signal, or exited non-zero without an
  // error report) makes its peers' collectives fail at once, and the
  // launcher may reap such a peer first: give the crashed one a moment to
  // show up, so the line names the rank that actually died. Otherwise the
  // earliest error report is the cause; later ones ("connection closed by
  // peer") follow from it.
  Worker& root_cause(Worker& first) {
    auto crashed = [this](const Worker& w) {
      return !WIFEXITED(w.status) || !report_time(error_file(error_dir_.path, w.rank));
    };
    if (crashed(first)) return first;
    const auto until = Clock::now() + std::chrono::milliseconds(250);
    while (Clock::now() < until) {
      for (auto& w : workers_) {
        if (!w.running || ::waitpid(w.pid, &w.status, WNOHANG) != w.pid) continue;
        w.running = false;
        if (!(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) && crashed(w)) return w;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // A rank whose own line only says a peer went away is rarely the cause:
    // the peer that failed first may still be unwinding (joining a save,
    // closing its sockets before it writes its line). Give it that time.
    if (is_follow_on(read_error_report(error_file(error_dir_.path, first.rank)))) {
      const auto give_up = Clock::now() + seconds(std::min(5.0, o_.timeout_s));
      while (Clock::now() < give_up && any_running()) {
        for (auto& w : workers_) {
          if (w.running && ::waitpid(w.pid, &w.status, WNOHANG) == w.pid) w.running = false;
        }
        for (auto& w : workers_) {
          if (w.running || (WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)) continue;
          if (crashed(w) || !is_follow_on(read_error_report(error_file(error_dir_.path, w.rank)))) return w;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    Worker* cause = &first;
    auto cause_time = report_time(error_file(error_dir_.path, first.rank));
    for (auto& w : workers_) {
      if (w.running || (WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)) continue;
      const auto t = report_time(error_file(error_dir_.path, w.rank));
      if (t && *t < *cause_time) {
        cause = &w;
        cause_time = t;
      }
    }
    return *cause;
  }

  // Comm's line for a collective that failed because a peer went away.
  static bool is_follow_on(const std::string& report) {
    return report.find("(a peer exited") != std::string::npos ||
           report.find("connection closed by") != std::string::npos;
  }

  LaunchResult describe_failure(const Worker& w) const {
    LaunchResult r;
    r.failed_rank = w.rank;
    if (WIFEXITED(w.status)) {
      r.exit_code = WEXITSTATUS(w.status);
      std::string report = read_error_report(error_file(error_dir_.path, w.rank));
      const std::string own = fmt::format("rank {}: ", w.rank);
      if (report.rfind(own, 0) == 0) report.erase(0, own.size());
      r.error = report.empty() ? fmt::format("rank {} exited with code {}", w.rank, r.exit_code)
                               : own + report;
    } else {
      const int sig = WTERMSIG(w.status);
      r.exit_code = 128 + sig;
      r.error = fmt::format("rank {} was killed by signal {}", w.rank, signal_name(sig));
    }
    // A stopped rank (SIGSTOP, a debugger) stalls its peers until they time
    // out; say so, as its peers' own lines may not reach this stream.
    for (const auto& other : workers_) {
      if (other.running && is_stopped(other.pid)) {
        r.error += fmt::format("; rank {} was stalled (its process is stopped)", other.rank);
      }
    }
    return r;
  }

  static bool is_stopped(pid_t pid) {
    std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
    if (!f) return false;
    char buf[512] = {};
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    // "pid (comm) S ...": the state follows the last ')'.
    const char* close = std::strrchr(buf, ')');
    return n > 0 && close && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
  }

  bool any_running() const {
    for (const auto& w : workers_) {
      if (w.running) return true;
    }
    return false;
  }

  void signal_running(int sig) {
    for (auto& w : workers_) {
      if (!w.running) continue;
      ::kill(w.pid, sig);
      // A stopped worker would hold `sig` pending until the kill grace ends.
      if (sig != SIGKILL) ::kill(w.pid, SIGCONT);
    }
  }

  // Polls for exits until `deadline`, or until the launcher is interrupted
  // once more than `signals` times; true when none is left running.
  bool reap_until(Clock::time_point deadline, int signals) {
    while (true) {
      for (auto& w : workers_) {
        if (w.running && ::waitpid(w.pid, &w.status, WNOHANG) == w.pid) w.running = false;
      }
      if (!any_running()) return true;
      if (Clock::now() >= deadline || g_launcher_signals > signals) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Politely first (`sig`, SIGTERM by default), then SIGKILL; reaps everyone.
  // A worker outlives `sig` only while it finishes a checkpoint save
  // (ft/checkpoint/save_signals.h), which it bounds itself: wait for that, unless the
  // launcher is interrupted again (a second Ctrl-C abandons the save).
  void stop_all(int sig = SIGTERM, int signals_obeyed = -1) {
    if (!any_running()) return;
    const int signals = signals_obeyed >= 0 ? signals_obeyed : g_launcher_signals.load();
    signal_running(sig);
    if (reap_until(Clock::now() + seconds(std::max(o_.kill_grace_s, o_.save_grace_s)), signals)) return;
    signal_running(SIGKILL);
    for (auto& w : workers_) {
      if (!w.running) continue;
      while (::waitpid(w.pid, &w.status, 0) < 0 && errno == EINTR) {
      }
      w.running = false;
    }
  }

  const LaunchOptions& o_;
  int port_;
  OutputSink sink_;
  ErrorDir error_dir_;
  std::vector<Worker> workers_;
};

void validate(const LaunchOptions& o) {
  if (o.nproc < 1) fail("--nproc must be at least 1, got {}", o.nproc);
  if (o.nnodes < 1) fail("--nnodes must be at least 1, got {}", o.nnodes);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail("--node-rank {} is not below --nnodes {}", o.node_rank, o.nnodes);
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    fail("--master-port {} is not a TCP port (0-65535)", o.master_port);
  }
  if (o.master_port == 0 && o.nnodes > 1) {
    fail("--master-port is required with --nnodes {} (every node must use the same port)",
         o.nnodes);
  }
  if (!(o.timeout_s > 0)) fail("launch timeout must be positive, got {}", o.timeout_s);
  if (o.kill_grace_s < 0) fail("kill grace must not be negative, got {}", o.kill_grace_s);
  if (o.argv.empty() || o.argv[0].empty()) fail("no worker command given");
}

}  // namespace

int pick_free_port(const std::string& addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("cannot open a socket to pick a port: {}", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  // The rendezvous store listens on all interfaces, so probe those too.
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(sa);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot pick a free port for {}: {}; pass --master-port", addr, std::strerror(err));
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

LaunchResult launch_workers(const LaunchOptions& options) {
  validate(options);
  const int port = options.master_port != 0 ? options.master_port : pick_free_port(options.master_addr);
  SignalForwarding forwarding;
  Supervisor supervisor(options, port);
  supervisor.spawn_all();
  return supervisor.supervise();
}

void report_error(const std::string& line) {
  const char* path = std::getenv("FT_ERROR_FILE");
  if (path && *path) {
    if (std::FILE* f = std::fopen(path, "w")) {
      const bool written = std::fputs(line.c_str(), f) >= 0;
      if (std::fclose(f) == 0 && written) return;
    }
  }
  std::fprintf(stderr, "ft: error: %s\n", line.c_str());
}

LaunchResult launch_with_restarts(const LaunchOptions& options) {
  LaunchOptions o = options;
  for (int attempt = 0;; ++attempt) {
    o.extra_env["FT_RESTART"] = std::to_string(attempt);
    LaunchResult r = launch_workers(o);
    r.restarts = attempt;
    if (r.exit_code == 0 || r.interrupted || attempt >= options.max_restarts) return r;
    std::string line = fmt::format("ft: restart {}/{}: {}", attempt + 1, options.max_restarts, r.error);
    if (options.describe_resume) line += "; resuming " + options.describe_resume();
    line += "\n";
    write_whole(options.stderr_fd, line.data(), line.size());
  }
}

int launch_and_supervise(const LaunchOptions& options) {
  LaunchResult r = launch_with_restarts(options);
  if (r.exit_code != 0) {
    std::string line = "ft: error: " + r.error + "\n";
    write_whole(options.stderr_fd, line.data(), line.size());
  }
  return r.exit_code;
}

}  // namespace ft
