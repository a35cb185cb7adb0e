// zero1/2/3 and fsdp (ft::ShardedStrategy) and the flat-shard layout.
//
// In-process (world size 1, so every collective is local): the layout
// arithmetic, FlatParam's storage coming and going, options errors, every
// policy training the same weights as the replicated strategy (clipping
// on), state bytes, full state round trips across strategies.
// Two ranks as threads: the row-split word table against the replicated one.
// Subprocess (the real `ft`): zero3 on 4 ranks saves, ddp on 2 and single
// resume it; memory per rank on bench-mini against BENCHMARK.md's theory.
#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "ft/comm/comm.h"
#include "ft/comm/launcher.h"
#include "ft/parallel/cost_model.h"
#include "ft/parallel/flat_param_group.h"
#include "ft/base/error.h"
#include "ft/parallel/flat_shard.h"
#include "ft/model/model.h"
#include "ft/optim/precision.h"
#include "ft/parallel/replicated_strategy.h"
#include "ft/io/safetensors.h"
#include "sharded_strategy.h"
#include "ft_run.h"
#include "ft_two_ranks.h"
#include "ft_weights.h"

namespace {

// two_rank_config with a vocabulary of 37.
ft::BertConfig tiny_config() {
  ft::BertConfig c = ft_test::two_rank_config();
  c.vocab_size = 37;
  return c;
}

std::shared_ptr<ft::EncoderModel> tiny_model() {
  at::manual_seed(7);
  return std::make_shared<ft::EncoderModel>(tiny_config());
}

ft::Batch tiny_batch(int step) {
  at::manual_seed(100 + step);
  ft::Batch b;
  b.input_ids = at::randint(1, 37, {4, 6}, at::kLong);
  b.attention_mask = at::ones({4, 6}, at::kLong);
  b.attention_mask[3][5] = 0;
  b.token_type_ids = at::zeros({4, 6}, at::kLong);
  b.labels = at::randint(0, 3, {4}, at::kLong);
  return b;
}

// One strategy driven like the Trainer drives it, at world size 1.
struct Harness {
  std::unique_ptr<ft::Comm> comm = ft::Comm::create(ft::DistEnv{});
  ft::Precision precision{ft::PrecisionMode::FP32, c10::kCPU};
  ft::StrategyContext ctx;
  std::shared_ptr<ft::Strategy> strategy;
  std::shared_ptr<ft::EncoderModel> model = tiny_model();

  explicit Harness(std::shared_ptr<ft::Strategy> s) : strategy(std::move(s)) {
    ctx.comm = comm.get();
    ctx.precision = &precision;
    ft::OptimizerSpec spec;
    spec.lr = 1e-2;
    spec.weight_decay = 0.1;
    auto plan = ft::default_param_plan(model->weights(), 0.1, false);
    strategy->setup(model, spec, plan, ctx);
  }
  // Two micro-batches per step (the first without sync), clipping at 0.05.
  std::vector<double> train(int steps, int first = 0) {
    std::vector<double> losses;
    for (int s = first; s < first + steps; ++s) {
      double total = 0;
      for (int micro = 0; micro < 2; ++micro) {
        ft::Batch b = tiny_batch(2 * s + micro);
        auto loss = at::cross_entropy_loss(strategy->forward(b), b.labels) / 2.0;
        strategy->backward(loss, micro == 1);
        total += loss.item<double>();
      }
      strategy->step({1e-2, 0.05});
      losses.push_back(total);
    }
    return losses;
  }
};

std::shared_ptr<ft::Strategy> sharded(ft::ShardingPolicy p) { return std::make_shared<ft::ShardedStrategy>(p); }

// Each unit's parameter count, model order (what ft/parallel/cost_model.h is given).
std::vector<int64_t> unit_sizes(const ft::EncoderModel& model) {
  std::vector<int64_t> out;
  for (const auto& unit : model.unit_parameters()) {
    int64_t n = 0;
    for (const auto& [name, t] : unit) n += t.numel();
    out.push_back(n);
  }
  return out;
}

// The classifier's word table, which zero2/3 split by rows.
ft::WordTableShape word_table(const ft::BertConfig& c) { return {c.vocab_size, c.embedding_width()}; }

}  // namespace

