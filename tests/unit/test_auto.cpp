// The `auto` strategy: its decision (each installed plugin's MemoryModel
// estimate, ft::plan_strategy, the α-β link fit) in-process, and real
// `ft run --strategy auto` parity runs that delegate to the strategy it
// picked.
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "ft/parallel/abilities.h"
#include "ft/parallel/cost_model.h"
#include "ft/base/error.h"
#include "ft/plugin/plugin_host.h"
#include "ft/parallel/strategy.h"
#include "ft_small_model.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

// A BERT-base-like shape: 110 M parameters, 12 layers; the biggest unit is
// the embeddings (30522 x 768 word embeddings + positions + types + norm).
ft::PlanInputs base_inputs() {
  ft::PlanInputs in;
  in.model.params = 110'000'000;
  in.model.embedding_params = 30522LL * 768;
  in.model.largest_unit_params = 30522LL * 768 + 512LL * 768 + 2LL * 768 + 2LL * 768;
  in.model.num_units = 14;
  in.model.hidden = 768;
  in.model.layers = 12;
  in.model.heads = 12;
  in.world_size = 4;
  in.batch_rows = 8;
  in.seq_len = 128;
  in.link = {50e-6, 1e-9};  // 50 us, 1 GB/s
  in.flops_per_s = 50e9;
  return in;
}

const std::vector<std::string> kDataParallel = {"ddp", "ddp_amp", "zero1", "zero2", "zero3", "fsdp"};
const std::vector<std::string> kAll = {"ddp", "ddp_amp", "zero1", "zero2", "zero3", "fsdp", "pipeline", "tensor"};

// The built-in plugin's MemoryModel of `name`, as `auto` and `ft bench` ask it.
struct Theory {
  std::shared_ptr<ft::Strategy> strategy;
  const ft::MemoryModel* model;
};
Theory theory_of(const std::string& name) {
  const ft::PluginHost host = ft::PluginHost::discover(ft::DiscoveryOptions{});
  Theory t{host.create(name), nullptr};
  t.model = t.strategy->ability<ft::MemoryModel>();
  return t;
}

// What `auto` decides among `names`: each plugin's estimate (those that
// apply to a 2-layer, 2-head model on in.world_size ranks), then the plan.
ft::Plan plan_among(const ft::PlanInputs& in, const std::vector<std::string>& names) {
  const ft::EncoderModel model(ft_test::small_config(2));
  std::vector<ft::CandidateEstimate> estimates;
  for (const auto& name : names) {
    const Theory t = theory_of(name);
    REQUIRE(t.model != nullptr);
    if (auto e = t.model->estimate(in, model)) estimates.push_back(*e);
  }
  return ft::plan_strategy(std::move(estimates), in);
}

const ft::CandidateEstimate& row(const ft::Plan& plan, const std::string& name) {
  for (const auto& e : plan.table) {
    if (e.name == name) return e;
  }
  FAIL("no estimate for " << name);
  return plan.table.front();
}

// The "auto.plan" event of a run: what auto picked, and why.
nlohmann::json plan_of(const std::filesystem::path& metrics) {
  const auto plans = ft_test::strategy_events(metrics, "auto.plan");
  REQUIRE(plans.size() == 1);
  return plans[0];
}

}  // namespace

