// Child processes for `ft bench`: every row runs in fresh processes, and the
// "external launcher" row is started here the way torchrun would start it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ft::app {

/// One process to start: its command line and variables added to (or
/// replacing) the cleaned environment.
struct ChildSpec {
  std::vector<std::string> argv;  ///< argv[0] is an absolute path
  std::map<std::string, std::string> env;
};

struct ChildrenResult {
  int exit_code = 0;       ///< first non-zero exit (128 + signal when killed), else 0
  bool timed_out = false;  ///< the group ran past timeout_s and was killed
};

/// Starts every child at once, each in its own process group, with stdout
/// and stderr appended to `log_path`; waits for all. When one fails the
/// others get SIGTERM (SIGKILL 5 s later); past `timeout_s` (> 0) all are
/// killed. Children inherit this environment minus any rank variables
/// (RANK, WORLD_SIZE, ..., FT_LAUNCHED) so a row never joins a job by
/// accident. Children die with us (PR_SET_PDEATHSIG). Throws ft::Error if the
/// log cannot be opened or fork fails.
ChildrenResult run_children(const std::vector<ChildSpec>& children, const std::string& log_path, double timeout_s);

}  // namespace ft::app