TEST_CASE("flat layout: padded to the world size, equal contiguous shards, pieces per rank") {
  ft::TensorList params = {{"a", at::zeros({5})}, {"b", at::zeros({3, 2})}, {"c", at::zeros({4})}};
  auto l = ft::FlatLayout::build(params, 4, {true, false, true});
  CHECK(l.numel == 15);
  CHECK(l.padded_numel == 16);
  CHECK(l.shard_numel() == 4);
  CHECK(l.padding() == 1);
  CHECK(l.entries[1].offset == 5);
  CHECK(l.entries[2].offset == 11);
  CHECK_FALSE(l.entries[1].trainable);
  // Rank 1 owns [4, 8): last element of a, first three of b.
  auto p1 = l.pieces(1);
  REQUIRE(p1.size() == 2);
  CHECK((p1[0].entry == 0 && p1[0].offset_in_entry == 4 && p1[0].offset_in_shard == 0 && p1[0].numel == 1));
  CHECK((p1[1].entry == 1 && p1[1].offset_in_entry == 0 && p1[1].offset_in_shard == 1 && p1[1].numel == 3));
  // Rank 3 owns [12, 16): c[1..3] and one padding element.
  auto p3 = l.pieces(3);
  REQUIRE(p3.size() == 1);
  CHECK((p3[0].entry == 2 && p3[0].offset_in_entry == 1 && p3[0].numel == 3));

  ft::TensorList named = {{"a", at::arange(5, at::kFloat)}, {"b", at::arange(6, at::kFloat).view({3, 2}) + 10},
                          {"c", at::arange(4, at::kFloat) + 20}};
  auto flat = l.flatten(named, "test");
  CHECK(flat[5].item<float>() == 10.0f);
  CHECK(flat[15].item<float>() == 0.0f);
  auto back = l.unflatten(flat, ".x", /*trainable_only=*/true);
  REQUIRE(back.size() == 2);
  CHECK(back[1].first == "c.x");
  CHECK(at::equal(back[1].second, named[2].second));
  CHECK(ft_test::error_of([&] { l.flatten({named[0], named[2]}, "ckpt"); }) == "ckpt: missing tensor 'b'");
  CHECK(ft_test::error_of([&] { l.flatten({named[0], {"b", at::zeros({5})}, named[2]}, "ckpt"); }) ==
        "ckpt: tensor 'b' has 5 elements, expected 6 (shape 3x2)");
  auto round = ft::FlatLayout::from_json(l.to_json(), "meta.json");
  CHECK(round.to_json() == l.to_json());
}

TEST_CASE("flat layout: the embedding unit is split equally (balanced within 1%) on bench-mini shapes") {
  ft::BertConfig c = ft::BertConfig::preset("mini");
  c.vocab_size = 21128;
  ft::EncoderModel model(c);
  for (int world : {2, 4}) {
    int64_t per_rank = 0, total = 0;
    for (const auto& unit : model.unit_parameters()) {
      auto l = ft::FlatLayout::build(unit, world);
      CHECK(l.padding() < world);
      per_rank += l.shard_numel();
      total += l.numel;
    }
    // Every rank owns exactly per_rank elements; the ideal is total / world.
    CHECK(static_cast<double>(per_rank) / (static_cast<double>(total) / world) < 1.01);
  }
}

