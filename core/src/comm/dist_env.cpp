#include "ft/comm/dist_env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <vector>

#include "ft/base/error.h"

extern char** environ;

namespace ft {
namespace {

using Env = std::map<std::string, std::string>;

std::optional<std::string> lookup(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// Whole-string decimal parse; anything else is the user's mistake, named by variable.
int parse_int(const std::string& name, const std::string& value) {
  const char* begin = value.c_str();
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(begin, &end, 10);
  if (value.empty() || end == begin || *end != '\0' || errno == ERANGE || v < INT_MIN ||
      v > INT_MAX) {
    fail("environment variable {}='{}' is not an integer", name, value);
  }
  return static_cast<int>(v);
}

std::optional<int> lookup_int(const Env& env, const std::string& name) {
  auto v = lookup(env, name);
  if (!v) return std::nullopt;
  return parse_int(name, *v);
}

int require_int(const Env& env, const std::string& name, const std::string& because) {
  auto v = lookup_int(env, name);
  if (!v) fail("environment variable {} is not set ({} is)", name, because);
  return *v;
}

// Slurm writes tasks per node as "2(x3),1": 2 tasks on each of 3 nodes, then 1.
std::vector<int> expand_tasks_per_node(const std::string& name, const std::string& value) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    std::string item = value.substr(pos, comma == std::string::npos ? std::string::npos
                                                                      : comma - pos);
    int repeat = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') fail("environment variable {}='{}' is malformed", name, value);
      repeat = parse_int(name, item.substr(paren + 2, item.size() - paren - 3));
      item = item.substr(0, paren);
    }
    int count = parse_int(name, item);
    for (int i = 0; i < repeat; ++i) out.push_back(count);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void read_master(const Env& env, DistEnv& d, const std::optional<std::string>& fallback_addr) {
  if (auto addr = lookup(env, "MASTER_ADDR"); addr && !addr->empty()) {
    d.master_addr = *addr;
  } else if (fallback_addr && !fallback_addr->empty()) {
    d.master_addr = *fallback_addr;
  }
  if (auto port = lookup_int(env, "MASTER_PORT")) d.master_port = *port;
}

void validate(const DistEnv& d, const char* rank_var, const char* world_var,
              const char* local_rank_var, const char* local_world_var) {
  if (d.world_size < 1) fail("environment variable {}={} must be at least 1", world_var, d.world_size);
  if (d.rank < 0 || d.rank >= d.world_size) {
    fail("environment variable {}={} is not below {}={}", rank_var, d.rank, world_var,
         d.world_size);
  }
  if (d.local_world_size < 1 || d.local_world_size > d.world_size) {
    fail("environment variable {}={} must be between 1 and {}={}", local_world_var,
         d.local_world_size, world_var, d.world_size);
  }
  if (d.local_rank < 0 || d.local_rank >= d.local_world_size) {
    fail("environment variable {}={} is not below {}={}", local_rank_var, d.local_rank,
         local_world_var, d.local_world_size);
  }
  if (d.master_port < 1 || d.master_port > 65535) {
    fail("environment variable MASTER_PORT={} is not a TCP port (1-65535)", d.master_port);
  }
  if (d.node_rank < 0) fail("node rank {} is negative", d.node_rank);
}

DistEnv from_torchrun(const Env& env) {
  DistEnv d;
  d.source = "torchrun";
  d.rank = require_int(env, "RANK", "RANK");
  d.world_size = require_int(env, "WORLD_SIZE", "RANK");
  d.local_world_size = lookup_int(env, "LOCAL_WORLD_SIZE").value_or(d.world_size);
  if (d.local_world_size < 1) {
    fail("environment variable LOCAL_WORLD_SIZE={} must be at least 1", d.local_world_size);
  }
  d.local_rank = lookup_int(env, "LOCAL_RANK").value_or(d.rank % d.local_world_size);
  d.node_rank = lookup_int(env, "GROUP_RANK").value_or(d.rank / d.local_world_size);
  read_master(env, d, std::nullopt);
  validate(d, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  return d;
}

DistEnv from_openmpi(const Env& env) {
  DistEnv d;
  d.source = "openmpi";
  d.rank = require_int(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK");
  d.world_size = require_int(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK");
  d.local_rank = lookup_int(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
  d.local_world_size = lookup_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
  if (d.local_world_size < 1) {
    fail("environment variable OMPI_COMM_WORLD_LOCAL_SIZE={} must be at least 1",
         d.local_world_size);
  }
  d.node_rank = lookup_int(env, "OMPI_COMM_WORLD_NODE_RANK").value_or(d.rank / d.local_world_size);
  read_master(env, d, std::nullopt);
  validate(d, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
           "OMPI_COMM_WORLD_LOCAL_SIZE");
  return d;
}

DistEnv from_slurm(const Env& env) {
  DistEnv d;
  d.source = "slurm";
  d.rank = require_int(env, "SLURM_PROCID", "SLURM_PROCID");
  d.world_size = require_int(env, "SLURM_NTASKS", "SLURM_PROCID");
  d.local_rank = lookup_int(env, "SLURM_LOCALID").value_or(0);
  d.node_rank = lookup_int(env, "SLURM_NODEID").value_or(0);
  const char* local_var = "SLURM_NTASKS_PER_NODE";
  auto per_node = lookup(env, local_var);
  if (!per_node) {
    local_var = "SLURM_STEP_TASKS_PER_NODE";
    per_node = lookup(env, local_var);
  }
  if (per_node) {
    auto counts = expand_tasks_per_node(local_var, *per_node);
    size_t index = counts.size() == 1 ? 0 : static_cast<size_t>(d.node_rank);
    if (d.node_rank < 0 || index >= counts.size()) {
      fail("environment variable SLURM_NODEID={} has no entry in {}='{}'", d.node_rank,
           local_var, *per_node);
    }
    d.local_world_size = counts[index];
  }
  read_master(env, d, lookup(env, "SLURM_LAUNCH_NODE_IPADDR"));
  validate(d, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", local_var);
  return d;
}

}  // namespace

std::map<std::string, std::string> process_env() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

DistEnv detect_dist_env(const std::map<std::string, std::string>& env) {
  if (env.count("RANK") || env.count("WORLD_SIZE")) return from_torchrun(env);
  if (env.count("OMPI_COMM_WORLD_RANK") || env.count("OMPI_COMM_WORLD_SIZE")) {
    return from_openmpi(env);
  }
  if (env.count("SLURM_PROCID") && env.count("SLURM_NTASKS")) return from_slurm(env);
  DistEnv d;
  read_master(env, d, std::nullopt);
  validate(d, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  return d;
}

}  // namespace ft
