// ft_test_hvd_worker: one rank of the ring all-reduce / tensor fusion tests.
//
// Usage: ft_test_hvd_worker MODE    (rank facts from the launcher's env)
//   ring     ring_allreduce on uneven sizes (0, 1, fewer elements than ranks,
//            1001), Sum and Avg, fp32/fp64 exact values and exact bytes sent;
//            fp16 wire: half the bytes, bit-identical on every rank, close
//            to the exact sum
//   fusion   TensorFusion grouping (fusion_groups), copies through the fusion
//            buffer for scattered tensors, zero-copy for adjacent ones, and
//            negotiation when ranks enqueue at different speeds
//   all      ring, then fusion
//   options  (one process, no Comm) HorovodOptions::parse values and errors
// Prints "rank R: all N checks passed" and exits 0, or names each failed
// check on stderr and exits 1.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/comm/dist_env.h"
#include "ft/base/error.h"
#include "ring.h"
#include "fusion.h"
#include "horovod_options.h"

namespace {

int g_failures = 0;
int g_checks = 0;

void check(int rank, bool ok, const std::string& name) {
  ++g_checks;
  if (ok) return;
  ++g_failures;
  std::cerr << "rank " << rank << ": check '" << name << "' failed\n";
}

// rank-dependent values that sum exactly in fp32: (r+1)(i+1) + r/4
at::Tensor ramp(int64_t n, int rank, at::ScalarType dtype) {
  return (at::arange(1, n + 1, at::kDouble) * (rank + 1) + 0.25 * rank).to(dtype);
}

at::Tensor ramp_sum(int64_t n, int world, at::ScalarType dtype) {
  return (at::arange(1, n + 1, at::kDouble) * (world * (world + 1) / 2.0) + 0.25 * world * (world - 1) / 2.0).to(dtype);
}

// Same bits on every rank?
bool identical_everywhere(ft::Comm& comm, const at::Tensor& t) {
  std::vector<at::Tensor> all;
  comm.all_gather(all, t.contiguous());
  for (const auto& a : all)
    if (!at::equal(a, all[0])) return false;
  return true;
}

void check_ring(ft::Comm& comm) {
  const int r = comm.rank();
  const int w = comm.world_size();
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(2), int64_t(3), int64_t(5), int64_t(1001)}) {
    for (auto op : {ft::ReduceOp::Sum, ft::ReduceOp::Avg}) {
      const std::string name = "ring n=" + std::to_string(n) + (op == ft::ReduceOp::Sum ? " sum" : " avg");
      at::Tensor t = ramp(n, r, at::kFloat);
      ft::horovod::RingOptions o;
      o.op = op;
      const ft::horovod::RingTraffic traffic = ft::horovod::ring_allreduce(comm, t, o);
      at::Tensor want = ramp_sum(n, w, at::kFloat);
      if (op == ft::ReduceOp::Avg) want = want / static_cast<float>(w);
      check(r, at::equal(t, want), name + " values");
      // ft::Ring's schedule: rank r sends every chunk but its own (r) in
      // reduce-scatter and every chunk but (r+1) in all-gather, and receives
      // every chunk but (r-1), then every chunk but r: 2(N-1)/N of the
      // tensor each way when the chunks are even.
      const auto sizes = ft::ring_chunk_sizes(n, w);
      const int64_t elems = 2 * n - sizes[r] - sizes[(r + 1) % w];
      check(r, traffic.bytes_sent == 4 * elems, name + " bytes sent " + std::to_string(traffic.bytes_sent));
      const int64_t in_elems = 2 * n - sizes[(r + w - 1) % w] - sizes[r];
      check(r, traffic.bytes_received == 4 * in_elems, name + " bytes received");
      int messages = 0;
      for (int c = 0; c < w; ++c) {
        if (c != r && sizes[c] > 0) ++messages;
        if (c != (r + 1) % w && sizes[c] > 0) ++messages;
      }
      check(r, traffic.messages_sent == messages, name + " messages");
    }
  }
  {
    at::Tensor t = ramp(7, r, at::kDouble);
    ft::horovod::RingOptions o;
    o.op = ft::ReduceOp::Sum;
    ft::horovod::ring_allreduce(comm, t, o);
    check(r, at::equal(t, ramp_sum(7, w, at::kDouble)), "ring fp64 sum");
  }
  {
    // fp16 on the wire: thirds and tenths are not representable, so rounding shows.
    const int64_t n = 1001;
    at::Tensor t = at::arange(1, n + 1, at::kFloat) / 3.0f * static_cast<float>(r + 1) + 0.1f;
    ft::horovod::RingOptions o;
    o.wire = at::kHalf;
    const ft::horovod::RingTraffic traffic = ft::horovod::ring_allreduce(comm, t, o);
    const auto sizes = ft::ring_chunk_sizes(n, w);
    check(r, traffic.bytes_sent == 2 * (2 * n - sizes[r] - sizes[(r + 1) % w]), "fp16 wire: half the bytes");
    const at::Tensor exact = at::arange(1, n + 1, at::kFloat) / 3.0f * ((w + 1) / 2.0f) + 0.1f;
    const double rel = ((t - exact).abs() / exact).max().item<double>();
    check(r, rel < 2e-3, "fp16 wire: within fp16 rounding of the exact mean, got " + std::to_string(rel));
    check(r, !at::equal(t, exact), "fp16 wire: the result was rounded");
    check(r, at::equal(t, t.to(at::kHalf).to(at::kFloat)), "fp16 wire: the result is an fp16 value");
    check(r, identical_everywhere(comm, t), "fp16 wire: bit-identical on every rank");
  }
}