TEST_CASE("FlatParam: reshard frees the storage, unshard brings the values back, sizes stay") {
  auto comm = ft::Comm::create(ft::DistEnv{});
  auto w = at::arange(6, at::kFloat).view({2, 3}).requires_grad_(true);
  auto b = at::full({4}, 9.0f).requires_grad_(true);
  ft::FlatParam f(0, {{"w", w}, {"b", b}}, {true, true}, 1, 0, /*params_sharded=*/true);
  CHECK(f.state() == ft::ShardedState::kSharded);
  CHECK(f.full_bytes_held() == 0);
  CHECK(w.sizes() == at::IntArrayRef({2, 3}));
  CHECK(f.shard().numel() == 10);
  f.unshard(*comm);
  f.wait_for_unshard(*comm);
  CHECK(f.state() == ft::ShardedState::kUnsharded);
  CHECK(f.full_bytes_held() == 40);
  CHECK(w[1][2].item<float>() == 5.0f);
  CHECK(b[3].item<float>() == 9.0f);
  f.reshard();
  CHECK(f.full_bytes_held() == 0);
  CHECK(at::equal(f.gather_copy(*comm).narrow(0, 0, 6), at::arange(6, at::kFloat)));
}

TEST_CASE("strategy options: policies and errors naming the key") {
  auto z3 = ft::zero_policy_from_options(ft::ZeroStage::kWeights, {{"limit_all_gathers", "2"}});
  CHECK((z3.params_sharded && z3.grads_sharded && z3.limit_all_gathers == 2 && z3.name == "zero3"));
  auto z1 = ft::zero_policy_from_options(ft::ZeroStage::kOptimizerStates, {});
  CHECK((!z1.grads_sharded && !z1.params_sharded && z1.shard_optimizer));
  CHECK(z1.bucket_bytes == 25 * 1024 * 1024);
  CHECK(ft::zero_policy_from_options(ft::ZeroStage::kOptimizerStates, {{"bucket_mb", "0.5"}}).bucket_bytes == 512 * 1024);
  CHECK(ft_test::error_of([] { ft::fsdp_policy_from_options({{"bucket_mb", "1e-9"}}, 1, 1); }) ==
        "strategy.options.bucket_mb: 1e-9 MiB is smaller than one fp32 element");
  auto sgo = ft::fsdp_policy_from_options({{"sharding_strategy", "SHARD_GRAD_OP"}}, 1, 1);
  CHECK((sgo.params_sharded && !sgo.reshard_after_forward));
  auto ns = ft::fsdp_policy_from_options({{"sharding_strategy", "NO_SHARD"}, {"backward_prefetch", "NONE"}}, 1, 1);
  CHECK((!ns.shard_optimizer && !ns.grads_sharded && !ns.backward_prefetch));
  CHECK(ft_test::error_of([] { ft::zero_policy_from_options(ft::ZeroStage::kGradients, {{"stage", "2"}}); }) ==
        "strategy.options.stage: unknown option for zero2 (known: bucket_mb, prefetch, limit_all_gathers, grad_buckets, "
        "grad_accumulation, shard_word_table)");
  CHECK_FALSE(ft::zero_policy_from_options(ft::ZeroStage::kWeights, {{"shard_word_table", "false"}}).shard_word_table);
  CHECK(ft::fsdp_policy_from_options({}, 1, 1).shard_word_table);
  auto nosync = ft::zero_policy_from_options(ft::ZeroStage::kGradients,
                                             {{"grad_accumulation", "no_sync"}, {"grad_buckets", "3"}});
  CHECK((nosync.accumulation == ft::GradAccumulation::kNoSync && nosync.grad_buckets == 3));
  CHECK(ft_test::error_of([] { ft::zero_policy_from_options(ft::ZeroStage::kWeights, {{"grad_buckets", "0"}}); }) ==
        "strategy.options.grad_buckets: '0' is not an integer >= 1");
  CHECK(ft_test::error_of([] { ft::zero_policy_from_options(ft::ZeroStage::kWeights, {{"limit_all_gathers", "-1"}}); }) ==
        "strategy.options.limit_all_gathers: '-1' is not an integer >= 0");
  CHECK(ft_test::error_of([] { ft::fsdp_policy_from_options({{"sharding_strategy", "FULL"}}, 1, 1); }) ==
        "strategy.options.sharding_strategy: 'FULL' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
        "_HYBRID_SHARD_ZERO2");
  // Hybrid: 4 ranks on one host act as 2 x 2; the group size defaults to the ranks per host.
  auto hs = ft::fsdp_policy_from_options({{"sharding_strategy", "HYBRID_SHARD"}, {"shard_group_size", "2"}}, 4, 4);
  CHECK((hs.params_sharded && hs.grads_sharded && hs.reshard_after_forward && hs.shard_group_size == 2));
  auto hz2 = ft::fsdp_policy_from_options({{"sharding_strategy", "_HYBRID_SHARD_ZERO2"}}, 8, 4);
  CHECK((hz2.params_sharded && !hz2.reshard_after_forward && hz2.shard_group_size == 4));
  CHECK(ft::fsdp_policy_from_options({}, 4, 2).shard_group_size == 0);
  CHECK(ft_test::error_of([] { ft::fsdp_policy_from_options({{"sharding_strategy", "HYBRID_SHARD"}}, 4, 4); }) ==
        "strategy.options.shard_group_size: one shard group of all 4 ranks is FULL_SHARD; use FULL_SHARD, or set "
        "shard_group_size to a smaller divisor of 4");
  CHECK(ft_test::error_of([] {
          ft::fsdp_policy_from_options({{"sharding_strategy", "HYBRID_SHARD"}, {"shard_group_size", "3"}}, 4, 4);
        }) == "strategy.options.shard_group_size: 3 does not divide the 4 ranks into equal shard groups; pick a "
              "divisor of 4");
  CHECK(ft_test::error_of([] {
          ft::fsdp_policy_from_options({{"sharding_strategy", "HYBRID_SHARD"}, {"shard_group_size", "1"}}, 4, 4);
        }).find("shard groups of one rank replicate everything; use NO_SHARD") != std::string::npos);
  CHECK(ft_test::error_of([] { ft::fsdp_policy_from_options({{"shard_group_size", "2"}}, 4, 4); }) ==
        "strategy.options.shard_group_size: only HYBRID_SHARD and _HYBRID_SHARD_ZERO2 shard in groups; drop it or "
        "set sharding_strategy: HYBRID_SHARD");
}

