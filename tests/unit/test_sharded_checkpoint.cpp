// Sharded checkpoints: each rank writes its shard and metadata without
// gathering; read_sharded_checkpoint / `ft consolidate` rebuild the full
// model and optimizer state.
//
// Two ranks run as two threads of this process, each with its own Comm
// (Gloo over loopback) and its own model, so a real 2-way zero3 shard set is
// written in a few seconds.
#include <unistd.h>

#include <map>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "ft/comm/comm.h"
#include "ft_two_ranks.h"
#include "ft/checkpoint/consolidate.h"
#include "ft/comm/launcher.h"
#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/optim/precision.h"
#include "ft/parallel/replicated_strategy.h"
#include "ft/io/safetensors.h"
#include "sharded_strategy.h"
#include "ft_run.h"
#include "ft_weights.h"

namespace {


// Global batch of 4 rows; rank r of `world` takes rows [r*4/world, ...).
ft::Batch batch(int step, int rank, int world) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto ids = at::randint(1, 41, {4, 6}, gen, at::kLong);
  auto labels = at::randint(0, 3, {4}, gen, at::kLong);
  const int64_t rows = 4 / world;
  ft::Batch b;
  b.input_ids = ids.narrow(0, rank * rows, rows);
  b.attention_mask = at::ones({rows, 6}, at::kLong);
  b.token_type_ids = at::zeros({rows, 6}, at::kLong);
  b.labels = labels.narrow(0, rank * rows, rows);
  return b;
}

struct RankResult {
  ft::TensorList model;
  ft::OptimizerState optimizer;
  std::string error;
};