void check_fusion(ft::Comm& comm) {
  using ft::horovod::fusion_groups;
  const int r = comm.rank();
  const int w = comm.world_size();
  check(r, fusion_groups({12, 20, 28, 8, 48}, 40) == std::vector<int>{2, 2, 1}, "fusion_groups threshold 40");
  check(r, fusion_groups({12, 20, 28}, 0) == std::vector<int>{1, 1, 1}, "fusion_groups threshold 0");
  check(r, fusion_groups({100, 1}, 40) == std::vector<int>{1, 1}, "fusion_groups: big tensor alone");
  check(r, fusion_groups({}, 40).empty(), "fusion_groups empty");
  {
    // Scattered tensors of 3, 5, 7, 2, 12 floats, threshold 10 floats:
    // groups {3,5} {7,2} {12}; the two pairs go through the fusion buffer.
    ft::horovod::FusionOptions o;
    o.threshold_bytes = 40;
    o.cycle = std::chrono::seconds(5);  // ends early: all expected tensors queued
    ft::horovod::TensorFusion fusion(comm, o);
    std::vector<at::Tensor> ts;
    for (int64_t n : {3, 5, 7, 2, 12}) ts.push_back(ramp(n, r, at::kFloat));
    const auto t0 = std::chrono::steady_clock::now();
    fusion.expect(5);
    std::vector<std::shared_future<void>> done;
    for (auto& t : ts) done.push_back(fusion.enqueue(t));
    for (auto& d : done) d.get();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bool ok = true;
    for (auto& t : ts) ok = ok && at::equal(t, ramp_sum(t.numel(), w, at::kFloat) / static_cast<float>(w));
    check(r, ok, "fusion: scattered tensors averaged");
    const auto st = fusion.stats();
    check(r, st.cycles == 1, "fusion: one cycle, got " + std::to_string(st.cycles));
    check(r, st.collectives == 3, "fusion: three rings, got " + std::to_string(st.collectives));
    check(r, st.tensors == 5, "fusion: five tensors");
    check(r, st.copied_bytes == 68, "fusion: 17 floats through the buffer, got " + std::to_string(st.copied_bytes));
    check(r, s < 2.0, "fusion: a complete round does not wait for the cycle");
  }
  {
    // Adjacent views of one buffer: one ring in place, nothing copied.
    ft::horovod::FusionOptions o;
    o.threshold_bytes = 1 << 20;
    ft::horovod::TensorFusion fusion(comm, o);
    at::Tensor buf = ramp(20, r, at::kFloat);
    fusion.expect(3);
    auto a = fusion.enqueue(buf.narrow(0, 0, 4));
    auto b = fusion.enqueue(buf.narrow(0, 4, 6));
    auto c = fusion.enqueue(buf.narrow(0, 10, 10));
    a.get(), b.get(), c.get();
    check(r, at::equal(buf, ramp_sum(20, w, at::kFloat) / static_cast<float>(w)), "fusion: adjacent views averaged");
    const auto st = fusion.stats();
    check(r, st.collectives == 1 && st.copied_bytes == 0, "fusion: adjacent views fused in place");
  }
  {
    // Ranks enqueue at different speeds with a 1 ms cycle: negotiation must
    // keep every ring the same on every rank.
    ft::horovod::FusionOptions o;
    o.cycle = std::chrono::milliseconds(1);
    ft::horovod::TensorFusion fusion(comm, o);
    std::vector<at::Tensor> ts;
    std::vector<std::shared_future<void>> done;
    for (int i = 0; i < 6; ++i) ts.push_back(ramp(5 + i, r, at::kFloat));
    for (auto& t : ts) {
      done.push_back(fusion.enqueue(t));
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));
    }
    for (auto& d : done) d.get();
    bool ok = true;
    for (auto& t : ts) ok = ok && at::equal(t, ramp_sum(t.numel(), w, at::kFloat) / static_cast<float>(w));
    check(r, ok, "fusion: staggered ranks still average correctly");
    const auto st = fusion.stats();
    at::Tensor counts = at::tensor({st.collectives, st.cycles, -st.collectives, -st.cycles}, at::kLong);
    comm.all_reduce(counts, ft::ReduceOp::Max);
    check(r, counts[0].item<int64_t>() == -counts[2].item<int64_t>() && counts[1].item<int64_t>() == -counts[3].item<int64_t>(),
          "fusion: every rank ran the same rings and cycles");
    check(r, st.tensors == 6, "fusion: six tensors");
  }
}