namespace {
ft::ShardingPolicy with(ft::ShardingPolicy p, ft::GradAccumulation acc, int buckets) {
  p.accumulation = acc;
  p.grad_buckets = buckets;
  return p;
}
}  // namespace

TEST_CASE("every sharding policy trains the same weights as the replicated strategy (accumulation, clipping)") {
  Harness ref(std::make_shared<ft::ReplicatedStrategy>());
  const auto ref_losses = ref.train(3);
  const auto ref_weights = ref.strategy->model_state();
  using Acc = ft::GradAccumulation;
  const auto z2 = ft::ShardingPolicy::zero(ft::ZeroStage::kGradients);
  const auto z3 = ft::ShardingPolicy::zero(ft::ZeroStage::kWeights);
  const std::vector<ft::ShardingPolicy> policies = {
      ft::ShardingPolicy::zero(ft::ZeroStage::kOptimizerStates), z2, z3,
      ft::ShardingPolicy::fsdp(ft::FsdpSharding::kShardGradOp, 1), ft::ShardingPolicy::fsdp(ft::FsdpSharding::kNoShard, 1),
      with(z2, Acc::kNoSync, 2), with(z3, Acc::kNoSync, 2), with(z3, Acc::kReduceEachMicroBatch, 1),
      with(z3, Acc::kReduceEachMicroBatch, 5)};
  for (const auto& p : policies) {
    CAPTURE(p.name);
    CAPTURE(p.reshard_after_forward);
    CAPTURE(static_cast<int>(p.accumulation));
    CAPTURE(p.grad_buckets);
    Harness h(sharded(p));
    const auto losses = h.train(3);
    for (size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == doctest::Approx(ref_losses[i]).epsilon(1e-6));
    CHECK(ft_test::max_abs_diff(h.strategy->model_state(), ref_weights) < 1e-6);
  }
}