TEST_CASE("link model: two timed all-reduces give back alpha and beta exactly") {
  // N = 2: one all-reduce of n bytes costs 2α + n·β.
  const double alpha = 1e-4, beta = 1e-9;
  const auto t = [&](int64_t n) { return 2 * alpha + static_cast<double>(n) * beta; };
  const ft::LinkModel link = ft::fit_link_model(2, 1024, t(1024), 4 << 20, t(4 << 20));
  CHECK(link.alpha_s == doctest::Approx(alpha).epsilon(1e-9));
  CHECK(link.beta_s_per_byte == doctest::Approx(beta).epsilon(1e-9));
  // N = 4: 6 latencies and 2·3/4 of the bytes.
  CHECK(ft::ring_allreduce_seconds(link, 4, 1000, 2) == doctest::Approx(12 * alpha + 1.5 * 1000 * beta));
  CHECK(ft::ring_allgather_seconds(link, 4, 1000, 1) == doctest::Approx(3 * alpha + 0.75 * 1000 * beta));
  CHECK(ft::ring_allreduce_seconds(link, 1, 1000, 5) == 0.0);
  const ft::LinkModel alone = ft::fit_link_model(1, 1024, 0.5, 4096, 0.9);
  CHECK(alone.alpha_s == 0.0);
  CHECK(alone.beta_s_per_byte == 0.0);
  CHECK_THROWS_AS(ft::fit_link_model(2, 4096, 0.1, 1024, 0.2), ft::Error);
}

TEST_CASE("ZeRO Table 1 through ft's cost model: 7.5 B parameters, K = 12, 64 ranks, within 1%") {
  const ft::StateAccounting zero = ft::StateAccounting::mixed_precision(12.0);
  const double psi = 7.5e9, gb = 1e9;
  // Rajbhandari et al. 2020, Table 1, the Ψ = 7.5 B, N_d = 64 column.
  const double paper[] = {120.0, 31.4, 16.6, 1.88};
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    const double ft_gb = ft::zero_state_bytes(stage, psi, 64, zero) / gb;
    CHECK(std::abs(ft_gb - paper[stage]) / paper[stage] < 0.01);
  }
  // ft's own fp32 accounting is the same formulas with 4 + 4 + 8 bytes.
  CHECK(ft::zero_state_bytes(2, 1000, 4, ft::StateAccounting::fp32()) == 4000 + 3000);
  const std::string report = ft::zero_table1_report();
  CHECK(report.find("P_os+g+p        1.875       1.88") != std::string::npos);
  CHECK(report.find("baseline      120.000        120") != std::string::npos);
}

TEST_CASE("sharded engine state per rank from its units: padding, the bucket pool, the gathered units") {
  // Units of 10, 7, 7, 3 parameters on 2 ranks: padded 10, 8, 8, 4 (30).
  const std::vector<int64_t> units = {10, 7, 7, 3};
  const auto z1 = ft::sharded_state_bytes(1, units, 2);
  CHECK(z1.total() == 4 * 30 + 4 * 27 + 8 * 15);
  const auto z2 = ft::sharded_state_bytes(2, units, 2);
  CHECK(z2.buckets == 4 * 16);  // two layers of 8 beat the 10 alone
  CHECK(z2.total() == 4 * 30 + 4 * 15 + 4 * 16 + 8 * 15);
  const auto z3 = ft::sharded_state_bytes(3, units, 2);
  CHECK(z3.gathered == 4 * 18);  // the first unit and the prefetched next
  CHECK(z3.total() == 4 * 15 + 4 * 18 + 4 * 15 + 4 * 16 + 8 * 15);
  CHECK(ft::sharded_state_bytes(3, units, 2, 1, 0).gathered == 4 * 10);
  CHECK(ft::sharded_state_bytes(0, units, 2).total() == 0);
  // A word table of 3 rows x 2 in unit 0, split by rows: its own 8 (two rows
  // per rank), unit 0 keeps 4; neither bucketed nor gathered.
  const ft::WordTableShape words{3, 2};
  CHECK(ft::sharded_state_bytes(1, units, 2, 2, 1, words).total() == z1.total());
  const auto w2 = ft::sharded_state_bytes(2, units, 2, 2, 1, words);
  CHECK(w2.params == 4 * 32);
  CHECK(w2.grads == 4 * 16);
  CHECK(w2.buckets == 4 * 12);  // a layer of 8 and the next largest, 4
  CHECK(w2.optimizer == 8 * 16);
  const auto w3 = ft::sharded_state_bytes(3, units, 2, 2, 1, words);
  CHECK(w3.params == 4 * 16);
  CHECK(w3.gathered == 4 * 16);  // two layers now; unit 0 is 4
  CHECK(w3.buckets == 4 * 12);
  CHECK(ft::grad_pool_capacity({100, 10, 10, 10}, 2) == 100);
  CHECK(ft::grad_pool_capacity({100, 10, 10, 10}, 1) == 100);
  CHECK(ft::grad_pool_capacity({8, 8, 8}, 2) == 16);
}

