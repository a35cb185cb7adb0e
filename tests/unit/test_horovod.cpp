// horovod and the ring all-reduce under it.
//
// In-process: chunking of uneven sizes, the ring at world size 1 (fp16 wire
// still rounds), misuse errors. Multi-rank (tests/workers_hvd/hvd_worker.cpp
// through the launcher, 2, 3 and 4 ranks): exact ring results and bytes,
// fp16 wire, tensor fusion and negotiation. Subprocess: the real `ft` on
// ../shared/fixtures/parity-tiny against the PyTorch reference losses, and
// option errors.
#include <cstdio>
#include <string>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/comm/launcher.h"
#include "ring.h"
#include "ft_run.h"
#include "ft_workers.h"

namespace {

using ft_test::error_of;

std::unique_ptr<ft::Comm> solo() { return ft::Comm::create(ft::DistEnv{}); }

// Runs the worker on `nproc` ranks; returns stdout, fails the test on error.
std::string run_worker(int nproc, const std::string& mode) {
  return ft_test::run_workers("ft_test_hvd_worker", nproc, mode, 20);
}

using ft_test::expect_all_passed;

std::string run_ft_parity(const std::string& strategy_args, const std::filesystem::path& metrics) {
  const std::string args = fmt::format("run --config configs/parity-tiny.yaml {} --metrics-out {}", strategy_args,
                                       metrics.string());
  auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  return out.output;
}

void check_losses(const std::filesystem::path& metrics, double tolerance) {
  const auto ref = ft_test::reference_losses();
  const auto got = ft_test::step_losses(metrics);
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("step " << i + 1 << ": got " << got[i] << ", reference " << ref[i]);
    CHECK(std::abs(got[i] - ref[i]) < tolerance);
  }
}

}  // namespace

TEST_CASE("ring chunks: uneven sizes put the extra elements first") {
  CHECK(ft::ring_chunk_sizes(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(ft::ring_chunk_sizes(2, 3) == std::vector<int64_t>{1, 1, 0});
  CHECK(ft::ring_chunk_sizes(0, 2) == std::vector<int64_t>{0, 0});
  CHECK(ft::ring_chunk_sizes(7, 1) == std::vector<int64_t>{7});
  CHECK(error_of([] { ft::ring_chunk_sizes(4, 0); }) == "ring: world size must be >= 1, got 0");
}

TEST_CASE("ring at world size 1: identity in fp32, fp16 wire rounds, misuse is one clear error") {
  auto comm = solo();
  at::Tensor t = at::arange(1, 6, at::kFloat) / 3.0f;
  const at::Tensor before = t.clone();
  const auto traffic = ft::horovod::ring_allreduce(*comm, t);
  CHECK(at::equal(t, before));
  CHECK(traffic.bytes_sent == 0);
  ft::horovod::RingOptions half;
  half.wire = at::kHalf;
  ft::horovod::ring_allreduce(*comm, t, half);
  CHECK(at::equal(t, before.to(at::kHalf).to(at::kFloat)));
  CHECK_FALSE(at::equal(t, before));

  at::Tensor ints = at::arange(4, at::kLong);
  CHECK(error_of([&] { ft::horovod::ring_allreduce(*comm, ints); }) == "ring all-reduce: needs a floating-point tensor, got Long");
  at::Tensor m = at::zeros({2, 2});
  CHECK(error_of([&] { ft::horovod::ring_allreduce(*comm, m); }) == "ring all-reduce: needs a contiguous 1-D tensor");
  ft::horovod::RingOptions maxop;
  maxop.op = ft::ReduceOp::Max;
  at::Tensor f = at::zeros({3});
  CHECK(error_of([&] { ft::horovod::ring_allreduce(*comm, f, maxop); }) == "ring all-reduce: only Sum and Avg are supported");
}

TEST_CASE("ring all-reduce is exact on 2, 3 and 4 ranks with uneven sizes; fusion negotiates") {
  // Per rank: 6 sizes x 2 ops x 4 checks, fp64, 5 fp16 checks; fusion: 4 fusion_groups + 6 scattered +
  // 2 adjacent + 3 staggered.
  const int ring = 6 * 2 * 4 + 1 + 5;
  expect_all_passed(run_worker(2, "ring"), 2, ring);
  expect_all_passed(run_worker(3, "all"), 3, ring + 15);
  expect_all_passed(run_worker(4, "ring"), 4, ring);
}

TEST_CASE("horovod reproduces the PyTorch reference losses on 2 ranks (several rings per step; overlap)") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("hvd-parity");
  const std::string base = "--strategy horovod --nproc 2 --threads 1 --set train.batch_size=16";
  SUBCASE("reduce at step(), several rings per step (fusion 0.25 MiB)") {
    run_ft_parity(base + " --set strategy.options.fusion_mb=0.25", tmp.path() / "m.jsonl");
    check_losses(tmp.path() / "m.jsonl", 1e-4);
    const auto fusion = ft_test::strategy_events(tmp.path() / "m.jsonl", "horovod.fusion");
    REQUIRE(fusion.size() == 1);
    CHECK(fusion[0].at("tensors") == 328);
    CHECK(fusion[0].at("rings").get<int64_t>() > 1);  // several rings per step
    // Laid out in ready order, the fused tensors are adjacent: reduced in place,
    // (next to) nothing staged through the fusion buffer ("0.0 MiB").
    CHECK(fusion[0].at("fusion_bytes").get<double>() < 0.05 * 1024 * 1024);
  }
  SUBCASE("overlap with backward, with accumulation") {
    run_ft_parity("--strategy horovod --nproc 2 --threads 1 --set train.batch_size=8 --set train.grad_accum=2 "
                  "--set strategy.options.overlap=true --set strategy.options.cycle_ms=1",
                  tmp.path() / "m.jsonl");
    check_losses(tmp.path() / "m.jsonl", 1e-4);
  }
  // Plain 2-rank and fp16-compression rows are in test_parity's table.
}

TEST_CASE("horovod options: defaults, values, and errors that name the key") {
  // HorovodOptions::parse is plugin-private; the worker links it.
  CHECK(run_worker(1, "options").find("all 7 checks passed\n") != std::string::npos);
  // One end-to-end: the error reaches the user as one line and a failed run.
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  auto out = ft_test::run_ft(
      "run --config configs/parity-tiny.yaml --strategy horovod --threads 1 --set train.max_steps=1 "
      "--set strategy.options.compression=bf16");
  INFO(out.output);
  CHECK(out.exit_code != 0);
  CHECK(out.output.find("strategy.options.compression: 'bf16' is not one of none, fp16") != std::string::npos);
}
