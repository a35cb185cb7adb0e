// Comm: rendezvous, group construction, Work handles and failure tracking.
// The collectives themselves are in comm_ops.cpp.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include <ATen/Context.h>
#include <fmt/ranges.h>

#include "comm_internal.h"
#include "ft/base/error.h"
#include "rendezvous_store.h"

namespace ft {

std::string first_line(const std::string& text) {
  auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

// ---------------------------------------------------------------- Work

Work::Work() = default;
Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
Work::~Work() = default;
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;

bool Work::completed() const {
  if (!state_ || state_->done) return true;
  if (state_->job.valid() && state_->job.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  for (const auto& w : state_->works) {
    if (!w->isCompleted()) return false;
  }
  return true;
}

namespace {

// A collective that failed in wait(): named after the rank that kept it from
// completing when the stall report can tell, else after the cause.
[[noreturn]] void fail_collective(Work::State& s, const std::exception& e) {
  std::string why = stall_message(s);
  if (why.empty()) {
    why = fmt::format("rank {}: {} failed (a peer exited or the {} s timeout passed): {}", s.health->rank, s.what,
                      s.timeout.count() / 1000.0, first_line(e.what()));
  }
  s.health->set(why);
  throw Error(why);
}

}  // namespace

void Work::wait() {
  if (!state_) return;
  State& s = *state_;
  if (s.done) {
    if (s.error) std::rethrow_exception(s.error);
    return;
  }
  s.done = true;
  try {
    if (s.job.valid()) {
      try {
        wait_job_sliced(s);
        s.job.get();
      } catch (const std::exception& e) {
        fail_collective(s, e);
      }
    }
    for (auto& w : s.works) {
      try {
        wait_sliced(s, *w);
      } catch (const std::exception& e) {
        fail_collective(s, e);
      }
    }
    if (s.finish) s.finish();
  } catch (const Error&) {
    s.error = std::current_exception();
    throw;
  } catch (const std::exception& e) {
    s.error = std::make_exception_ptr(
        Error(fmt::format("rank {}: {}: {}", s.health->rank, s.what, first_line(e.what()))));
    std::rethrow_exception(s.error);
  }
}

// ---------------------------------------------------------------- rendezvous

namespace {

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  const bool server = env.rank == 0;
  try {
    // Not c10d::TCPStore: it listens on every interface (rendezvous_store.h).
    return c10::make_intrusive<RendezvousStore>(env.master_addr, env.master_port, server, timeout);
  } catch (const std::exception& e) {
    std::string msg = first_line(e.what());
    if (server) {
      if (msg.find("in use") != std::string::npos) {
        fail("master port {} on {} is in use; pass --master-port", env.master_port,
             env.master_addr);
      }
      fail("rank 0 could not start the rendezvous store on {}:{}: {}", env.master_addr,
           env.master_port, msg);
    }
    fail("rank {} could not reach the rendezvous store of rank 0 at {}:{} within {} s "
         "(is rank 0 running, are MASTER_ADDR/MASTER_PORT right?): {}",
         env.rank, env.master_addr, env.master_port, timeout.count() / 1000.0, msg);
  }
}

// Every rank counts itself in and waits for the rest, so a missing rank is
// reported with how many made it instead of an opaque store timeout.
void wait_for_peers(c10d::Store& store, const DistEnv& env, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int64_t joined = 0;
  try {
    joined = store.add("ft/joined", 1);
    while (joined < env.world_size) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      joined = store.add("ft/joined", 0);
    }
  } catch (const std::exception& e) {
    fail("rank {}: lost the rendezvous store at {}:{} while waiting for peers: {}", env.rank,
         env.master_addr, env.master_port, first_line(e.what()));
  }
  if (joined < env.world_size) {
    fail("rank {}: rendezvous at {}:{} timed out after {} s: {} of {} ranks joined", env.rank,
         env.master_addr, env.master_port, timeout.count() / 1000.0, joined, env.world_size);
  }
}

// The local address this host's packets to `addr` leave from (a UDP
// connect sends nothing): the interface the other hosts can reach us on.
std::string local_address_towards(const DistEnv& env) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(env.master_addr.c_str(), "9", &hints, &res) != 0 || res == nullptr) {
    fail("rank {}: cannot resolve the master address {}", env.rank, env.master_addr);
  }
  const int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  const bool ok = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  char host[NI_MAXHOST] = {0};
  if (!ok || ::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
    fail("rank {}: no route from this host to the master address {}; set GLOO_SOCKET_IFNAME to the interface to use",
         env.rank, env.master_addr);
  }
  return host;
}

std::shared_ptr<::gloo::transport::Device> gloo_device(const DistEnv& env,
                                                       const CommOptions& options) {
  if (!options.network_interface.empty()) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(options.network_interface);
  }
  if (is_loopback(env.master_addr) || env.local_world_size == env.world_size) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  // Not the host name: Debian maps it to 127.0.1.1, which no other host reaches.
  return c10d::ProcessGroupGloo::createDeviceForHostname(local_address_towards(env));
}

// `job`: the launcher's env, which picks the network device; `rank` and
// `size` place this process in the group being built.
c10::intrusive_ptr<compat::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& job,
                                              int rank, int size, const CommOptions& options) {
  auto opts = c10d::ProcessGroupGloo::Options::create(options.timeout);
  opts->devices.push_back(gloo_device(job, options));
  // Two threads let an async bucket all-reduce overlap with the next one.
  opts->threads = 2;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("ft/gloo", store);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, opts);
}