TEST_CASE("every built-in strategy states its memory: formula and bytes per rank (fp32 AdamW: 16 B per parameter)") {
  ft::TheoryInputs in;
  in.model.params = 1000;
  in.model.unit_params = {1000};
  in.world_size = 4;
  auto bytes = [&](const std::string& name, std::map<std::string, std::string> options = {}) {
    const Theory t = theory_of(name);
    REQUIRE(t.model != nullptr);
    ft::TheoryInputs with = in;
    with.options = std::move(options);
    return t.model->theory_bytes(with);
  };
  auto formula = [](const std::string& name, std::map<std::string, std::string> options = {}) {
    return theory_of(name).model->memory_formula(options);
  };
  for (const std::string name : {"single", "ddp", "ddp_amp", "horovod"}) {
    CAPTURE(name);
    CHECK(bytes(name) == 16000);
    CHECK(formula(name) == "16Ψ");
  }
  // One unit of 1000 over 4 ranks: shards of 250; zero2/3 add the pool (the
  // unit, 4000 B), zero3 the gathered unit (4000 B).
  CHECK(bytes("zero1") == 4000 + 4000 + 2000);
  CHECK(bytes("zero2") == 4000 + 1000 + 4000 + 2000);
  CHECK(bytes("zero3") == 1000 + 4000 + 1000 + 4000 + 2000);
  CHECK(bytes("fsdp") == bytes("zero3"));
  CHECK(formula("zero1") == "8Ψ+8Ψ/N");
  CHECK(formula("zero2") == "4Ψ+12Ψ/N+B");
  CHECK(formula("zero3") == "16Ψ/N+G+B");
  // The mode changes the theory: NO_SHARD is DDP's, SHARD_GRAD_OP keeps every
  // unit gathered from forward to backward (ZeRO-2's memory).
  CHECK(bytes("fsdp", {{"sharding_strategy", "NO_SHARD"}}) == 16000);
  CHECK(formula("fsdp", {{"sharding_strategy", "NO_SHARD"}}) == "16Ψ");
  CHECK(formula("fsdp", {{"sharding_strategy", "SHARD_GRAD_OP"}}) == "4Ψ+12Ψ/N+B");
  // Units of 400, 300, 300: zero3 gathers the unit in use and the next
  // (700 at most), SHARD_GRAD_OP all three, limit_all_gathers 0 one.
  in.model.unit_params = {400, 300, 300};
  CHECK(bytes("fsdp", {{"sharding_strategy", "SHARD_GRAD_OP"}}) - bytes("zero3") == 4 * (1000 - 700));
  CHECK(bytes("zero3") - bytes("zero3", {{"limit_all_gathers", "0"}}) == 4 * (700 - 400));
  // A row-split word table (a classifier's, 200 of unit 0's 400) has no
  // bucket: zero2's pool of two units is 300 + 200 instead of 300 + 300,
  // unless the option keeps the table whole.
  in.model.sharded_words = {100, 2};
  CHECK(bytes("zero2", {{"shard_word_table", "false"}}) - bytes("zero2") == 4 * (600 - 500));
  in.model.sharded_words = {};
  in.model.unit_params = {1000};
  // A bad option is the strategy's own error, naming the key.
  CHECK_THROWS_WITH_AS(bytes("zero2", {{"grad_buckets", "0"}}), doctest::Contains("strategy.options.grad_buckets"),
                       ft::Error);
  // dp: R replicas, each beyond the first holding weights and grads; the
  // machine's default R is unknown to the theory.
  CHECK(bytes("dp", {{"replicas", "3"}}) == 16000 + 16000);
  CHECK(bytes("dp") == -1);
  CHECK(formula("dp") == "16Ψ+8Ψ(R-1)");
  CHECK(bytes("pipeline") == 4000);
  CHECK(bytes("pipeline", {{"stages", "2"}}) == 8000);
  // tensor: 16 B for each replicated parameter, 16/N for each cut one.
  CHECK(bytes("tensor") == -1);  // unknown without the cut count
  in.model.sliceable_params = 800;
  CHECK(bytes("tensor") == 16 * 200 + 16 * 200);
  CHECK(formula("tensor") == "16Ψr+16Ψs/N");
  CHECK(theory_of("auto").model == nullptr);  // auto's theory is its pick's
  // BERT-base: 12 x (4 x 768² + 2 x 768 x 3072 + 3 x 768 + 3072) + 30522 x 768.
  CHECK(ft::tensor_sliced_params(768, 3072, 12, 30522, 768, true) ==
        12 * (4 * 768 * 768 + 2 * 768 * 3072 + 3 * 768 + 3072) + 30522 * 768);
  // ELECTRA-small: its word table is 128 wide, under layers of 256.
  CHECK(ft::tensor_sliced_params(256, 1024, 12, 30522, 128, true) ==
        12 * (4 * 256 * 256 + 2 * 256 * 1024 + 3 * 256 + 1024) + 30522 * 128);
}

