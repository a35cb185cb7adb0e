// dp (DataParallel): the real `ft` on ../shared/fixtures/parity-tiny.
//
// The loss is computed on the gathered logits of the whole batch, so dp must
// reproduce the PyTorch reference (i.e. `single`) within fp32 noise for any
// replica count, including slices of unequal size and accumulation; the
// summary must count every replica's parameters and gradients; bad options
// are one clear error.
#include <string>

#include <fmt/format.h>

#include "ft_run.h"

namespace {

struct DpRun {
  std::vector<double> losses;
  nlohmann::json summary;
};

DpRun run_dp(const std::string& extra) {
  ft_test::TempDir tmp("dp");
  const auto metrics = tmp.path() / "m.jsonl";
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --strategy dp --threads 1 --metrics-out {} {}", metrics.string(), extra);
  auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  DpRun r;
  r.losses = ft_test::step_losses(metrics);
  const auto summaries = ft_test::read_events(metrics, "summary");
  REQUIRE(summaries.size() == 1);
  r.summary = summaries[0];
  return r;
}

void check_reference(const std::vector<double>& got) {
  const auto ref = ft_test::reference_losses();
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("step " << i + 1 << ": got " << got[i] << ", reference " << ref[i]);
    CHECK(std::abs(got[i] - ref[i]) < 1e-4);
  }
}

}  // namespace

TEST_CASE("dp reproduces the PyTorch reference losses and holds one full copy per replica") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  // 3 replicas: slices of 11, 11 and 10 rows; 2 micro-batches accumulated
  // in the replicas before one reduction. (2 replicas: test_parity's table.)
  const auto r = run_dp("--set strategy.options.replicas=3 --set train.batch_size=16 --set train.grad_accum=2");
  check_reference(r.losses);
  const int64_t params = r.summary.at("trainable_params").get<int64_t>();
  CHECK(params == 3184262);
  CHECK(r.summary.at("param_bytes")[0].get<int64_t>() == 3 * 4 * params);
  CHECK(r.summary.at("grad_bytes")[0].get<int64_t>() == 3 * 4 * params);
  CHECK(r.summary.at("optimizer_bytes")[0].get<int64_t>() == 2 * 4 * params);  // one updater: AdamW m, v
  CHECK(r.summary.at("world_size").get<int>() == 1);
}

TEST_CASE("dp option errors name the key") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const std::pair<const char*, const char*> cases[] = {
      {"replicas=0", "strategy.options.replicas: '0' is not an integer from 1 to 1024 (model replicas, e.g. 2)"},
      {"gpus=2", "strategy.options.gpus: unknown option for dp (known: replicas)"},
  };
  for (const auto& [opt, msg] : cases) {
    CAPTURE(opt);
    auto out = ft_test::run_ft(fmt::format(
        "run --config configs/parity-tiny.yaml --strategy dp --threads 1 --set train.max_steps=1 --set strategy.options.{}",
        opt));
    INFO(out.output);
    CHECK(out.exit_code != 0);
    CHECK(out.output.find(msg) != std::string::npos);
  }
}