std::string parse_error(const std::map<std::string, std::string>& options) {
  try {
    ft::horovod::HorovodOptions::parse(options);
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "(no error)";
}

void check_options() {
  using ft::horovod::HorovodOptions;
  const HorovodOptions d = HorovodOptions::parse({});
  check(0, d.fusion_mb == 64.0 && d.cycle_ms == 5.0 && !d.fp16_compression && !d.overlap, "options: defaults");
  const HorovodOptions o = HorovodOptions::parse(
      {{"fusion_mb", "0"}, {"cycle_ms", "2.5"}, {"compression", "fp16"}, {"overlap", "true"}});
  check(0, o.fusion_mb == 0.0 && o.cycle_ms == 2.5 && o.fp16_compression && o.overlap, "options: all set");
  const std::pair<std::map<std::string, std::string>, std::string> bad[] = {
      {{{"compression", "bf16"}}, "strategy.options.compression: 'bf16' is not one of none, fp16"},
      {{{"fusion_mb", "-1"}}, "strategy.options.fusion_mb: '-1' is not a number >= 0 (fusion threshold in MiB, e.g. 64; 0 = no fusion)"},
      {{{"cycle_ms", "soon"}}, "strategy.options.cycle_ms: 'soon' is not a number >= 0 (cycle time in milliseconds, e.g. 5)"},
      {{{"overlap", "maybe"}}, "strategy.options.overlap: 'maybe' is not a boolean (true/false, yes/no, on/off, 1/0)"},
      {{{"fuse", "1"}}, "strategy.options.fuse: unknown option for horovod (known: fusion_mb, cycle_ms, compression, overlap)"},
  };
  for (const auto& [opts, msg] : bad) {
    const std::string got = parse_error(opts);
    check(0, got == msg, "options: error '" + got + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ring";
  try {
    if (mode == "options") {
      check_options();
      if (g_failures > 0) return 1;
      std::cout << "all " << g_checks << " checks passed\n";
      return 0;
    }
    ft::DistEnv env = ft::detect_dist_env(ft::process_env());
    ft::CommOptions options;
    options.timeout = std::chrono::milliseconds(20000);
    auto comm = ft::Comm::create(env, options);
    if (mode == "ring") {
      check_ring(*comm);
    } else if (mode == "all") {
      check_ring(*comm);
      check_fusion(*comm);
    } else if (mode == "fusion") {
      check_fusion(*comm);
    } else {
      std::cerr << "unknown mode " << mode << "\n";
      return 2;
    }
    if (g_failures > 0) {
      std::cerr << "rank " << env.rank << ": " << g_failures << " of " << g_checks << " checks failed\n";
      return 1;
    }
    std::cout << "rank " << env.rank << ": all " << g_checks << " checks passed\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