TEST_CASE("auto picks a DDP variant when the model state fits") {
  ft::PlanInputs in = base_inputs();
  ft::Plan plan = plan_among(in, kDataParallel);
  // fp32: ddp_amp is not a separate candidate (same class, other default precision).
  REQUIRE(plan.table.size() == 5);
  CHECK(plan.choice().name == "ddp");
  CHECK(row(plan, "ddp").state_bytes == 16 * 110'000'000LL);
  CHECK(row(plan, "zero3").state_bytes == 16 * 110'000'000LL / 4);
  // Bytes each rank moves: 2(N-1)/N·4Ψ for ddp, 3(N-1)/N·4Ψ for zero1/zero3.
  CHECK(row(plan, "ddp").comm_bytes == 660'000'000);
  CHECK(row(plan, "zero1").comm_bytes == 990'000'000);
  CHECK(row(plan, "zero3").comm_bytes == 990'000'000);
  CHECK(plan.reason.find("no memory limit") != std::string::npos);

  in.mixed_precision = true;
  plan = plan_among(in, kDataParallel);
  CHECK(plan.choice().name == "ddp_amp");
  // 16-bit weight copies on top of the fp32 state.
  CHECK(row(plan, "ddp_amp").extra_bytes == 2 * 110'000'000LL);

  // A limit that DDP (16Ψ + activations) fits still picks it.
  in.mixed_precision = false;
  in.memory_limit_bytes = row(plan_among(in, kDataParallel), "ddp").total_bytes;
  CHECK(plan_among(in, kDataParallel).choice().name == "ddp");
}