TEST_CASE("zero3 state bytes: shards, grad shards + the bucket pool, Adam state and the two units gathered at once") {
  Harness h(sharded(ft::ShardingPolicy::zero(ft::ZeroStage::kWeights)));
  h.train(1);
  auto& s = dynamic_cast<ft::ShardedStrategy&>(*h.strategy);
  int64_t shards = 0, trainable = 0, peak_pair = 0, prev = 0;
  std::vector<int64_t> sizes;
  for (const auto& f : s.flat_params()) {
    shards += f->layout().padded_numel * 4;
    trainable += f->layout().numel;
    sizes.push_back(f->layout().padded_numel);
    CHECK(f->full_bytes_held() == 0);  // everything resharded after the step
    peak_pair = std::max(peak_pair, prev + f->layout().padded_numel * 4);
    prev = f->layout().padded_numel * 4;
  }
  const ft::StateBytes b = h.strategy->state_bytes();
  CHECK(b.params == shards + peak_pair);  // limit_all_gathers 1: the unit in use + the prefetched one
  // The pool: the largest unit or two of the others. The word table, the
  // last flat param, has no bucket.
  const auto& g = s.group();
  REQUIRE(g.word_unit() == h.model->num_units());
  REQUIRE(static_cast<int>(sizes.size()) == g.word_unit() + 1);
  sizes.pop_back();
  const int64_t pool = ft::grad_pool_capacity(sizes, 2);
  std::sort(sizes.rbegin(), sizes.rend());
  CHECK(pool == std::max(sizes[0], sizes[1] + sizes[2]));
  CHECK(b.grads == shards + 4 * pool);
  CHECK(b.optimizer == 2 * 4 * trainable);
  CHECK(b.params + b.grads + b.optimizer ==
        ft::sharded_state_bytes(3, unit_sizes(*h.model), 1, 2, 1, word_table(tiny_config())).total());
  CHECK(g.word_scratch_bytes() > 0);
}

TEST_CASE("the gradient bucket pool: at most grad_buckets units' full gradients at once, nothing allocated after step 1") {
  for (int buckets : {1, 2, 3}) {
    CAPTURE(buckets);
    for (auto stage : {ft::ZeroStage::kGradients, ft::ZeroStage::kWeights}) {
      auto p = ft::ShardingPolicy::zero(stage);
      p.grad_buckets = buckets;
      Harness h(sharded(p));
      h.train(1);
      const ft::StateBytes first = h.strategy->state_bytes();
      h.train(2, 1);
      const ft::StateBytes later = h.strategy->state_bytes();
      CHECK(later.grads == first.grads);
      CHECK(later.params == first.params);
      const auto& g = dynamic_cast<ft::ShardedStrategy&>(*h.strategy).group();
      // tiny_model has 4 units that train: the bound is reached and holds.
      CHECK(g.peak_live_buckets() == buckets);
      CHECK(g.overflow_buckets() == 0);
    }
  }
  // no_sync keeps every unit's full gradient: 4Ψ more than the shards.
  auto p = ft::ShardingPolicy::zero(ft::ZeroStage::kGradients);
  p.accumulation = ft::GradAccumulation::kNoSync;
  Harness h(sharded(p));
  h.train(2);
  int64_t full = 0;
  const auto& units = dynamic_cast<ft::ShardedStrategy&>(*h.strategy).flat_params();
  for (const auto& f : units) full += f->layout().padded_numel * 4;
  // world 1: a shard is the whole unit; the word table has no bucket.
  CHECK(h.strategy->state_bytes().grads == full + full - units.back()->layout().padded_numel * 4);
}