// Trains 2 steps under `strategy` as rank `rank` of `world`, then saves shards to `dir`.
RankResult run_rank(std::shared_ptr<ft::Strategy> strategy, int rank, int world, int port,
                    const std::filesystem::path& dir, const std::shared_ptr<ft::EncoderModel>& model) {
  RankResult r;
  try {
    const ft_test::RankSetup setup(*strategy, model, rank, world, port);
    for (int s = 0; s < 2; ++s) {
      ft::Batch b = batch(s, rank, world);
      auto loss = at::cross_entropy_loss(strategy->forward(b), b.labels);
      strategy->backward(loss, true);
      strategy->step({1e-2, 0.0});
    }
    if (auto* sc = strategy->ability<ft::ShardedCheckpointing>()) sc->save_sharded(dir);
    setup.comm->barrier();
    r.model = strategy->model_state();
    r.optimizer = strategy->optimizer_state();
    strategy->teardown();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

TEST_CASE("zero3 on 2 ranks writes equal shards; consolidating them gives the full model and optimizer state") {
  at::set_num_threads(1);
  ft_test::TempDir tmp("sharded");
  const auto dir = tmp.path() / "ckpt";
  const int port = ft::pick_free_port("127.0.0.1");
  std::vector<std::shared_ptr<ft::EncoderModel>> models;
  for (int r = 0; r < 2; ++r) {
    at::manual_seed(3);
    models.push_back(std::make_shared<ft::EncoderModel>(ft_test::two_rank_config()));
  }
  RankResult results[2];
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        results[r] = run_rank(std::make_shared<ft::ShardedStrategy>(ft::ShardingPolicy::zero(ft::ZeroStage::kWeights)),
                              r, 2, port, dir, models[static_cast<size_t>(r)]);
      });
    }
    for (auto& t : threads) t.join();
  }
  REQUIRE(results[0].error.empty());
  REQUIRE(results[1].error.empty());

  // The same 2 steps on one rank, replicated: the reference.
  at::manual_seed(3);
  auto ref_model = std::make_shared<ft::EncoderModel>(ft_test::two_rank_config());
  RankResult ref = run_rank(std::make_shared<ft::ReplicatedStrategy>(), 0, 1, 0, tmp.path() / "unused", ref_model);
  REQUIRE(ref.error.empty());
  CHECK(ft_test::max_abs_diff(results[0].model, ref.model) < 1e-5);

  // Shards: one file per rank, equal sizes, metadata describes the layout.
  auto meta = ft::read_sharded_meta(dir);
  CHECK(meta.world_size == 2);
  CHECK(meta.strategy == "zero3");
  CHECK(meta.optimizer_step == 2);
  CHECK(meta.optimizer_buffers == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  // The model's 4 units, then the word table split by rows (its own layout).
  REQUIRE(meta.units.size() == 5);
  CHECK(meta.units[0].entries[0].name == "bert.embeddings.position_embeddings.weight");
  CHECK(meta.units[0].numel == 16 * 8 + 2 * 8 + 16);
  CHECK(meta.units[0].padded_numel == meta.units[0].numel);  // even
  CHECK(meta.units[3].numel == 8 * 8 + 8 + 3 * 8 + 3);       // head: 99, odd
  CHECK(meta.units[3].padded_numel == 100);
  REQUIRE(meta.units[4].entries.size() == 1);
  CHECK(meta.units[4].entries[0].name == "bert.embeddings.word_embeddings.weight");
  CHECK(meta.units[4].numel == 41 * 8);
  CHECK(meta.units[4].padded_numel == 42 * 8);  // 41 rows: 21 whole rows per rank
  CHECK(std::filesystem::file_size(ft::shard_file(dir, 0, 2)) > 0);
  const auto shard0 = ft::safetensors::load(ft::shard_file(dir, 0, 2).string());
  const auto shard1 = ft::safetensors::load(ft::shard_file(dir, 1, 2).string());
  REQUIRE(shard0.size() == 15);  // 5 flat params x {param, exp_avg, exp_avg_sq}
  for (size_t i = 0; i < shard0.size(); ++i) CHECK(shard0[i].second.numel() == shard1[i].second.numel());

  // Consolidated == gathered full state (any rank), bit for bit.
  auto c = ft::read_sharded_checkpoint(dir);
  CHECK(ft_test::max_abs_diff(c.model, results[1].model) == 0.0);
  CHECK(c.optimizer.step == 2);
  CHECK(ft_test::max_abs_diff(c.optimizer.tensors, results[0].optimizer.tensors) == 0.0);

  // `ft consolidate DIR --out OUT` writes an HF-loadable model file and the optimizer state.
  const auto out = tmp.path() / "out";
  auto run = ft_test::run_ft(fmt::format("consolidate {} --out {}", dir.string(), out.string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("consolidated 2 shard(s) saved by zero3") != std::string::npos);
  CHECK(ft_test::max_abs_diff(ft::safetensors::load((out / "model.safetensors").string()), ref.model) < 1e-5);
  CHECK(ft::safetensors::metadata((out / "training_state" / "optimizer.safetensors").string()).at("step") == "2");
  ft::EncoderModel loaded(ft_test::two_rank_config());
  loaded.load_weights(ft::read_model_weights((out / "model.safetensors").string()), "consolidated");

  // A missing shard is named.
  std::filesystem::remove(ft::shard_file(dir, 1, 2));
  CHECK(ft_test::error_of([&] { ft::read_sharded_checkpoint(dir); }) ==
        fmt::format("{}: missing (shard of rank 1 of 2)", ft::shard_file(dir, 1, 2).string()));
  CHECK(ft_test::error_of([&] { ft::read_sharded_meta(tmp.path()); })
            .find("holds no sharded checkpoint") != std::string::npos);
}

namespace {
// Every tensor of `a` equals (bit for bit) the one of the same name in `b`, and no more or fewer.
void check_same_tensors(const std::filesystem::path& a, const std::filesystem::path& b) {
  INFO(a.string() << " vs " << b.string());
  auto ta = ft::safetensors::load(a.string());
  auto tb = ft::safetensors::load(b.string());
  REQUIRE(ta.size() == tb.size());
  std::map<std::string, at::Tensor> by_name(tb.begin(), tb.end());
  for (const auto& [name, t] : ta) {
    INFO(name);
    REQUIRE(by_name.count(name) == 1);
    CHECK(at::equal(t, by_name.at(name)));
  }
}
}  // namespace

TEST_CASE("ft run --set train.save_sharded=true: shards beside the full checkpoint consolidate to the same weights") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  // LoRA: the consolidated checkpoint keeps the split the full one has, plain
  // HF base weights in model.safetensors and the adapters in PEFT's files.
  // Hybrid sharding 2 x 2: only the first shard group writes; the second holds copies.
  const std::string zero3 = "--strategy zero3 --nproc 2 --set train.batch_size=16";
  const std::string hybrid =
      "--strategy fsdp --nproc 4 --set train.batch_size=8 --set strategy.options.sharding_strategy=HYBRID_SHARD "
      "--set strategy.options.shard_group_size=2";
  for (const auto& [layout, extra] : std::vector<std::pair<std::string, std::string>>{
           {zero3, ""}, {zero3, "--set lora.rank=4"}, {hybrid, ""}}) {
    CAPTURE(layout);
    CAPTURE(extra);
    ft_test::TempDir tmp("save-sharded");
    const auto out = tmp.path() / "run";
    auto run = ft_test::run_ft(fmt::format(
        "run --config configs/parity-tiny.yaml {} --threads 1 --max-steps 2 --set train.save_sharded=true "
        "--output-dir {} {}",
        layout, out.string(), extra));
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const auto final_dir = out / "final";
    CHECK(std::filesystem::exists(final_dir / "sharded" / "meta.json"));
    CHECK(std::filesystem::exists(final_dir / "sharded" / "rank-1-of-2.safetensors"));
    CHECK(!std::filesystem::exists(final_dir / "sharded" / "rank-2-of-4.safetensors"));
    const auto cons = tmp.path() / "consolidated";
    auto c = ft_test::run_ft(fmt::format("consolidate {} --out {}", final_dir.string(), cons.string()));
    INFO(c.output);
    REQUIRE(c.exit_code == 0);
    check_same_tensors(final_dir / "model.safetensors", cons / "model.safetensors");
    const bool lora = !extra.empty();
    CHECK(std::filesystem::exists(cons / "adapter_model.safetensors") == lora);
    CHECK(std::filesystem::exists(cons / "adapter_config.json") == lora);
    if (lora) {
      check_same_tensors(final_dir / "adapter_model.safetensors", cons / "adapter_model.safetensors");
      CHECK(ft_test::read_text(final_dir / "adapter_config.json") == ft_test::read_text(cons / "adapter_config.json"));
      // The consolidated LoRA checkpoint evaluates like the full one.
      const std::string eval = "eval --config configs/parity-tiny.yaml --set data.dev_fraction=0.25 --checkpoint ";
      auto e1 = ft_test::run_ft(eval + final_dir.string());
      auto e2 = ft_test::run_ft(eval + cons.string());
      INFO(e1.output << e2.output);
      CHECK(e1.exit_code == 0);
      CHECK(e2.exit_code == 0);
      // The lines name the checkpoint evaluated (the start line, the load report), which differs;
      // with its path blanked out, nothing else may.
      const auto results = [](std::string out, const std::string& dir) {
        for (auto at = out.find(dir); at != std::string::npos; at = out.find(dir, at)) out.replace(at, dir.size(), "CKPT");
        return out;
      };
      CHECK(e1.output.rfind("evaluating checkpoint ", 0) == 0);
      CHECK(results(e1.output, final_dir.string()) == results(e2.output, cons.string()));
    }
  }
}