TEST_CASE("auto picks zero3/fsdp when only a full shard fits the memory limit") {
  ft::PlanInputs in = base_inputs();
  const ft::Plan open = plan_among(in, kDataParallel);
  // Between the full-shard total and the ZeRO-2 total: only zero3 and fsdp fit.
  REQUIRE(row(open, "zero3").total_bytes < row(open, "zero2").total_bytes);
  in.memory_limit_bytes = row(open, "zero3").total_bytes + 1;
  const ft::Plan plan = plan_among(in, kDataParallel);
  CHECK(plan.choice().name == "zero3");
  CHECK_FALSE(row(plan, "ddp").fits);
  CHECK_FALSE(row(plan, "zero2").fits);
  CHECK(row(plan, "fsdp").fits);
  CHECK(plan.reason.find("ddp, zero1, zero2 would not fit") != std::string::npos);

  // Only fsdp installed among the sharded ones: fsdp.
  CHECK(plan_among(in, {"ddp", "zero1", "zero2", "fsdp"}).choice().name == "fsdp");

  // ZeRO-2 holds gradient shards (4Ψ + 12Ψ/N) plus the bucket pool, counted
  // as extra: here the embedding unit alone (no other units given); it
  // reduce-scatters, so it moves fewer bytes than ZeRO-1 too.
  CHECK(row(open, "zero2").state_bytes == 4 * 110'000'000LL + 12 * 110'000'000LL / 4);
  CHECK(row(open, "zero2").state_bytes < row(open, "zero1").state_bytes);
  CHECK(row(open, "zero2").extra_bytes == 4 * in.model.largest_unit_params);
  CHECK(row(open, "zero2").comm_bytes < row(open, "zero1").comm_bytes);
  in = base_inputs();

  // Nothing fits: the least memory, and the reason says so.
  in.memory_limit_bytes = 1 << 20;
  const ft::Plan none = plan_among(in, kDataParallel);
  CHECK(none.choice().name == "zero3");
  CHECK(none.reason.find("no candidate fits") != std::string::npos);

  // dp and horovod have a theory but no estimate: auto never picks them.
  const ft::EncoderModel model(ft_test::small_config(2));
  for (const std::string name : {"single", "dp", "horovod"}) CHECK_FALSE(theory_of(name).model->estimate(in, model));
  CHECK_THROWS_WITH_AS(ft::plan_strategy({}, in), doctest::Contains("no candidate"), ft::Error);
}

TEST_CASE("auto weighs pipeline and tensor: pipeline when only a model split fits, tensor when a layer is too big "
          "for one rank") {
  ft::PlanInputs in = base_inputs();
  in.model.sliceable_params = 85'000'000 + 30522LL * 768;  // the 12 layers and the word embeddings
  const ft::Plan open = plan_among(in, kAll);
  REQUIRE(open.table.size() == 7);
  CHECK(open.choice().name == "ddp");  // no limit: the bubble and the activation all-reduces cost more
  const auto& pp = row(open, "pipeline");
  CHECK(pp.state_bytes == 16 * 110'000'000LL / 4);
  CHECK(pp.formula == "16Ψ/N");
  // Two activation sends per micro-batch, N = 4 micro-batches of 8 x 128 x 768 fp32.
  CHECK(pp.comm_bytes == 8LL * 4 * 8 * 128 * 768);
  const auto& tp = row(open, "tensor");
  const int64_t sliced = in.model.sliceable_params;
  CHECK(tp.state_bytes == 16 * (110'000'000LL - sliced) + 16 * sliced / 4);
  CHECK(tp.formula == "16Ψr+16Ψs/N");
  // 4 all-reduces per layer and the embeddings', each of the group's 4 x 8 rows.
  CHECK(tp.collectives == 4 * 12 + 1);
  CHECK(tp.compute_s == doctest::Approx(row(open, "ddp").compute_s));  // the same FLOPs per rank

  // BERT-base on 4 ranks with room for a quarter of the model but not for
  // ZeRO-3's 7Ψ: the pipeline.
  in.memory_limit_bytes = pp.total_bytes + 1;
  ft::Plan plan = plan_among(in, kAll);
  CHECK(plan.choice().name == "pipeline");
  CHECK(plan.reason.find("ddp, zero1, zero2, zero3, fsdp, tensor would not fit") != std::string::npos);

  // Two huge layers (hidden 2048, 50 M parameters each): one layer's 16 B
  // per parameter exceed the limit, so no pipeline stage and no gathered
  // ZeRO-3 unit fits; a quarter of every layer does.
  in = base_inputs();
  const int64_t layer = 12LL * 2048 * 2048 + 13LL * 2048, words = 8000LL * 2048;
  in.model = {};
  in.model.params = 2 * layer + words + 2048LL * 2048 + 600'000;
  in.model.embedding_params = words;
  in.model.largest_unit_params = layer;
  in.model.sliceable_params = 2 * layer + words;
  in.model.num_units = 4;
  in.model.hidden = 2048;
  in.model.layers = 2;
  in.model.heads = 16;
  in.batch_rows = 2;
  const ft::Plan wide = plan_among(in, kAll);
  in.memory_limit_bytes = row(wide, "tensor").total_bytes + 1;
  REQUIRE(16 * layer > in.memory_limit_bytes);
  plan = plan_among(in, kAll);
  CHECK(plan.choice().name == "tensor");
  CHECK_FALSE(row(plan, "pipeline").fits);
  CHECK_FALSE(row(plan, "zero3").fits);
}

