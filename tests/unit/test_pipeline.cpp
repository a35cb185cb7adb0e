// The pipeline strategy: the stage split, its options, checkpoints that any
// strategy resumes, and what each stage holds. Parity against the PyTorch
// reference (2 and 4 stages x gpipe/1f1b, dp x pp, checkpointing, LoRA) is
// in test_parity.cpp.
#include <fmt/format.h>

#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"
#include "pipeline_strategy.h"

TEST_CASE("unit_costs: compute counts the matmul weights, parameters every element") {
  ft::BertConfig c = ft::BertConfig::preset("tiny");
  c.vocab_size = 1000;
  ft::EncoderModel model(c);
  const auto units = model.unit_parameters();
  const auto compute = ft::unit_costs(units, ft::StageBalance::kCompute);
  const auto params = ft::unit_costs(units, ft::StageBalance::kParameters);
  REQUIRE(compute.size() == 4);  // embeddings, 2 layers, head
  CHECK(compute[0] == 0);
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  CHECK(compute[1] == 4 * h * h + 2 * h * i);
  CHECK(compute[3] == h * h + c.num_labels * h);  // pooler and classifier
  CHECK(params[0] == (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * h + 2 * h);
  CHECK(ft::unit_costs(units, ft::StageBalance::kUnits) == std::vector<int64_t>{1, 1, 1, 1});
}

TEST_CASE("balance_stages: contiguous stages with the smallest largest stage") {
  CHECK(ft::balance_stages({4, 1, 1, 1, 1}, 2) == std::vector<int>{0, 1, 5});
  CHECK(ft::balance_stages({1, 1, 1, 1}, 4) == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(ft::balance_stages({1, 1, 1, 1}, 2) == std::vector<int>{0, 2, 4});
  // Ties go to the later cut: {3, 3 | 3} and {3 | 3, 3} are equal; the first stage keeps more.
  CHECK(ft::balance_stages({3, 3, 3}, 2) == std::vector<int>{0, 2, 3});
  CHECK(ft::balance_stages({5}, 1) == std::vector<int>{0, 1});
  CHECK(ft_test::error_of([] { ft::balance_stages({1, 1}, 3); }) ==
        "pipeline: 3 stages for a model of 2 units; use 1 to 2 stages");
}

TEST_CASE("pipeline options: defaults and errors naming the key") {
  auto o = ft::pipeline_options_from({}, 4);
  CHECK((o.stages == 4 && o.schedule == ft::PipeSchedule::kOneFOneB && o.balance == ft::StageBalance::kCompute));
  auto g = ft::pipeline_options_from({{"stages", "2"}, {"schedule", "GPipe"}, {"balance", "units"}}, 4);
  CHECK((g.stages == 2 && g.schedule == ft::PipeSchedule::kGPipe && g.balance == ft::StageBalance::kUnits));
  CHECK(ft::pipeline_options_from({{"balance", "Time"}}, 2).balance == ft::StageBalance::kTime);
  CHECK(ft_test::error_of([] { ft::pipeline_options_from({{"stages", "3"}}, 4); }) ==
        "strategy.options.stages: 3 stages do not divide the 4 ranks into whole pipelines; pick a divisor of 4");
  CHECK(ft_test::error_of([] { ft::pipeline_options_from({{"schedule", "zb"}}, 2); }) ==
        "strategy.options.schedule: 'zb' is not one of 1f1b, gpipe");
  CHECK(ft_test::error_of([] { ft::pipeline_options_from({{"micro_batches", "4"}}, 2); }) ==
        "strategy.options.micro_batches: unknown option for pipeline (known: stages, schedule, balance)");
}

namespace {

ft_test::RunOutput parity_run(const std::string& flags, const std::filesystem::path& metrics) {
  return ft_test::run_ft(
      fmt::format("run --config configs/parity-tiny.yaml --threads 1 --metrics-out {} {}", metrics.string(), flags));
}

}  // namespace

TEST_CASE("pipeline x2 saves at step 4; single, zero3 x2, tensor x2 and gpipe resume it and match the reference") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("pipe-resume");
  auto pipe = parity_run(fmt::format("--strategy pipeline --nproc 2 --set train.batch_size=8 --set train.grad_accum=4 "
                                     "--max-steps 4 --output-dir {}",
                                     (tmp.path() / "pipe").string()),
                         tmp.path() / "pipe.jsonl");
  INFO(pipe.output);
  REQUIRE(pipe.exit_code == 0);
  // Balanced by compute: the embedding table is a lookup, so layer 0 joins it.
  const auto stages = ft_test::strategy_events(tmp.path() / "pipe.jsonl", "pipeline.stages");
  REQUIRE(stages.size() == 1);
  CHECK(stages[0].at("stages") == 2);
  CHECK(stages[0].at("schedule") == "1f1b");
  CHECK(stages[0].at("balance") == "compute");
  CHECK(stages[0].at("units").at(0).at("first_unit") == "embeddings");
  CHECK(stages[0].at("units").at(0).at("last_unit") == "layer 0");
  // The bubble of the whole pipeline, gathered from both stages into rank 0's
  // file: three timed steps (the first is warm-up), p = 2, m = 4.
  const auto bubble = ft_test::strategy_events(tmp.path() / "pipe.jsonl", "pipeline.bubble");
  REQUIRE(bubble.size() == 1);
  CHECK(bubble[0].at("steps") == 3);
  CHECK(bubble[0].at("theory_fraction").get<double>() == doctest::Approx(0.2));
  const auto idle = bubble[0].at("stage_idle_fractions").get<std::vector<double>>();
  REQUIRE(idle.size() == 2);
  for (double f : idle) CHECK((f > 0 && f < 1));
  CHECK(bubble[0].at("idle_fraction").get<double>() == doctest::Approx((idle[0] + idle[1]) / 2));
  const auto saved = tmp.path() / "pipe" / "final";
  // The checkpoint is the full HF model, not a stage of it.
  ft::BertConfig c = ft::BertConfig::from_json_file((saved / "config.json").string());
  ft::EncoderModel model(c);
  const auto weights = ft::safetensors::load((saved / "model.safetensors").string());
  CHECK(weights.size() == model.weights().size());

  for (const char* flags : {"--strategy single", "--strategy zero3 --nproc 2 --set train.batch_size=16",
                            "--strategy tensor --nproc 2 --set train.batch_size=32",
                            "--strategy pipeline --nproc 2 --set train.batch_size=16 --set train.grad_accum=2 "
                            "--set strategy.options.schedule=gpipe"}) {
    CAPTURE(flags);
    ft_test::check_resumed_steps(saved, flags, tmp.path() / "resume.jsonl");
  }
}

TEST_CASE("balance: time splits by each unit's measured forward and backward, and reports them per stage") {
  FT_REQUIRE_SHARED("fixtures/bench-mini");
  ft_test::TempDir tmp("pipe-time");
  const auto metrics = tmp.path() / "m.jsonl";
  ft_test::run_ok(fmt::format(
      "run --config configs/bench-mini.yaml --strategy pipeline --nproc 2 --threads 1 --set train.batch_size=4 "
      "--set train.grad_accum=2 --set strategy.options.balance=time --max-steps 1 --metrics-out {}",
      metrics.string()));
  const auto stages = ft_test::strategy_events(metrics, "pipeline.stages");
  REQUIRE(stages.size() == 1);
  INFO(stages[0].dump());
  CHECK(stages[0].at("stages") == 2);
  CHECK(stages[0].at("schedule") == "1f1b");
  CHECK(stages[0].at("balance") == "time");
  const auto& units = stages[0].at("units");
  REQUIRE(units.size() == 2);
  // Both stages carry their measured milliseconds; the embeddings' lookup is
  // cheap, so stage 0 holds at least one layer besides them.
  for (const auto& u : units) CHECK(u.at("ms").get<double>() > 0);
  CHECK(units[0].at("first_unit") == "embeddings");
  CHECK(units[0].at("last_unit").get<std::string>().rfind("layer ", 0) == 0);
  CHECK(units[1].at("first_unit").get<std::string>().rfind("layer ", 0) == 0);
}

TEST_CASE("bench-mini: each pipeline stage holds only its units' parameters, gradients and optimizer state") {
  FT_REQUIRE_SHARED("fixtures/bench-mini");
  ft_test::TempDir tmp("pipe-mem");
  ft::BertConfig c = ft::BertConfig::from_json_file((ft_test::shared_dir() / "fixtures/bench-mini/config.json").string());
  ft::EncoderModel model(c);
  const auto units = model.unit_parameters();
  const auto sizes = ft::unit_costs(units, ft::StageBalance::kParameters);
  int64_t psi = 0;
  for (int64_t n : sizes) psi += n;
  for (int stages : {2, 4}) {
    CAPTURE(stages);
    const auto bounds = ft::balance_stages(ft::unit_costs(units, ft::StageBalance::kCompute), stages);
    const auto metrics = tmp.path() / fmt::format("pipe{}.jsonl", stages);
    auto out = ft_test::run_ft(fmt::format(
        "run --config configs/bench-mini.yaml --strategy pipeline --nproc {} --threads 1 --set train.batch_size=2 "
        "--max-steps 1 --metrics-out {}",
        stages, metrics.string()));
    INFO(out.output);
    REQUIRE(out.exit_code == 0);
    const auto per_rank = ft_test::summary_of(metrics).at("model_state_bytes").get<std::vector<double>>();
    REQUIRE(per_rank.size() == static_cast<size_t>(stages));
    double total = 0;
    for (int s = 0; s < stages; ++s) {
      int64_t n = 0;
      for (int u = bounds[static_cast<size_t>(s)]; u < bounds[static_cast<size_t>(s) + 1]; ++u) n += sizes[static_cast<size_t>(u)];
      // fp32 weights, their gradients, and AdamW's two moments: 16 bytes each.
      CHECK(per_rank[static_cast<size_t>(s)] == doctest::Approx(16.0 * static_cast<double>(n)));
      total += per_rank[static_cast<size_t>(s)];
    }
    CHECK(total == doctest::Approx(16.0 * static_cast<double>(psi)));
  }
}
