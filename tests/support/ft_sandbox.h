// Running `ft` where everything it does can be checked afterwards: in a
// given directory, stdout and stderr kept apart, a clean rank environment,
// its own process group (hangs killed, stray workers detected), and
// snapshots of a directory tree to see what a run created or changed.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ft_proc.h"
#include "ft_run.h"

namespace ft_test {

struct SandboxRun {
  bool exited = false;  // false: killed by a signal or by the time limit
  int code = -1;
  std::string how;  // "exit 1", "signal 11", "hung"
  std::string out, err;
  bool left_processes = false;  // something of the run outlived it
};

// `ft <args>` in `cwd` (stdout/stderr kept in `logs`), `env` added to an
// environment without rank variables or FT_PLUGIN_PATH. Thread-safe: the
// child makes only async-signal-safe calls between fork and exec.
inline SandboxRun run_sandboxed(const std::filesystem::path& cwd, const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env, const std::filesystem::path& logs,
                                int limit_s = 60) {
  const std::string out_file = (logs / "stdout").string(), err_file = (logs / "stderr").string();
  const std::string exe = ft_exe().string();
  std::vector<std::string> argv_s{exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  static const char* const kDropped[] = {"FT_PLUGIN_PATH=", "FT_LAUNCHED=", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=",
                                         "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "GROUP_RANK=",
                                         "OMPI_COMM_WORLD_", "SLURM_"};
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    bool drop = false;
    for (const char* prefix : kDropped) drop |= var.rfind(prefix, 0) == 0;
    if (!drop) env_s.push_back(var);
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  SandboxRun r;
  const pid_t pid = ::fork();
  if (pid < 0) {
    r.how = "fork failed";
    return r;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  const auto status = wait_exit(pid, std::chrono::seconds(limit_s));
  r.exited = status && WIFEXITED(*status);
  r.code = r.exited ? WEXITSTATUS(*status) : -1;
  r.how = !status ? "hung" : r.exited ? fmt::format("exit {}", r.code) : fmt::format("signal {}", WTERMSIG(*status));
  r.left_processes = group_alive(pid);
  if (r.left_processes) ::kill(-pid, SIGKILL);
  r.out = read_text(out_file);
  r.err = read_text(err_file);
  return r;
}

// Every path under `root` with its size and modification time.
inline std::map<std::string, std::string> snapshot(const std::filesystem::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    const auto rel = std::filesystem::relative(e.path(), root).string();
    const auto t = e.last_write_time().time_since_epoch().count();
    out[rel] = e.is_directory() ? fmt::format("dir {}", t) : fmt::format("{} bytes {}", e.file_size(), t);
  }
  return out;
}

// "  added x\n  changed y\n  removed z\n" between two snapshots; empty if equal.
inline std::string snapshot_diff(const std::map<std::string, std::string>& before,
                                 const std::map<std::string, std::string>& after) {
  std::string d;
  for (const auto& [p, v] : after) {
    auto it = before.find(p);
    if (it == before.end()) d += "  added " + p + "\n";
    else if (it->second != v) d += "  changed " + p + "\n";
  }
  for (const auto& [p, v] : before)
    if (!after.count(p)) d += "  removed " + p + "\n";
  return d;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace ft_test