TEST_CASE("the bucket pool's ring: first in, first out, waits when full, never overlaps") {
  ft::GradBucketPool pool(10, 2);
  CHECK(pool.held_bytes() == 0);
  at::Tensor a = pool.take(4, at::kFloat);
  at::Tensor b = pool.take(5, at::kFloat);
  CHECK(pool.held_bytes() == 40);
  CHECK_FALSE(pool.fits(1));  // two live: the bound
  pool.give_oldest();         // a's [0, 4) is free again
  CHECK(pool.fits(4));
  CHECK_FALSE(pool.fits(5));  // [9, 10) and [0, 4): no 5 in a row
  at::Tensor c = pool.take(4, at::kFloat);
  CHECK(c.data_ptr<float>() == a.data_ptr<float>());  // wrapped to the start
  pool.give_oldest();
  pool.give_oldest();
  CHECK(pool.fits(10));
  CHECK(ft_test::error_of([] { ft::GradBucketPool(0, 2); }) ==
        "gradient bucket pool: capacity 0 and bucket limit 2 must be >= 1");
}

TEST_CASE("full state moves between replicated and sharded strategies, optimizer state included") {
  Harness ref(std::make_shared<ft::ReplicatedStrategy>());
  ref.train(2);
  Harness z(sharded(ft::ShardingPolicy::zero(ft::ZeroStage::kWeights)));
  auto opt = ref.strategy->optimizer_state();
  z.strategy->load_state(ref.strategy->model_state(), &opt);
  auto zopt = z.strategy->optimizer_state();
  CHECK(zopt.step == 2);
  CHECK(ft_test::max_abs_diff(zopt.tensors, opt.tensors) == 0.0);
  CHECK(ft_test::max_abs_diff(z.strategy->model_state(), ref.strategy->model_state()) == 0.0);
  const auto a = ref.train(2, 2), b = z.train(2, 2);
  CHECK(b[1] == doctest::Approx(a[1]).epsilon(1e-6));
  CHECK(ft_test::max_abs_diff(z.strategy->model_state(), ref.strategy->model_state()) < 1e-6);
  CHECK(ft_test::error_of([&] { z.strategy->load_state({}, nullptr); }) == "checkpoint: missing tensor 'bert.embeddings.position_embeddings.weight'");
}

// ---------------------------------------------------------------- real ft runs

namespace {

ft_test::RunOutput ft_parity(const std::string& extra, const std::filesystem::path& metrics) {
  return ft_test::run_ft(fmt::format("run --config configs/parity-tiny.yaml --threads 1 --metrics-out {} {}",
                                     metrics.string(), extra));
}

}  // namespace

TEST_CASE("zero3 on 4 ranks saves at step 4; ddp on 2 ranks and single resume it and match the uninterrupted run") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("zero-resume");
  // The single-strategy weights after 4 steps.
  auto single = ft_parity(fmt::format("--strategy single --max-steps 4 --output-dir {}", (tmp.path() / "single").string()),
                          tmp.path() / "single.jsonl");
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  auto z3 = ft_parity(fmt::format("--strategy zero3 --nproc 4 --set train.batch_size=8 --max-steps 4 --output-dir {}",
                                  (tmp.path() / "z3").string()),
                      tmp.path() / "z3.jsonl");
  INFO(z3.output);
  REQUIRE(z3.exit_code == 0);
  const auto final_dir = tmp.path() / "z3" / "final";
  CHECK(std::filesystem::exists(final_dir / "config.json"));
  CHECK(std::filesystem::exists(final_dir / "training_state" / "optimizer.safetensors"));
  const auto z3_weights = ft::safetensors::load((final_dir / "model.safetensors").string());
  const auto single_weights = ft::safetensors::load((tmp.path() / "single" / "final" / "model.safetensors").string());
  CHECK(ft_test::max_abs_diff(z3_weights, single_weights) < 1e-5);

  struct Resume {
    const char* name;
    const char* flags;
  };
  for (const Resume& r : {Resume{"ddp", "--strategy ddp --nproc 2 --set train.batch_size=16"},
                          Resume{"single", "--strategy single"}}) {
    CAPTURE(r.name);
    ft_test::check_resumed_steps(final_dir, r.flags, tmp.path() / (std::string(r.name) + "-resume.jsonl"));
  }
}

