// Starting `ft` in the background and watching its process tree (crash and
// kill trials): the launcher and its workers by pid, rank and process group.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ft_test.h"

namespace ft_test {

// Pids whose parent is `parent` (zombies included), from /proc.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(it->path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // Field 4 (ppid) follows the ")" that closes the command name.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// RANK from a process's environment; -1 when unreadable or absent.
inline int env_rank(pid_t pid) {
  std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
  std::istringstream vars(all);
  for (std::string v; std::getline(vars, v, '\0');)
    if (v.rfind("RANK=", 0) == 0) return std::stoi(v.substr(5));
  return -1;
}

// Whether any process is left in process group `pgid`.
inline bool group_alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno != ESRCH; }

// `ft <args>` started from the source dir in its own process group (pgid =
// pid), stdout and stderr to `log`. The caller must reap it (wait_exit).
inline pid_t spawn_ft(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<std::string> argv{ft_exe().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::string dir = source_dir().string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  if (pid > 0) ::setpgid(pid, pid);  // both sides: no race with the first kill(-pgid)
  return pid;
}

// Reaps `pid`; nullopt (and the whole group SIGKILLed and reaped) if it
// is still running after `limit`.
inline std::optional<int> wait_exit(pid_t pid, std::chrono::duration<double> limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

// Waits until `ready()`, polling every `poll`; false when process `pid`
// exits first or `limit_s` passes.
inline bool wait_until(pid_t pid, const std::function<bool()>& ready, double limit_s,
                       std::chrono::microseconds poll = std::chrono::milliseconds(5)) {
  const auto start = std::chrono::steady_clock::now();
  while (!ready()) {
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit_s) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

// FT_TRIALS from the environment, else `ci_default`.
inline int trial_count(int ci_default) {
  const char* env = std::getenv("FT_TRIALS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : ci_default;
}

// FT_TRIAL_SEED from the environment, else a fixed seed (CI is reproducible).
inline uint64_t trial_seed() {
  const char* env = std::getenv("FT_TRIAL_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 20240607ULL;
}

}  // namespace ft_test
