#include "bench_proc.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "ft/base/error.h"

extern char** environ;

namespace ft::app {
namespace {

using Clock = std::chrono::steady_clock;

bool is_rank_variable(const std::string& name) {
  static const char* const kNames[] = {"RANK",        "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                       "MASTER_ADDR", "MASTER_PORT", "FT_LAUNCHED", "FT_ERROR_FILE"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return name.rfind("OMPI_COMM_WORLD_", 0) == 0 || name.rfind("SLURM_", 0) == 0;
}

std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (is_rank_variable(name) || extra.count(name)) continue;
    out.push_back(entry);
  }
  for (const auto& [k, v] : extra) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void signal_all(const std::vector<pid_t>& pids, const std::vector<bool>& done, int sig) {
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!done[i]) ::kill(-pids[i], sig);  // the child's whole group (ft run --nproc's workers too)
  }
}

}  // namespace

ChildrenResult run_children(const std::vector<ChildSpec>& children, const std::string& log_path, double timeout_s) {
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) fail("{}: cannot open the row log: {}", log_path, std::strerror(errno));
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  for (const auto& spec : children) {
    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    std::vector<std::string> args = spec.argv;
    std::vector<std::string> env = child_environment(spec.env);
    std::vector<char*> argv = c_strings(args);
    std::vector<char*> envp = c_strings(env);
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(log_fd);
      fail("bench: fork failed: {}", std::strerror(errno));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so kill(-pid) works before the child ran
    pids.push_back(pid);
  }
  ::close(log_fd);

  ChildrenResult result;
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  const auto start = Clock::now();
  auto term_sent = Clock::time_point{};
  bool killing = false;
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid || done[i]) continue;
        done[i] = true;
        --remaining;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && result.exit_code == 0) {
          result.exit_code = code;
          if (!killing) {
            signal_all(pids, done, SIGTERM);
            killing = true;
            term_sent = Clock::now();
          }
        }
      }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;
    const auto now = Clock::now();
    if (timeout_s > 0 && !result.timed_out && std::chrono::duration<double>(now - start).count() > timeout_s) {
      result.timed_out = true;
      if (result.exit_code == 0) result.exit_code = 124;
      signal_all(pids, done, SIGKILL);
    }
    if (killing && std::chrono::duration<double>(now - term_sent).count() > 5.0) signal_all(pids, done, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return result;
}

}  // namespace ft::app
