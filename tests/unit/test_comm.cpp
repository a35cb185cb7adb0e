// Comm: world-1 semantics in process, multi-rank collectives through the
// launcher (tests/workers/comm_worker.cpp checks exact values on each rank),
// rendezvous errors, and DistEnv parsing.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/comm/device_mesh.h"
#include "ft/comm/dist_env.h"
#include "ft/base/error.h"
#include "ft/comm/launcher.h"
#include "ft_test.h"
#include "ft_workers.h"

namespace {

using ft::ReduceOp;

// A listening socket on a free port, closed at scope exit.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof(sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  ~Listener() { ::close(fd); }
};

ft::DistEnv rank_of(int rank, int world, int port) {
  ft::DistEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_port = port;
  env.source = "torchrun";
  return env;
}

}  // namespace

TEST_CASE("world size 1: collectives are local and give the right values") {
  auto comm = ft::Comm::create(ft::DistEnv{});
  CHECK(comm->rank() == 0);
  CHECK(comm->world_size() == 1);
  CHECK(comm->local_rank() == 0);
  CHECK(comm->local_world_size() == 1);

  auto t = at::tensor(std::vector<float>{1.5f, -2.f, 3.f});
  for (auto op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    comm->all_reduce(t, op);
    CHECK(at::equal(t, at::tensor(std::vector<float>{1.5f, -2.f, 3.f})));
  }
  auto work = comm->all_reduce_async(t);
  CHECK(work.completed());
  work.wait();

  comm->broadcast(t, 0);
  CHECK(at::equal(t, at::tensor(std::vector<float>{1.5f, -2.f, 3.f})));
  CHECK(ft_test::error_of([&] { comm->broadcast(t, 1); }) == "broadcast: root 1 is not a rank of a world of 1");

  std::vector<at::Tensor> gathered;
  comm->all_gather(gathered, t);
  REQUIRE(gathered.size() == 1);
  CHECK(at::equal(gathered[0], t));
  CHECK(gathered[0].data_ptr() != t.data_ptr());

  at::Tensor flat;
  comm->all_gather_flat(flat, at::arange(6, at::kLong).view({2, 3}));
  CHECK(at::equal(flat, at::arange(6, at::kLong)));

  at::Tensor rs;
  comm->reduce_scatter_flat(rs, at::arange(5, at::kFloat), ReduceOp::Avg);
  CHECK(at::equal(rs, at::arange(5, at::kFloat)));

  auto a2a = at::zeros({4}, at::kFloat);
  comm->all_to_all(a2a, at::arange(4, at::kFloat));
  CHECK(at::equal(a2a, at::arange(4, at::kFloat)));

  auto pieces = comm->all_gather_varlen(at::arange(3, at::kLong));
  REQUIRE(pieces.size() == 1);
  CHECK(at::equal(pieces[0], at::arange(3, at::kLong)));

  comm->barrier();
  CHECK(ft_test::error_of([&] { comm->send(t, 0); }) == "send: rank 0 cannot send to rank 0 in a world of 1");
  auto ints = at::arange(3, at::kLong);
  CHECK(ft_test::error_of([&] { comm->all_reduce(ints, ReduceOp::Avg); }) ==
        "all_reduce: Avg needs a floating-point tensor, got Long");
  CHECK(ft_test::error_of([&] {
          at::Tensor out;
          comm->reduce_scatter_flat(out, at::arange(5, at::kFloat));
          comm->all_to_all(out, at::arange(4, at::kFloat));
        }) == "all_to_all: input and output must be Float tensors of the same size, a multiple "
              "of 1 (got 4 and 5)");
  CHECK(comm->failure().empty());
}

// Runs ft_test_comm_worker MODE on `nproc` ranks and checks that every rank
// printed "all N checks passed" with N = `checks`.
static void expect_worker_checks(int nproc, const char* mode, int checks) {
  const auto text =
      ft_test::run_workers("ft_test_comm_worker", nproc, mode, 5, {{"FT_TEST_COMM_TIMEOUT_MS", "10000"}});
  ft_test::expect_all_passed(text, nproc, checks);
}

TEST_CASE("multi-rank collectives are exact on 2 and 4 ranks") {
  for (int nproc : {2, 4}) {
    CAPTURE(nproc);
    expect_worker_checks(nproc, "collectives", 19 + 2 * nproc);  // fixed checks + one all_gather and one varlen per rank
  }
}