TEST_CASE("ft run --strategy auto reproduces the parity reference and says what it picked") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const auto ref = ft_test::reference_losses();
  ft_test::TempDir dir("auto");

  // Alone: DDP at world size 1.
  const auto metrics1 = dir.path() / "one.jsonl";
  auto out = ft_test::run_ft("run -c configs/parity-tiny.yaml --strategy auto --metrics-out '" + metrics1.string() + "'");
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  CHECK(plan_of(metrics1).at("picked") == "ddp");
  auto losses = ft_test::step_losses(metrics1);
  REQUIRE(losses.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) CHECK(std::abs(losses[i] - ref[i]) < 1e-4);

  // Four ranks with a limit only a full shard fits (parity-tiny: Ψ = 3 184 262,
  // 16Ψ = 48.6 MiB; zero3 holds 16Ψ/N = 12.1 MiB + the gathered units and
  // the bucket pool).
  const auto metrics2 = dir.path() / "two.jsonl";
  out = ft_test::run_ft("run -c configs/parity-tiny.yaml --strategy auto --nproc 4 --set train.batch_size=8"
                        " --set strategy.options.memory_limit_mb=47 --set strategy.options.batch_size=1"
                        " --set strategy.options.seq_len=64 --set strategy.options.candidates=ddp,zero3"
                        " --metrics-out '" + metrics2.string() + "'");
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  const auto plan = plan_of(metrics2);
  CHECK(plan.at("picked") == "zero3");
  for (const auto& c : plan.at("candidates")) CHECK(c.at("fits") == (c.at("name") == "zero3"));
  CHECK(plan.at("reason").get<std::string>().find("ddp would not fit") != std::string::npos);
  losses = ft_test::step_losses(metrics2);
  REQUIRE(losses.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) CHECK(std::abs(losses[i] - ref[i]) < 1e-4);
  // The summary reports the chosen strategy's sharded state: 16Ψ/N = 4Ψ per
  // rank plus the gathered units and the bucket pool (two layers each, the
  // word table being split by rows), well under ZeRO-2's 7Ψ.
  const auto summary = ft_test::read_events(metrics2, "summary");
  REQUIRE(summary.size() == 1);
  for (const auto& b : summary[0].at("model_state_bytes")) {
    CHECK(b.get<int64_t>() >= 4 * 3184262 - 8 * 4);
    CHECK(b.get<int64_t>() < 6 * 3184262);
  }
}

