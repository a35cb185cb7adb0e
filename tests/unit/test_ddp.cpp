// ddp / ddp_amp and the GradBuffer under them.
//
// In-process: GradBuffer layout, grads-as-views, launch order and timing
// (a bucket launches while backward still runs), no-sync accumulation, the
// compression hook's rounding, misuse errors. Subprocess: the real `ft` on
// ../shared/fixtures/parity-tiny against the PyTorch reference losses.
#include <cmath>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/parallel/grad_buffer.h"
#include "ft_run.h"

namespace {

// Four leaf params of 4, 6, 3 and 10 fp32 elements (model order) holding
// 1..4, 5..10, 11..13, 14..23, so that loss = sum(p^2)/2 gives grad == p.
std::vector<at::Tensor> make_params() {
  std::vector<at::Tensor> ps;
  const std::vector<std::vector<int64_t>> shapes = {{4}, {2, 3}, {3}, {5, 2}};
  float next = 1.0f;
  for (const auto& shape : shapes) {
    auto t = at::empty(shape, at::kFloat);
    auto* d = t.data_ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = next++;
    ps.push_back(t.requires_grad_(true));
  }
  return ps;
}

// Terms built in model order, so backward reaches the last param first.
at::Tensor half_square_loss(const std::vector<at::Tensor>& ps, double scale = 1.0) {
  at::Tensor loss = (ps[0] * ps[0]).sum() * 0.5 * scale;
  for (size_t i = 1; i < ps.size(); ++i) loss = loss + (ps[i] * ps[i]).sum() * 0.5 * scale;
  return loss;
}

struct Launch {
  int index;
  at::Tensor data;       // clone of the bucket at launch
  at::Tensor first_grad; // clone of params[0].grad at launch (the last bucket)
};

ft::CommHook recording_hook(std::vector<Launch>& log, const std::vector<at::Tensor>& ps) {
  return [&log, ps](ft::GradBucket& b) {
    log.push_back({b.index, b.data.clone(), ps[0].grad().clone()});
    return ft::BucketComm{};
  };
}

std::vector<float> values(const at::Tensor& t) {
  auto c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

TEST_CASE("GradBuffer lays params out in reverse order, never straddling buckets, padded to align") {
  auto ps = make_params();
  std::vector<Launch> log;
  ft::GradBufferOptions o;
  o.bucket_bytes = 40;  // 10 floats
  o.align_elements = 4;
  ft::GradBuffer buf(ps, o, recording_hook(log, ps));
  REQUIRE(buf.num_buckets() == 3);
  REQUIRE(buf.buffers().size() == 1);
  CHECK(buf.buffers()[0].numel() == 28);
  // p3 (10) fills bucket 0; p2 (3) + p1 (6) fit in bucket 1; p0 (4) would not.
  CHECK(buf.buckets()[0].params == std::vector<int>{3});
  CHECK(buf.buckets()[1].params == std::vector<int>{2, 1});
  CHECK(buf.buckets()[2].params == std::vector<int>{0});
  CHECK(buf.buckets()[0].offset == 0);
  CHECK(buf.buckets()[0].padded_numel == 12);
  CHECK(buf.buckets()[1].offset == 12);
  CHECK(buf.buckets()[1].numel == 9);
  CHECK(buf.buckets()[1].padded_numel == 12);
  CHECK(buf.buckets()[2].offset == 24);
  CHECK(buf.buckets()[2].padded_numel == 4);
  CHECK(buf.slot(2).offset == 12);
  CHECK(buf.slot(1).offset == 15);
  CHECK(buf.slot(0).offset == 24);
  // Each .grad is a zeroed view into the one buffer.
  const auto* base = buf.buffers()[0].data_ptr<float>();
  CHECK(ps[1].grad().data_ptr<float>() == base + 15);
  CHECK(ps[3].grad().data_ptr<float>() == base);
  CHECK(ps[1].grad().sizes() == ps[1].sizes());
  CHECK(buf.buffers()[0].abs().sum().item<float>() == 0.0f);
}

TEST_CASE("GradBuffer launches each bucket in order as soon as it is full, during backward") {
  auto ps = make_params();
  std::vector<Launch> log;
  ft::GradBufferOptions o;
  o.bucket_bytes = 40;
  o.align_elements = 4;
  ft::GradBuffer buf(ps, o, recording_hook(log, ps));
  buf.start_backward(true);
  half_square_loss(ps).backward();
  REQUIRE(log.size() == 3);
  CHECK(log[0].index == 0);
  CHECK(log[1].index == 1);
  CHECK(log[2].index == 2);
  // Bucket 0 (p3 = 14..23) went out before backward reached p0: its grad was still 0.
  CHECK(values(log[0].data) == std::vector<float>{14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 0, 0});
  CHECK(values(log[0].first_grad) == std::vector<float>{0, 0, 0, 0});
  // Bucket 1 holds p2 (11..13) then p1 (2x3 = 5..10), then padding.
  CHECK(values(log[1].data) == std::vector<float>{11, 12, 13, 5, 6, 7, 8, 9, 10, 0, 0, 0});
  CHECK(values(log[2].data) == std::vector<float>{1, 2, 3, 4});
  buf.finish_sync();
  CHECK(values(ps[3].grad().reshape({-1})) == values(ps[3].detach().reshape({-1})));
  CHECK(buf.overlap().syncs == 1);
  // Already synced: nothing is launched again.
  buf.finish_sync();
  CHECK(log.size() == 3);
}

TEST_CASE("GradBuffer: no-sync micro-batches accumulate and launch nothing; the sync one launches the sum") {
  auto ps = make_params();
  std::vector<Launch> log;
  ft::GradBufferOptions o;
  o.bucket_bytes = 1 << 20;  // one bucket
  ft::GradBuffer buf(ps, o, recording_hook(log, ps));
  REQUIRE(buf.num_buckets() == 1);
  buf.start_backward(false);
  half_square_loss(ps, 0.5).backward();
  CHECK(log.empty());
  buf.start_backward(true);
  half_square_loss(ps, 0.25).backward();
  REQUIRE(log.size() == 1);
  buf.finish_sync();
  // grad = 0.75 * p; p3's first element is 14.
  CHECK(ps[3].grad().reshape({-1})[0].item<float>() == 10.5f);
  CHECK(ps[0].grad().reshape({-1})[3].item<float>() == 3.0f);
  buf.zero();
  CHECK(buf.buffers()[0].abs().sum().item<float>() == 0.0f);
  CHECK(ps[0].grad().abs().sum().item<float>() == 0.0f);
}

TEST_CASE("GradBuffer launches buckets of unused params after backward, and refuses a second sync backward") {
  auto ps = make_params();
  std::vector<Launch> log;
  ft::GradBufferOptions o;
  o.bucket_bytes = 40;
  ft::GradBuffer buf(ps, o, recording_hook(log, ps));
  buf.start_backward(true);
  // p0 (its own bucket 2) and p2 (bucket 1) take no part.
  ((ps[1] * ps[1]).sum() + (ps[3] * ps[3]).sum()).backward();
  CHECK(log.size() == 3);  // bucket 0 from its hook, 1 and 2 from the end-of-backward callback
  CHECK_THROWS_AS(buf.start_backward(true), ft::Error);
  buf.finish_sync();
  buf.start_backward(true);  // fine after the sync
}

TEST_CASE("GradBuffer: finish_sync without start_backward reduces what was accumulated") {
  auto ps = make_params();
  std::vector<Launch> log;
  ft::GradBuffer buf(ps, {}, recording_hook(log, ps));
  half_square_loss(ps).backward();  // hooks stay idle: no start_backward
  CHECK(log.empty());
  buf.finish_sync();
  REQUIRE(log.size() == 1);
  CHECK(values(log[0].data)[0] == 14.0f);  // p3 (14..23) leads the reversed layout
  CHECK(values(log[0].data)[22] == 4.0f);   // p0 (1..4) ends it
}

TEST_CASE("GradBuffer rebuilds its buckets once, in the order grads arrived, keeping the grads") {
  auto comm = ft::Comm::create(ft::DistEnv{});
  auto ps = make_params();
  std::vector<Launch> log;
  ft::GradBufferOptions o;
  o.bucket_bytes = 40;
  o.rebuild_with = comm.get();
  ft::GradBuffer buf(ps, o, recording_hook(log, ps));
  // Terms made in the order p2, p0, p3, p1: backward reaches p1, p3, p0, p2.
  auto loss = [&] {
    at::Tensor l = (ps[2] * ps[2]).sum() * 0.5;
    for (int i : {0, 3, 1}) l = l + (ps[static_cast<size_t>(i)] * ps[static_cast<size_t>(i)]).sum() * 0.5;
    return l;
  };
  buf.start_backward(true);
  loss().backward();
  buf.finish_sync();
  CHECK(buf.buckets()[0].params == std::vector<int>{3});  // reverse model order still
  buf.start_backward(true);                                // rebuild happens here
  REQUIRE(buf.num_buckets() == 3);
  CHECK(buf.buckets()[0].params == std::vector<int>{1});
  CHECK(buf.buckets()[1].params == std::vector<int>{3});
  CHECK(buf.buckets()[2].params == std::vector<int>{0, 2});
  CHECK(buf.slot(2).offset == 20);
  // The grads of the first backward moved with their params.
  CHECK(values(ps[2].grad()) == std::vector<float>{11, 12, 13});
  CHECK(ps[2].grad().data_ptr<float>() == buf.buffers()[0].data_ptr<float>() + 20);
  log.clear();
  loss().backward();
  buf.finish_sync();
  REQUIRE(log.size() == 3);
  CHECK(values(log[0].data) == std::vector<float>{10, 12, 14, 16, 18, 20});
  // Bucket 0 left before backward reached p0: it still held the first pass only.
  CHECK(values(log[0].first_grad) == std::vector<float>{1, 2, 3, 4});
  CHECK(values(log[2].data) == std::vector<float>{2, 4, 6, 8, 22, 24, 26});
  // Only once.
  buf.start_backward(true);
  CHECK(buf.buckets()[0].params == std::vector<int>{1});
}

TEST_CASE("GradBuffer puts a replaced .grad back as a view, keeping its values") {
  auto ps = make_params();
  std::vector<Launch> log;
  ft::GradBuffer buf(ps, {}, recording_hook(log, ps));
  ps[2].mutable_grad() = at::full({3}, 2.0f);
  buf.start_backward(true);
  half_square_loss(ps).backward();
  buf.finish_sync();
  CHECK(values(ps[2].grad()) == std::vector<float>{13, 14, 15});
  CHECK(ps[2].grad().data_ptr<float>() == buf.buffers()[0].data_ptr<float>() + buf.slot(2).offset);
}

TEST_CASE("compressed_allreduce_hook rounds to the wire dtype (world size 1)") {
  auto comm = ft::Comm::create(ft::DistEnv{});
  const float x = 1.0f + 1.0f / 1024.0f;  // exact in fp16, rounds to 1 in bf16
  for (auto [wire, want] : {std::pair{at::kHalf, x}, std::pair{at::kBFloat16, 1.0f}}) {
    auto p = at::full({3}, x).requires_grad_(true);
    ft::GradBuffer buf({p}, {}, ft::compressed_allreduce_hook(*comm, wire));
    buf.start_backward(true);
    (p * p).sum().mul(0.5).backward();
    buf.finish_sync();
    CHECK(values(p.grad()) == std::vector<float>{want, want, want});
  }
  CHECK_THROWS_AS(ft::compressed_allreduce_hook(*comm, at::kFloat), ft::Error);
}

TEST_CASE("GradBuffer rejects params that do not require grad and bad options") {
  auto p = at::ones({2});
  CHECK_THROWS_AS(ft::GradBuffer({p}, {}, [](ft::GradBucket&) { return ft::BucketComm{}; }), ft::Error);
  auto q = at::ones({2}).requires_grad_(true);
  ft::GradBufferOptions o;
  o.bucket_bytes = 0;
  CHECK_THROWS_AS(ft::GradBuffer({q}, o, [](ft::GradBucket&) { return ft::BucketComm{}; }), ft::Error);
}

// ---------------------------------------------------------------- the real ft

namespace {

struct FtRun {
  ft_test::RunOutput out;
  std::vector<double> losses;
  nlohmann::json summary;
  std::vector<nlohmann::json> overlap;  // the "ddp.overlap" events
};

FtRun run_parity(const std::string& flags, const std::string& tag) {
  ft_test::TempDir tmp("ddp-" + tag);
  const auto metrics = tmp.path() / "metrics.jsonl";
  const std::string args =
      fmt::format("run --config configs/parity-tiny.yaml --metrics-out {} {}", metrics.string(), flags);
  FtRun r;
  r.out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << r.out.output);
  REQUIRE(r.out.exit_code == 0);
  r.losses = ft_test::step_losses(metrics);
  auto s = ft_test::read_events(metrics, "summary");
  REQUIRE(s.size() == 1);
  r.summary = s[0];
  r.overlap = ft_test::strategy_events(metrics, "ddp.overlap");
  return r;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  // Two empty trajectories (a run that logged nothing) must not pass as equal.
  REQUIRE_FALSE(want.empty());
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("step " << i + 1 << ": " << got[i] << " vs " << want[i]);
    CHECK(std::abs(got[i] - want[i]) < tol);
  }
}

// {buckets, syncs} of the run's one "ddp.overlap" event; {-1, -1} without one.
std::pair<int, int> buckets_and_syncs(const FtRun& r) {
  CHECK(r.overlap.size() == 1);
  if (r.overlap.size() != 1) return {-1, -1};
  return {r.overlap[0].at("buckets").get<int>(), r.overlap[0].at("syncs").get<int>()};
}

}  // namespace