TEST_CASE("bench-mini at 2 and 4 ranks: model-state bytes per rank equal ft's cost model exactly") {
  FT_REQUIRE_SHARED("fixtures/bench-mini");
  ft_test::TempDir tmp("zero-mem");
  ft::BertConfig c = ft::BertConfig::from_json_file((ft_test::shared_dir() / "fixtures/bench-mini/config.json").string());
  const std::vector<int64_t> units = unit_sizes(ft::EncoderModel(c));
  int64_t psi = 0;
  for (int64_t n : units) psi += n;
  for (int world : {2, 4}) {
    CAPTURE(world);
    // The last rank's shards end in the padding, which has no Adam state.
    int64_t padding = 0;
    for (int64_t n : units) padding += (n + world - 1) / world * world - n;
    const ft::WordTableShape words = word_table(c);  // zero2/3: whole rows per rank
    padding += ((words.rows + world - 1) / world * world - words.rows) * words.width;
    std::map<std::string, int64_t> rank0;
    for (const std::string name : {"zero1", "zero2", "zero3"}) {
      CAPTURE(name);
      const ft::ShardedStateBytes theory = ft::sharded_state_bytes(name.back() - '0', units, world, 2, 1, words);
      const auto metrics = tmp.path() / fmt::format("{}-{}.jsonl", name, world);
      auto out = ft_test::run_ft(fmt::format(
          "run --config configs/bench-mini.yaml --strategy {} --nproc {} --threads 1 --set train.batch_size=2 "
          "--max-steps 2 --metrics-out {}",
          name, world, metrics.string()));
      INFO(out.output);
      REQUIRE(out.exit_code == 0);
      const auto summary = ft_test::read_events(metrics, "summary");
      REQUIRE(summary.size() == 1);
      const auto per_rank = summary[0].at("model_state_bytes").get<std::vector<int64_t>>();
      REQUIRE(per_rank.size() == static_cast<size_t>(world));
      CHECK(per_rank[0] == theory.total());
      for (int64_t b : per_rank) CHECK((b <= theory.total() && b >= theory.total() - 8 * padding));
      rank0[name] = per_rank[0];
    }
    // The paper's terms, with the pool (B) and gathered units (G) on top.
    const ft::ShardedStateBytes z2 = ft::sharded_state_bytes(2, units, world, 2, 1, words);
    const ft::ShardedStateBytes z3 = ft::sharded_state_bytes(3, units, world, 2, 1, words);
    CHECK(std::abs(static_cast<double>(rank0["zero2"] - z2.buckets) - (4.0 * psi + 12.0 * psi / world)) <= 16.0 * padding);
    CHECK(std::abs(static_cast<double>(rank0["zero3"] - z3.buckets - z3.gathered) - 16.0 * psi / world) <= 16.0 * padding);
    if (world == 4) {
      CHECK(rank0["zero3"] < rank0["zero2"]);
      CHECK(rank0["zero2"] < rank0["zero1"]);
      CHECK(rank0["zero1"] < 16 * psi);
    }
  }
}

