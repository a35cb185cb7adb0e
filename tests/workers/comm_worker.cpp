// ft_test_comm_worker: one rank of the multi-process Comm/launcher tests.
//
// Usage: ft_test_comm_worker MODE [RANK]
//   collectives   check every Comm collective against exact expected values;
//                 exit 0 only if all match
//   echo          print two stdout lines and one stderr line (no newline), exit 0
//   exit3 R       rank R exits 3 after joining; the others sleep until stopped
//   sigkill R     rank R kills itself with SIGKILL; the others sleep until stopped
//   die R         rank R exits 3 after joining; the others are in all_reduce
//   hang R        rank R sleeps without ever joining a collective; the others
//                 all_reduce and must fail on the Comm timeout
//   mesh          a DeviceMesh {outer: 2, inner: world/2}: every check of
//                 `collectives` on each dimension's Comm, and each group's
//                 members named right (all_reduce of the job ranks)
//   mesh_hang R   the same mesh; rank R then sleeps, the others all_reduce
//                 over `inner`: R's group partners fail, naming rank R
// In die/hang, a rank whose all_reduce failed exits 2 after checking that the
// Comm refuses further calls (5 if it does not).
// Rank facts come from the environment (the launcher's torchrun names); the
// Comm timeout from FT_TEST_COMM_TIMEOUT_MS (default 5000).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/comm/device_mesh.h"
#include "ft/comm/dist_env.h"
#include "ft/base/error.h"
#include "ft/comm/launcher.h"