TEST_CASE("ddp on 2 and 4 ranks reproduces the PyTorch reference losses") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const auto ref = ft_test::reference_losses();
  REQUIRE(ref.size() == 8);
  SUBCASE("2 ranks x 16") {
    auto r = run_parity("--strategy ddp --nproc 2 --threads 1 --set train.batch_size=16", "x2");
    check_close(r.losses, ref, 1e-4);
    CHECK(r.summary.at("world_size") == 2);
    // The tiny model (~13 MB of fp32 grads): the 1 MiB first bucket, the
    // rest of the encoder in one default 25 MiB bucket, the word embeddings
    // alone (row-sparse), then the other embeddings.
    CHECK(buckets_and_syncs(r) == std::pair{4, 8});
  }
  SUBCASE("4 ranks x 8") {
    auto r = run_parity("--strategy ddp --nproc 4 --threads 1 --set train.batch_size=8", "x4");
    check_close(r.losses, ref, 1e-4);
    CHECK(r.summary.at("world_size") == 4);
  }
  SUBCASE("2 ranks, 0.05 MiB buckets: many buckets, same losses") {
    auto r = run_parity(
        "--strategy ddp --nproc 2 --threads 1 --set train.batch_size=16 --set strategy.options.bucket_mb=0.05", "tiny-buckets");
    check_close(r.losses, ref, 1e-4);
    const auto [buckets, syncs] = buckets_and_syncs(r);
    CHECK(buckets > 20);
    CHECK(syncs == 8);
  }
}