namespace {
// Rank `rank` of 2 (world 1: the whole batch) trains 3 steps of a batch
// whose ranks hold different numbers of real tokens, padding ids (0) after
// them. Returns the full weights afterwards; `check` sees the strategy.
// The model is made by the caller: torch's generator is one per process, so
// two threads seeding and drawing at once would interleave their draws.
ft::TensorList train_two_rank_batches(const std::shared_ptr<ft::Strategy>& strategy,
                                      const std::shared_ptr<ft::EncoderModel>& model, int rank,
                                      int world, int port, bool padding_free,
                                      const std::function<void(ft::Strategy&)>& check = nullptr) {
  model->set_padding_free(padding_free);
  const ft_test::RankSetup setup(*strategy, model, rank, world, port);
  for (int s = 0; s < 3; ++s) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2000 + s);
    at::Tensor ids = at::randint(1, 41, {4, 7}, gen, at::kLong);
    at::Tensor mask = at::ones({4, 7}, at::kLong);
    for (int row = 0; row < 4; ++row) {  // rows 0, 1 (rank 0) keep 7 and 5 tokens; rows 2, 3 keep 3 and 6
      const int64_t keep = std::vector<int64_t>{7, 5, 3, 6}[static_cast<size_t>(row)];
      mask[row].narrow(0, keep, 7 - keep).zero_();
      ids[row].narrow(0, keep, 7 - keep).zero_();
    }
    // The padding id inside the text too: nn.Embedding's padding_idx keeps
    // its row untrained even where it is attended.
    ids[0][1] = 0;
    ids[2][2] = 0;
    const at::Tensor labels = at::randint(0, 3, {4}, gen, at::kLong);
    const int64_t rows = 4 / world;
    ft::Batch b;
    b.input_ids = ids.narrow(0, rank * rows, rows);
    b.attention_mask = mask.narrow(0, rank * rows, rows);
    b.token_type_ids = at::zeros({rows, 7}, at::kLong);
    b.labels = labels.narrow(0, rank * rows, rows);
    auto loss = at::cross_entropy_loss(strategy->forward(b), b.labels);
    strategy->backward(loss, true);
    strategy->step({1e-2, 0.0});
  }
  if (check) check(*strategy);
  ft::TensorList out = strategy->model_state();
  strategy->teardown();
  return out;
}
}  // namespace

std::shared_ptr<ft::EncoderModel> two_rank_model() {
  at::manual_seed(3);
  return std::make_shared<ft::EncoderModel>(ft_test::two_rank_config());
}
TEST_CASE("two ranks: the word table split by rows trains like the replicated table (uneven tokens, padding row)") {
  at::set_num_threads(1);
  const std::string table = "bert.embeddings.word_embeddings.weight";
  const at::Tensor initial = two_rank_model()->named_parameters()[table].detach().clone();
  const ft::TensorList ref =
      train_two_rank_batches(std::make_shared<ft::ReplicatedStrategy>(), two_rank_model(), 0, 1, 0, false);
  for (auto stage : {ft::ZeroStage::kGradients, ft::ZeroStage::kWeights}) {
    for (bool padding_free : {false, true}) {
      CAPTURE(static_cast<int>(stage));
      CAPTURE(padding_free);
      const int port = ft::pick_free_port("127.0.0.1");
      ft::TensorList results[2];
      std::string errors[2];
      const std::shared_ptr<ft::EncoderModel> models[2] = {two_rank_model(), two_rank_model()};
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
          try {
            results[r] = train_two_rank_batches(
                sharded(ft::ShardingPolicy::zero(stage)), models[r], r, 2, port, padding_free, [&](ft::Strategy& s) {
                  const auto& g = dynamic_cast<ft::ShardedStrategy&>(s).group();
                  if (g.word_unit() < 0) throw std::runtime_error("the word table was not split");
                  const ft::FlatParam& words = *g.units()[static_cast<size_t>(g.word_unit())];
                  // 41 rows: 21 whole rows per rank, never gathered under zero3.
                  if (words.layout().padded_numel != 42 * 8) throw std::runtime_error("not whole rows per rank");
                  if (stage == ft::ZeroStage::kWeights && words.full_bytes_held() != 0) {
                    throw std::runtime_error("zero3 gathered the word table");
                  }
                });
          } catch (const std::exception& e) {
            errors[r] = e.what();
          }
        });
      }
      for (auto& t : threads) t.join();
      REQUIRE(errors[0] == "");
      REQUIRE(errors[1] == "");
      CHECK(ft_test::max_abs_diff(results[0], ref) < 1e-5);
      CHECK(ft_test::max_abs_diff(results[1], ref) < 1e-5);
      // The padding row (id 0) never trains.
      for (const auto& [name, t] : results[0]) {
        if (name == table) CHECK(at::equal(t[0], initial[0]));
      }
    }
  }
}