TEST_CASE("a device mesh's sub-groups: exact collectives per dimension, members named by job rank") {
  // 4 ranks as {outer: 2, inner: 2}: inner groups {0,1} {2,3}, outer {0,2} {1,3}.
  CHECK(ft::mesh_groups({{"outer", 2}, {"inner", 2}}, 1) == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  CHECK(ft::mesh_groups({{"outer", 2}, {"inner", 2}}, 0) == std::vector<std::vector<int>>{{0, 2}, {1, 3}});
  CHECK(ft::mesh_groups({{"dp", 2}, {"pp", 2}, {"tp", 2}}, 1) ==
        std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  // Per dimension: the collectives of a world of 2, then the group's member check and sum.
  expect_worker_checks(4, "mesh", 2 * (19 + 2 * 2 + 2));
  // A world of one splits into local groups of one; bad partitions name the split.
  auto solo = ft::Comm::create(ft::DistEnv{});
  auto part = solo->split("x", {{0}});
  CHECK((part->world_size() == 1 && part->rank() == 0 && part->job_rank(0) == 0));
  CHECK(ft_test::error_of([&] { solo->split("x", {{0}, {0}}); }) == "comm split 'x': rank 0 is in two groups");
  CHECK(ft_test::error_of([&] { solo->split("x", {{1}}); }) == "comm split 'x': rank 1 is not a rank of a world of 1");
  CHECK(ft_test::error_of([&] { ft::DeviceMesh m(*solo, {{"dp", 2}}, "strategy.options.mesh"); }) ==
        "strategy.options.mesh: the mesh dp 2 holds 2 ranks, the job has 1; make the sizes multiply to the world size");
}

TEST_CASE("rendezvous errors are one clear line") {
  SUBCASE("master port in use") {
    Listener busy;
    auto env = rank_of(0, 2, busy.port);
    ft::CommOptions o;
    o.timeout = std::chrono::milliseconds(500);
    CHECK(ft_test::error_of([&] { ft::Comm::create(env, o); }) ==
          "master port " + std::to_string(busy.port) + " on 127.0.0.1 is in use; pass --master-port");
  }
  SUBCASE("rank 0 alone: names how many joined") {
    const int port = ft::pick_free_port("127.0.0.1");
    ft::CommOptions o;
    // TCPStore's own client retries in ~1 s steps: a shorter timeout would
    // fail inside its connect instead of in ft's count of peers.
    o.timeout = std::chrono::milliseconds(2000);
    auto start = std::chrono::steady_clock::now();
    CHECK(ft_test::error_of([&] { ft::Comm::create(rank_of(0, 3, port), o); }) ==
          "rank 0: rendezvous at 127.0.0.1:" + std::to_string(port) +
              " timed out after 2 s: 1 of 3 ranks joined");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  SUBCASE("rank 1 without a rank 0") {
    const int port = ft::pick_free_port("127.0.0.1");
    ft::CommOptions o;
    o.timeout = std::chrono::milliseconds(400);
    auto start = std::chrono::steady_clock::now();
    const std::string e = ft_test::error_of([&] { ft::Comm::create(rank_of(1, 2, port), o); });
    CHECK(e.rfind("rank 1 could not reach the rendezvous store of rank 0 at 127.0.0.1:" +
                      std::to_string(port) + " within 0.4 s",
                  0) == 0);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
}

TEST_CASE("detect_dist_env: torchrun, OpenMPI, Slurm, single") {
  SUBCASE("torchrun names") {
    auto d = ft::detect_dist_env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                  {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.7"},
                                  {"MASTER_PORT", "1234"}});
    CHECK(d.source == "torchrun");
    CHECK(d.rank == 5);
    CHECK(d.world_size == 8);
    CHECK(d.local_rank == 1);
    CHECK(d.local_world_size == 4);
    CHECK(d.node_rank == 1);
    CHECK(d.master_addr == "10.0.0.7");
    CHECK(d.master_port == 1234);
  }
  SUBCASE("OpenMPI with defaults for the master") {
    auto d = ft::detect_dist_env({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    CHECK(d.source == "openmpi");
    CHECK(d.rank == 3);
    CHECK(d.world_size == 4);
    CHECK(d.local_rank == 1);
    CHECK(d.local_world_size == 2);
    CHECK(d.node_rank == 1);
    CHECK(d.master_addr == "127.0.0.1");
    CHECK(d.master_port == 29500);
  }
  SUBCASE("Slurm with a step task list and the launch node as master") {
    auto d = ft::detect_dist_env({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"},
                                  {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "2"},
                                  {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"},
                                  {"SLURM_LAUNCH_NODE_IPADDR", "192.168.1.9"}});
    CHECK(d.source == "slurm");
    CHECK(d.rank == 6);
    CHECK(d.world_size == 7);
    CHECK(d.local_world_size == 1);
    CHECK(d.node_rank == 2);
    CHECK(d.master_addr == "192.168.1.9");
    CHECK(d.master_port == 29500);
    auto e = ft::detect_dist_env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                                  {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "2"},
                                  {"SLURM_LAUNCH_NODE_IPADDR", "192.168.1.9"},
                                  {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "4000"}});
    CHECK(e.local_world_size == 2);
    CHECK(e.master_addr == "node0");
    CHECK(e.master_port == 4000);
  }
  SUBCASE("nothing set: a single process") {
    auto d = ft::detect_dist_env({{"HOME", "/root"}});
    CHECK(d.source == "single");
    CHECK(d.rank == 0);
    CHECK(d.world_size == 1);
  }
  SUBCASE("bad values name the variable") {
    CHECK(ft_test::error_of([] { ft::detect_dist_env({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}); }) ==
          "environment variable RANK='x1' is not an integer");
    CHECK(ft_test::error_of([] { ft::detect_dist_env({{"RANK", "2"}, {"WORLD_SIZE", "2"}}); }) ==
          "environment variable RANK=2 is not below WORLD_SIZE=2");
    CHECK(ft_test::error_of([] { ft::detect_dist_env({{"RANK", "0"}}); }) ==
          "environment variable WORLD_SIZE is not set (RANK is)");
    CHECK(ft_test::error_of([] {
            ft::detect_dist_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
          }) == "environment variable MASTER_PORT=70000 is not a TCP port (1-65535)");
    CHECK(ft_test::error_of([] {
            ft::detect_dist_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
          }) == "environment variable OMPI_COMM_WORLD_LOCAL_RANK=3 is not below "
                "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    CHECK(ft_test::error_of([] {
            ft::detect_dist_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                 {"SLURM_STEP_TASKS_PER_NODE", "2(x"}});
          }) == "environment variable SLURM_STEP_TASKS_PER_NODE='2(x' is malformed");
  }
}