c10::intrusive_ptr<compat::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              const CommOptions& options) {
#if FT_HAVE_NCCL
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = options.timeout;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("ft/nccl", store);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, size, opts);
#else
  (void)store;
  (void)rank;
  (void)size;
  (void)options;
  return {};
#endif
}

// The backends of one Comm over `store`, as CommOptions::backend asks.
std::unique_ptr<CommGroups> connect_groups(c10::intrusive_ptr<c10d::Store> store, const DistEnv& job, int rank,
                                           int size, const CommOptions& options, const std::string& what) {
  auto groups = std::make_unique<CommGroups>();
  groups->store = std::move(store);
  const char* building = "gloo";
  try {
    if (options.backend != CommBackend::Nccl) groups->gloo = make_gloo(groups->store, job, rank, size, options);
    building = "nccl";
    if (options.backend != CommBackend::Gloo && FT_HAVE_NCCL && at::hasCUDA()) {
      groups->nccl = make_nccl(groups->store, rank, size, options);
    }
  } catch (const std::exception& e) {
    fail("rank {}: connecting the {} group{} over {}:{} failed: {}", job.rank, building, what, job.master_addr,
         job.master_port, first_line(e.what()));
  }
  return groups;
}

}  // namespace

// ---------------------------------------------------------------- Comm

Comm::Comm(DistEnv env, CommOptions options)
    : env_(std::move(env)), options_(options), health_(std::make_shared<CommHealth>()), job_env_(env_) {
  health_->rank = health_->index = env_.rank;
}

int Comm::job_rank(int r) const { return health_->job_rank(r); }

Comm::~Comm() {
  if (!groups_ || health_->get().empty()) return;
  // A failed group may still have a Gloo thread blocked on a dead peer, and
  // ~ProcessGroupGloo joins its threads: that could outlast the timeout the
  // job promises. The process is about to exit anyway, so let it go.
  (void)groups_->gloo.release();
  (void)groups_->nccl.release();
  (void)groups_.release();
  // The ring thread may be blocked on the same dead peer, and its queued
  // jobs would use this Comm: they are dropped and the thread left to end.
  abandon_ring_worker(ring_.release());
}

std::string Comm::failure() const { return health_->get(); }

std::unique_ptr<Comm> Comm::create(const DistEnv& env, const CommOptions& options) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    fail("invalid rank {} for world size {}", env.rank, env.world_size);
  }
  if (options.timeout.count() <= 0) fail("comm timeout must be positive");
  const bool cuda = at::hasCUDA();
  if (options.backend == CommBackend::Nccl && !(FT_HAVE_NCCL && cuda)) {
    fail("backend nccl needs a LibTorch built with NCCL and a visible GPU ({}); use gloo",
         FT_HAVE_NCCL ? "no GPU is visible" : "this LibTorch has no NCCL");
  }
  std::unique_ptr<Comm> comm(new Comm(env, options));
  if (env.world_size == 1) return comm;

  auto store = connect_store(env, options.timeout);
  wait_for_peers(*store, env, options.timeout);
  auto groups = connect_groups(std::move(store), env, env.rank, env.world_size, options, "");
  comm->health_->world_size = env.world_size;
  comm->health_->store = groups->store;
  comm->groups_ = std::move(groups);
  return comm;
}

std::unique_ptr<Comm> Comm::split(const std::string& name, const std::vector<std::vector<int>>& groups) {
  std::vector<int> owner(static_cast<size_t>(world_size()), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) fail("comm split '{}': group {} is empty", name, g);
    for (int r : groups[g]) {
      if (r < 0 || r >= world_size()) fail("comm split '{}': rank {} is not a rank of a world of {}", name, r, world_size());
      if (owner[static_cast<size_t>(r)] >= 0) fail("comm split '{}': rank {} is in two groups", name, r);
      owner[static_cast<size_t>(r)] = static_cast<int>(g);
    }
  }
  for (int r = 0; r < world_size(); ++r) {
    if (owner[static_cast<size_t>(r)] < 0) fail("comm split '{}': rank {} is in no group", name, r);
  }
  const int g = owner[static_cast<size_t>(rank())];
  const std::vector<int>& members = groups[static_cast<size_t>(g)];
  const int position = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());

  DistEnv env = env_;
  env.rank = position;
  env.world_size = static_cast<int>(members.size());
  // Members on this host (job ranks are laid out host by host).
  const int per_host = std::max(1, job_env_.local_world_size);
  env.local_rank = env.local_world_size = 0;
  for (int m : members) {
    if (job_rank(m) / per_host != job_env_.rank / per_host) continue;
    if (m == rank()) env.local_rank = env.local_world_size;
    ++env.local_world_size;
  }
  std::unique_ptr<Comm> sub(new Comm(env, options_));
  sub->job_env_ = job_env_;
  sub->health_->rank = health_->rank;
  sub->health_->index = position;
  for (int m : members) sub->health_->members.push_back(job_rank(m));
  if (members.size() == 1) return sub;

  if (!groups_) fail("comm split '{}': a group of {} ranks in a world of one", name, members.size());
  // Each group rendezvouses under its own prefix: groups never wait for one
  // another, and their stall-report posts stay apart.
  auto store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("ft/sub/{}/{}", name, g), groups_->store);
  auto sub_groups = connect_groups(store, job_env_, position, env.world_size, options_,
                                   fmt::format(" '{}' (job ranks {})", name, fmt::join(sub->health_->members, ",")));
  sub->health_->world_size = env.world_size;
  sub->health_->store = sub_groups->store;
  sub->groups_ = std::move(sub_groups);
  return sub;
}

}  // namespace ft
