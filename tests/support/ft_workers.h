// Multi-process test workers (tests/workers*, run through the launcher):
// start one on N ranks, and check that every rank printed "all N checks passed".
#pragma once

#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "ft/comm/launcher.h"
#include "ft_run.h"

namespace ft_test {

// Runs bin/`worker` MODE on `nproc` ranks; returns their stdout and CHECKs a
// clean exit (stdout and stderr shown otherwise).
inline std::string run_workers(const std::string& worker, int nproc, const std::string& mode, int timeout_s,
                               const std::map<std::string, std::string>& env = {}) {
  TempDir dir(worker + "-" + mode);
  auto out_path = dir.path() / "out.txt";
  auto err_path = dir.path() / "err.txt";
  FILE* out = std::fopen(out_path.c_str(), "w");
  FILE* err = std::fopen(err_path.c_str(), "w");
  ft::LaunchOptions o;
  o.nproc = nproc;
  o.timeout_s = timeout_s;
  o.kill_grace_s = 1;
  o.argv = {(binary_dir() / "bin" / worker).string(), mode};
  for (const auto& [k, v] : env) o.extra_env[k] = v;
  o.stdout_fd = ::fileno(out);
  o.stderr_fd = ::fileno(err);
  ft::LaunchResult r = ft::launch_workers(o);
  std::fclose(out);
  std::fclose(err);
  const std::string text = read_text(out_path);
  INFO("stdout:\n" << text << "\nstderr:\n" << read_text(err_path));
  CHECK(r.exit_code == 0);
  CHECK(r.error.empty());
  return text;
}

// "rank R: all N checks passed" for every rank (non-zero ranks are prefixed by the launcher).
inline void expect_all_passed(const std::string& text, int nproc, int checks) {
  INFO(text);
  CHECK(text.find("rank 0: all " + std::to_string(checks) + " checks passed\n") != std::string::npos);
  for (int rank = 1; rank < nproc; ++rank) {
    CHECK(text.find(fmt::format("[rank {}] rank {}: all {} checks passed\n", rank, rank, checks)) != std::string::npos);
  }
}

}  // namespace ft_test