namespace {

int g_failures = 0;
int g_checks = 0;

void expect_equal(int rank, const std::string& name, const at::Tensor& got, const at::Tensor& want) {
  ++g_checks;
  if (got.scalar_type() == want.scalar_type() && got.sizes() == want.sizes() &&
      at::equal(got, want)) {
    return;
  }
  ++g_failures;
  std::ostringstream os;
  os << "rank " << rank << ": check '" << name << "' failed\n got: " << got << "\n want: " << want
     << "\n";
  std::cerr << os.str();
}

at::Tensor f32(std::initializer_list<float> v) { return at::tensor(std::vector<float>(v)); }

void check_collectives(ft::Comm& comm) {
  const int r = comm.rank();
  const int w = comm.world_size();
  const auto F = at::TensorOptions().dtype(at::kFloat);
  const auto L = at::TensorOptions().dtype(at::kLong);

  auto t = at::full({5}, r + 1.0, F);
  comm.all_reduce(t, ft::ReduceOp::Sum);
  expect_equal(r, "all_reduce sum", t, at::full({5}, w * (w + 1) / 2.0, F));

  t = at::arange(4, F) * (r + 1);
  comm.all_reduce(t, ft::ReduceOp::Avg);
  expect_equal(r, "all_reduce avg", t, at::arange(4, F) * ((w + 1) / 2.0));

  t = f32({float(r), float(-r)});
  comm.all_reduce(t, ft::ReduceOp::Max);
  expect_equal(r, "all_reduce max", t, f32({float(w - 1), 0.f}));
  t = f32({float(r), float(-r)});
  comm.all_reduce(t, ft::ReduceOp::Min);
  expect_equal(r, "all_reduce min", t, f32({0.f, float(-(w - 1))}));

  auto li = at::full({3}, int64_t(1) << 40, L) + r;
  comm.all_reduce(li);
  expect_equal(r, "all_reduce int64", li, at::full({3}, (int64_t(w) << 40) + w * (w - 1) / 2, L));

  // bf16 travels as fp32 on Gloo; the caller still sees bf16.
  auto b = at::full({4}, r + 0.5, F).to(at::kBFloat16);
  comm.all_reduce(b);
  expect_equal(r, "all_reduce bf16", b, at::full({4}, w * w / 2.0, F).to(at::kBFloat16));

  // A non-contiguous view is reduced in place in its base.
  auto base = at::zeros({3, 4}, F);
  base.fill_(r);
  auto column = base.select(1, 2);
  comm.all_reduce(column);
  auto want_base = at::full({3, 4}, double(r), F);
  want_base.select(1, 2).fill_(w * (w - 1) / 2.0);
  expect_equal(r, "all_reduce non-contiguous", base, want_base);

  // Two in flight at once.
  auto a1 = at::full({2}, 1.0, F), a2 = at::full({2}, double(r), F);
  auto w1 = comm.all_reduce_async(a1);
  auto w2 = comm.all_reduce_async(a2, ft::ReduceOp::Max);
  w2.wait();
  w1.wait();
  expect_equal(r, "async overlap 1", a1, at::full({2}, double(w), F));
  expect_equal(r, "async overlap 2", a2, at::full({2}, double(w - 1), F));

  const int root = w - 1;
  t = at::full({3}, r * 10.0, F);
  comm.broadcast(t, root);
  expect_equal(r, "broadcast", t, at::full({3}, root * 10.0, F));

  std::vector<at::Tensor> gathered;
  comm.all_gather(gathered, at::full({2, 3}, double(r), F));
  for (int i = 0; i < w; ++i) {
    expect_equal(r, "all_gather[" + std::to_string(i) + "]", gathered[size_t(i)],
                 at::full({2, 3}, double(i), F));
  }

  // 7 elements per rank: a flat size that no power of two divides.
  const int64_t n = 7;
  at::Tensor flat;
  comm.all_gather_flat(flat, at::arange(n, F) + 100 * r);
  std::vector<float> want_flat;
  for (int i = 0; i < w; ++i) {
    for (int j = 0; j < n; ++j) want_flat.push_back(float(100 * i + j));
  }
  expect_equal(r, "all_gather_flat", flat, at::tensor(want_flat));

  at::Tensor flat_bf;
  comm.all_gather_flat(flat_bf, (at::arange(n, F) + 10 * r).to(at::kBFloat16));
  std::vector<float> want_bf;
  for (int i = 0; i < w; ++i) {
    for (int j = 0; j < n; ++j) want_bf.push_back(float(10 * i + j));
  }
  expect_equal(r, "all_gather_flat bf16", flat_bf, at::tensor(want_bf).to(at::kBFloat16));

  // in[k] = k + r on every rank; this rank owns elements [r*m, (r+1)*m).
  const int64_t m = 5;
  auto in = at::arange(w * m, F) + r;
  auto own = at::arange(r * m, (r + 1) * m, F);
  at::Tensor rs;
  comm.reduce_scatter_flat(rs, in, ft::ReduceOp::Sum);
  expect_equal(r, "reduce_scatter sum", rs, own * w + w * (w - 1) / 2.0);
  at::Tensor rs_avg;
  comm.reduce_scatter_flat(rs_avg, in, ft::ReduceOp::Avg);
  expect_equal(r, "reduce_scatter avg", rs_avg, own + (w - 1) / 2.0);
  at::Tensor rs_max;
  comm.reduce_scatter_flat(rs_max, in, ft::ReduceOp::Max);
  expect_equal(r, "reduce_scatter max", rs_max, own + (w - 1));
  auto rs_bf = at::empty({m}, F.dtype(at::kBFloat16));
  comm.reduce_scatter_flat(rs_bf, in.to(at::kBFloat16), ft::ReduceOp::Sum);
  expect_equal(r, "reduce_scatter bf16", rs_bf, (own * w + w * (w - 1) / 2.0).to(at::kBFloat16));

  // Chunk j of rank i's input is [100i + 2j, 100i + 2j + 1]; rank r receives chunk r of each.
  auto a2a_in = at::arange(2 * w, F) + 100 * r;
  auto a2a_out = at::empty({2 * w}, F);
  comm.all_to_all(a2a_out, a2a_in);
  std::vector<float> want_a2a;
  for (int i = 0; i < w; ++i) {
    want_a2a.push_back(float(100 * i + 2 * r));
    want_a2a.push_back(float(100 * i + 2 * r + 1));
  }
  expect_equal(r, "all_to_all", a2a_out, at::tensor(want_a2a));

  // Ring: send to the next rank, receive from the previous one.
  if (w > 1) {
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    auto sent = at::full({6}, r * 2 + 1.0, F).to(at::kBFloat16);
    auto got = at::empty({6}, F.dtype(at::kBFloat16));
    auto send_work = comm.send_async(sent, next, 7);
    comm.recv(got, prev, 7);
    send_work.wait();
    expect_equal(r, "send/recv ring", got, at::full({6}, prev * 2 + 1.0, F).to(at::kBFloat16));
  }

  auto pieces = comm.all_gather_varlen(at::arange(r + 1, L) + 10 * r);
  ++g_checks;
  if (pieces.size() != size_t(w)) {
    ++g_failures;
    std::cerr << "rank " << r << ": all_gather_varlen returned " << pieces.size() << " pieces\n";
  } else {
    for (int i = 0; i < w; ++i) {
      expect_equal(r, "all_gather_varlen[" + std::to_string(i) + "]", pieces[size_t(i)],
                   at::arange(i + 1, L) + 10 * i);
    }
  }

  comm.barrier();
}

// The job ranks of `dim`'s group holding `rank`, summed, against an
// all_reduce of each member's job rank over that group's Comm.
void check_mesh_group(ft::DeviceMesh& mesh, const std::string& dim, int rank) {
  ft::Comm& c = mesh.comm(dim);
  float want = 0;
  for (const auto& g : mesh.groups(dim)) {
    if (std::find(g.begin(), g.end(), rank) == g.end()) continue;
    for (int m : g) want += float(m);
    ++g_checks;
    if (c.job_rank(c.rank()) != rank || c.world_size() != static_cast<int>(g.size())) {
      ++g_failures;
      std::cerr << "rank " << rank << ": mesh " << dim << " places it at " << c.rank() << " of " << c.world_size()
                << "\n";
    }
  }
  auto t = at::full({1}, float(rank));
  c.all_reduce(t);
  expect_equal(rank, "mesh " + dim + " group sum", t, at::full({1}, want));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const int target = argc > 2 ? std::atoi(argv[2]) : 1;
  try {
    ft::DistEnv env = ft::detect_dist_env(ft::process_env());
    if (mode == "echo") {
      const char* launched = std::getenv("FT_LAUNCHED");
      const char* extra = std::getenv("FT_TEST_EXTRA");
      std::printf("hello from %d of %d launched=%s extra=%s\nsecond line %d\n", env.rank,
                  env.world_size, launched ? launched : "-", extra ? extra : "-", env.rank);
      std::fflush(stdout);
      std::fprintf(stderr, "err from %d", env.rank);  // no newline: the relay adds one
      return 0;
    }
    ft::CommOptions options;
    if (const char* ms = std::getenv("FT_TEST_COMM_TIMEOUT_MS")) {
      options.timeout = std::chrono::milliseconds(std::atoi(ms));
    } else {
      options.timeout = std::chrono::milliseconds(5000);
    }
    auto comm = ft::Comm::create(env, options);
    if (mode == "collectives") {
      check_collectives(*comm);
      if (g_failures > 0) {
        std::cerr << "rank " << env.rank << ": " << g_failures << " of " << g_checks
                  << " checks failed\n";
        return 1;
      }
      std::cout << "rank " << env.rank << ": all " << g_checks << " checks passed\n";
      return 0;
    }
    if (mode == "mesh" || mode == "mesh_hang") {
      ft::DeviceMesh mesh(*comm, {{"outer", 2}, {"inner", env.world_size / 2}}, "test mesh");
      if (mode == "mesh_hang") {
        if (env.rank == target) {
          for (;;) ::pause();
        }
        auto t = at::ones({4});
        mesh.comm("inner").all_reduce(t);
        // The other group is done; it waits, as in a job, for the next
        // collective (rank 0 keeps hosting the store the stall report reads).
        for (;;) ::pause();
      }
      for (const char* dim : {"inner", "outer"}) {
        check_collectives(mesh.comm(dim));
        check_mesh_group(mesh, dim, env.rank);
      }
      if (g_failures > 0) return 1;
      std::cout << "rank " << env.rank << ": all " << g_checks << " checks passed\n";
      return 0;
    }
    const bool sleep_until_stopped =
        (mode == "exit3" || mode == "sigkill") ? env.rank != target : mode == "hang" && env.rank == target;
    if (sleep_until_stopped) {
      for (;;) ::pause();
    }
    if (env.rank == target && (mode == "exit3" || mode == "die")) return 3;
    if (env.rank == target && mode == "sigkill") ::raise(SIGKILL);
    auto t = at::ones({4});
    try {
      comm->all_reduce(t);
      comm->all_reduce(t);  // a second round: the dead peer cannot have joined it
    } catch (const ft::Error& e) {
      // The failure must poison the Comm: the next call throws at once.
      const std::string first = e.what();
      try {
        comm->barrier();
      } catch (const ft::Error& again) {
        if (std::string(again.what()).find("refused: the process group failed earlier") ==
                std::string::npos ||
            comm->failure() != first) {
          std::cerr << "rank " << env.rank << ": unexpected second error: " << again.what() << "\n";
          return 5;
        }
        ft::report_error(first);
        return 2;
      }
      std::cerr << "rank " << env.rank << ": barrier after a failed collective succeeded\n";
      return 5;
    }
    std::cerr << "rank " << env.rank << ": all_reduce unexpectedly succeeded\n";
    return 4;
  } catch (const ft::Error& e) {
    ft::report_error(e.what());
    return 2;
  }
}
