// Who am I in the job: rank facts read from the launcher's environment.
//
// A worker may be started by `ft run` or torchrun (torchrun's variable names),
// by `mpirun` (OpenMPI's OMPI_COMM_WORLD_*), by Slurm's `srun` (SLURM_*), or
// alone. detect_dist_env() reads whichever is there, in that order of
// preference, and checks it; Comm::create() then joins the rendezvous at
// master_addr:master_port.
#pragma once

#include <map>
#include <string>

namespace ft {

/// The rank facts of this process. Invariants after detect_dist_env():
/// 0 <= rank < world_size, 0 <= local_rank < local_world_size <= world_size,
/// 1 <= master_port <= 65535.
struct DistEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;  ///< rank / local_world_size when not given explicitly (GROUP_RANK)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  ///< "torchrun", "openmpi", "slurm" or "single"
};

/// The current process environment as a map (what detect_dist_env() reads).
std::map<std::string, std::string> process_env();

/// Reads the rank facts from `env` (pass process_env() in production, a map in tests).
///
/// Preference: torchrun names (RANK + WORLD_SIZE; also what `ft run` sets),
/// then OpenMPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), then Slurm
/// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or
/// SLURM_STEP_TASKS_PER_NODE), else a single process. MASTER_ADDR/MASTER_PORT
/// win when set; otherwise Slurm uses SLURM_LAUNCH_NODE_IPADDR, and the
/// default is 127.0.0.1:29500.
///
/// Throws ft::Error naming the variable when a value does not parse as an
/// integer or breaks an invariant (e.g. "RANK=4 is not below WORLD_SIZE=4").
DistEnv detect_dist_env(const std::map<std::string, std::string>& env);

}  // namespace ft