TEST_CASE("auto keeps the global batch when it picks pipeline or tensor: the parity reference at 2 x 16 rows") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir dir("auto-mp");
  const struct {
    const char* picked;
    const char* scaled;  // what auto multiplies by the ranks per data-parallel group
  } cases[] = {{"pipeline", "micro_batches"}, {"tensor", "rows"}};
  for (const auto& c : cases) {
    CAPTURE(c.picked);
    const auto metrics = dir.path() / (std::string(c.picked) + ".jsonl");
    const auto saved = dir.path() / c.picked;
    const auto out = ft_test::run_ok(fmt::format("run -c configs/parity-tiny.yaml --strategy auto --nproc 2 --threads 1 "
                                                 "--set train.batch_size=16 --set strategy.options.candidates={} "
                                                 "--metrics-out {} --output-dir {}",
                                                 c.picked, metrics.string(), saved.string()));
    CHECK(plan_of(metrics).at("picked") == c.picked);
    const auto kept = ft_test::strategy_events(metrics, "auto.global_batch");
    REQUIRE(kept.size() == 1);
    CHECK(kept[0] == nlohmann::json{{"strategy", c.picked}, {"world_size", 2}, {"scale", 2}, {"scaled", c.scaled}});
    CHECK(out.find("global batch 32") != std::string::npos);
    ft_test::check_same_losses(ft_test::reference_losses(), metrics, c.picked, 1e-5);
    // The saved run config keeps what was asked, not the scaled batch.
    const std::string yaml = ft_test::read_text(saved / "final/training_state/run.yaml");
    CHECK(yaml.find("  batch_size: 16\n") != std::string::npos);
    CHECK(yaml.find("  grad_accum: 1\n") != std::string::npos);
  }
}

TEST_CASE("auto rejects a bad option naming the key") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const auto out = ft_test::run_ft("run -c configs/parity-tiny.yaml --strategy auto --max-steps 1"
                                   " --set strategy.options.memory_limit_mb=lots");
  CHECK(out.exit_code != 0);
  CHECK(out.output.find("strategy.options.memory_limit_mb: 'lots' is not a number > 0 (MiB per rank, e.g. 512)") !=
        std::string::npos);
}

TEST_CASE("auto forwards the picked strategy's abilities: save_sharded writes shards under auto") {
  ft_test::TempDir dir("auto-sharded");
  ft_test::write_tiny_task(dir.path());
  // One candidate: the pick does not hang on the cost model's numbers
  // (the choice itself is tested above).
  const auto out_dir = dir.path() / "run";
  const auto metrics = dir.path() / "m.jsonl";
  const auto out = ft_test::run_ft(fmt::format(
      "run --config {}/run.yaml --strategy auto --nproc 2 --max-steps 2 --timeout 60 --output-dir {} "
      "--set train.save_sharded=true --set strategy.options.candidates=zero2 --metrics-out {}",
      dir.path().string(), out_dir.string(), metrics.string()));
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  CHECK(plan_of(metrics).at("picked") == "zero2");
  CHECK(out.output.find("save_sharded") == std::string::npos);  // no "not written" warning
  const auto sharded = out_dir / "final" / "sharded";
  CHECK(std::filesystem::exists(sharded / "meta.json"));
  CHECK(std::filesystem::exists(sharded / "rank-0-of-2.safetensors"));
  CHECK(std::filesystem::exists(sharded / "rank-1-of-2.safetensors"));
}

TEST_CASE("save_sharded with a strategy that cannot shard: one warning line, the full checkpoint only") {
  ft_test::TempDir dir("auto-unsharded");
  ft_test::write_tiny_task(dir.path());
  const auto out_dir = dir.path() / "run";
  const auto metrics = dir.path() / "m.jsonl";
  const auto out = ft_test::run_ft(fmt::format(
      "run --config {}/run.yaml --strategy auto --max-steps 1 --timeout 60 --output-dir {} "
      "--set train.save_sharded=true --set strategy.options.candidates=ddp --metrics-out {}",
      dir.path().string(), out_dir.string(), metrics.string()));
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  CHECK(plan_of(metrics).at("picked") == "ddp");
  const std::string warning =
      "ft: warning: train.save_sharded=true, but sharded checkpoints are not written by strategy 'auto'; "
      "only the consolidated checkpoint is saved\n";
  const auto at = out.output.find(warning);
  CHECK(at != std::string::npos);
  CHECK(out.output.find(warning, at + 1) == std::string::npos);
  CHECK(std::filesystem::exists(out_dir / "final" / "model.safetensors"));
  CHECK_FALSE(std::filesystem::exists(out_dir / "final" / "sharded"));
}