TEST_CASE("ddp: the row-sparse word-embedding all-reduce gives exactly the dense result on 2 ranks") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  // Two ranks: each touched row's average is (a + b) / 2 either way, so the
  // losses and the final weights are bit-identical, not merely close.
  const std::string base = "--strategy ddp --nproc 2 --threads 1 --set train.batch_size=16";
  auto sparse = run_parity(base, "sparse");
  auto dense = run_parity(base + " --set strategy.options.sparse_embedding=false", "dense");
  REQUIRE(sparse.losses.size() == 8);
  CHECK(sparse.losses == dense.losses);
  // The sparse run gives the word embeddings a bucket of their own (which
  // splits the bucket they shared); the dense one does not.
  CHECK(buckets_and_syncs(sparse).first == 4);
  CHECK(buckets_and_syncs(dense).first == 2);
}

TEST_CASE("gradient accumulation 2 x 16 equals one batch of 32") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  auto whole = run_parity("--strategy single --threads 1", "whole");
  auto accum = run_parity("--strategy ddp --threads 1 --set train.grad_accum=2 --set train.batch_size=16", "accum");
  check_close(accum.losses, whole.losses, 1e-5);
}

TEST_CASE("ddp_amp defaults to bf16 on CPU and stays near the fp32 reference") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const auto ref = ft_test::reference_losses();
  auto r = run_parity("--strategy ddp_amp --precision auto --nproc 2 --threads 1 --set train.batch_size=16", "amp");
  CHECK(r.summary.at("precision") == "bf16");
  check_close(r.losses, ref, 2e-2);
  // bf16 really ran: some step differs from fp32 by more than fp32 noise.
  double max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) max_diff = std::max(max_diff, std::abs(r.losses[i] - ref[i]));
  CHECK(max_diff > 1e-5);
}

TEST_CASE("bad ddp options stop the run with a message naming the key") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  struct Bad {
    const char* set;
    const char* expect;
  };
  const Bad cases[] = {
      {"strategy.options.bucket_mb=-1", "strategy.options.bucket_mb: '-1' is not a number > 0"},
      {"strategy.options.compression=zip", "strategy.options.compression: 'zip' is not one of none, fp16, bf16"},
      {"strategy.options.bucketmb=5", "strategy.options.bucketmb: unknown option for ddp/ddp_amp (known: bucket_mb, compression, sparse_embedding)"},
  };
  for (const auto& c : cases) {
    auto out = ft_test::run_ft(fmt::format("run --config configs/parity-tiny.yaml --strategy ddp --max-steps 1 --set {}", c.set));
    INFO(out.output);
    CHECK(out.exit_code != 0);
    CHECK(out.output.find(c.expect) != std::string::npos);
  }
}
