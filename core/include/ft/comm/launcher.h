// `ft run --nproc N`: start N workers on this host and supervise them.
//
// Contract (ARCHITECTURE.md "Processes"): every worker gets torchrun's
// variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) plus FT_LAUNCHED=1. If any worker exits non-zero or is killed,
// the others get SIGTERM (and SIGCONT, for a stopped one), then SIGKILL after
// a short grace, all are reaped, and the launch fails naming that rank (a
// rank killed by a signal in preference to a peer that failed because of it).
// No worker outlives the launcher: each stays in the launcher's process group
// and has PR_SET_PDEATHSIG=SIGKILL.
//
// Output: rank 0 writes straight to the launcher's stdout/stderr; every other
// rank's lines are prefixed "[rank N] " (one reader thread per worker, whole
// lines written at once so ranks never interleave mid-line).
//
// Errors: each worker gets FT_ERROR_FILE, a per-rank file in a temp directory
// the launcher removes at the end. A failing worker writes its one error line
// there (report_error) instead of stderr, so a failed job prints exactly one
// line: "ft: error: rank N: <that rank's line>" for the rank that failed
// first (a rank killed by a signal in preference; else the earliest report).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ft {

/// What to launch. Field by field:
struct LaunchOptions {
  int nproc = 1;                          ///< workers on this node (>= 1)
  int nnodes = 1;                         ///< nodes in the job; RANK = node_rank * nproc + local
  int node_rank = 0;                      ///< this node's index, 0 <= node_rank < nnodes
  std::string master_addr = "127.0.0.1";  ///< where rank 0 hosts the rendezvous store
  int master_port = 0;                    ///< 0: pick a free port (single node only)
  /// Seconds the job may take to wind down: once any worker has exited
  /// cleanly the rest must follow within this, else they are stopped.
  /// Workers' collectives use the same budget (Comm's timeout).
  double timeout_s = 30;
  double kill_grace_s = 5;  ///< SIGTERM to SIGKILL delay when stopping workers
  /// ... or longer, this long, for a worker finishing a checkpoint save
  /// (runtime.save_grace_s); a second SIGINT/SIGTERM to the launcher cuts it short.
  double save_grace_s = 0;
  std::vector<std::string> argv;                  ///< worker command line (argv[0] via PATH)
  std::map<std::string, std::string> extra_env;   ///< added to every worker's environment
  int stdout_fd = 1;  ///< where workers' stdout goes (tests point it at a file)
  int stderr_fd = 2;  ///< where workers' stderr and the launcher's error line go
  /// torchelastic's --max-restarts: after a failed launch (a worker died or
  /// failed, a collective timed out) the group is started again, up to this
  /// many times, with FT_RESTART=<attempt> in the workers' environment (ft
  /// run then resumes from the newest complete checkpoint). Never after the
  /// launcher itself was interrupted (SIGINT/SIGTERM).
  int max_restarts = 0;
  /// Where a restarted group resumes, for the restart line, e.g.
  /// "from out/checkpoint-8 (step 8)". Empty function: not said.
  std::function<std::string()> describe_resume;
};

/// How a launch ended.
struct LaunchResult {
  int exit_code = 0;     ///< 0 when every worker exited 0; else non-zero (see below)
  int failed_rank = -1;  ///< global rank of the first worker that failed, -1 if none
  /// One line, e.g. "rank 1 exited with code 3"; empty on success. A worker
  /// still running but stopped (SIGSTOP) when the job failed is added:
  /// "...; rank 2 was stalled (its process is stopped)".
  std::string error;
  bool interrupted = false;  ///< the launcher itself got SIGINT/SIGTERM
  int restarts = 0;          ///< restarts used (launch_and_supervise)
};

/// Starts and supervises the workers; returns when all are gone. exit_code is
/// the failed worker's exit code, 128 + N if it was killed by signal N, 1 if
/// it outlived timeout_s after a peer finished, 128 + N when the launcher
/// itself got SIGINT/SIGTERM N (forwarded to the workers first). Throws ft::Error for bad options or a command that cannot run
/// (before any worker is left behind).
LaunchResult launch_workers(const LaunchOptions& options);

/// launch_workers(), restarted up to options.max_restarts times with one
/// line each on options.stderr_fd, "ft: restart 1/3: <why>; resuming <where>";
/// then, on failure, one line "ft: error: <error>". Returns the exit code
/// for `ft`.
int launch_and_supervise(const LaunchOptions& options);
LaunchResult launch_with_restarts(const LaunchOptions& options);

/// Prints "ft: error: <line>" on stderr, or, in a worker the launcher started
/// (FT_ERROR_FILE set and writable), hands `line` to the launcher instead.
/// `line` must already be one line.
void report_error(const std::string& line);

/// A TCP port nothing listens on right now (bind to port 0, read it back).
int pick_free_port(const std::string& addr);

}  // namespace ft
