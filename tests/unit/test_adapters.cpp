// Bottleneck (Houlsby) adapters: injection, names, units, identity at init,
// the parameter formula, what trains, and runs: ddp x 2 and zero3 x 2 equal
// single, checkpoint files, resume, eval, predict, export refused (the real
// `ft` on ../shared/fixtures/parity-tiny).
#include <cmath>
#include <filesystem>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/model/adapter.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"
#include "ft_small_model.h"

namespace fsys = std::filesystem;

namespace {

ft::AdapterConfig adapter(int64_t size, std::vector<std::string> layers = {}) {
  ft::AdapterConfig a;
  a.size = size;
  a.layers = std::move(layers);
  return a;
}


}  // namespace

TEST_CASE("fresh bottleneck adapters: names, units, the parameter formula, and the logits do not change") {
  at::manual_seed(1);
  ft::EncoderModel m(ft_test::small_config(3));
  m.eval();
  const auto batch = ft_test::small_batch();
  torch::NoGradGuard no_grad;
  const at::Tensor before = m.forward(batch);
  const auto sites = ft::apply_bottleneck_adapters(m, adapter(4), 42);
  CHECK(sites.size() == 6u);  // 3 layers x (attention output, FFN output)
  CHECK(sites[0] == "bert.encoder.layer.0.attention.output.dense");
  CHECK(sites[1] == "bert.encoder.layer.0.output.dense");
  CHECK(at::equal(before, m.forward(batch)));  // up = 0: exactly the base model

  int64_t count = 0;
  for (const auto& [n, t] : m.weights()) count += ft::is_bottleneck_param(n) ? t.numel() : 0;
  // 2 sites x 3 layers x (2 d m + m + d), d = 16, m = 4.
  CHECK(count == 2 * 3 * (2 * 16 * 4 + 4 + 16));
  CHECK(count == ft::bottleneck_parameter_count(ft_test::small_config(3), adapter(4)));
  CHECK(m.weights().size() == 57u + 6u * 4u);  // 57 BERT tensors (3 layers) + 6 adapters x 4
  CHECK(m.unit_of("bert.encoder.layer.1.output.dense.adapter_up.weight") == 2);  // sharded with layer 1

  // A subset of layers.
  at::manual_seed(1);
  ft::EncoderModel some(ft_test::small_config(3));
  CHECK(ft::apply_bottleneck_adapters(some, adapter(4, {"2"}), 42).size() == 2u);
  CHECK(ft::bottleneck_parameter_count(ft_test::small_config(3), adapter(4, {"2"})) == 2 * (2 * 16 * 4 + 4 + 16));
  CHECK(ft_test::error_of([&] { ft::adapter_layers(adapter(4, {"3"}), 3); }).find("adapter.layers: '3'") !=
        std::string::npos);

  CHECK(ft::is_bottleneck_trainable("bert.encoder.layer.0.output.dense.adapter_down.bias"));
  CHECK(ft::is_bottleneck_trainable("bert.pooler.dense.weight"));
  CHECK(ft::is_bottleneck_trainable("classifier.bias"));
  CHECK_FALSE(ft::is_bottleneck_trainable("bert.encoder.layer.0.output.dense.weight"));
  CHECK_FALSE(ft::is_bottleneck_trainable("bert.encoder.layer.0.output.LayerNorm.weight"));
}

TEST_CASE("adapter runs: trainable state, ddp and zero3 equal single, checkpoint, resume, eval, predict, export") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("adapter-runs");
  const std::string common =
      "run --config configs/parity-tiny.yaml --threads 1 --set adapter.size=8 --set train.lr=1e-2 "
      "--set train.max_steps=8";
  auto run = [&](const std::string& name, const std::string& extra) {
    const auto metrics = tmp.path() / (name + ".jsonl");
    ft_test::run_ok(fmt::format("{} --metrics-out {} {}", common, metrics.string(), extra));
    return metrics;
  };
  const auto single = run("single", "--strategy single --output-dir " + (tmp.path() / "out").string() +
                                        " --set train.save_every=4");
  const auto ddp = run("ddp", "--strategy ddp --nproc 2 --set train.batch_size=16");
  const auto zero3 = run("zero3", "--strategy zero3 --nproc 2 --set train.batch_size=16");

  // parity-tiny: hidden 128, 2 layers, 6 labels. Adapters 2 x 2 x (2 x 128 x 8
  // + 8 + 128), the pooler 128 x 128 + 128, the classifier 6 x 128 + 6.
  const int64_t trainable = 2 * 2 * (2 * 128 * 8 + 8 + 128) + (128 * 128 + 128) + (6 * 128 + 6);
  for (const auto* m : {&single, &ddp, &zero3}) CHECK(ft_test::summary_of(*m).at("trainable_params") == trainable);
  CHECK(ft_test::summary_of(single).at("optimizer_bytes")[0] == 8 * trainable);

  const auto ref = ft_test::step_losses(single);
  REQUIRE(ref.size() == 8u);
  CHECK(std::abs(ref.back() - ref.front()) > 1e-3);  // it trains
  for (const auto& [name, metrics] : {std::pair{"ddp", ddp}, std::pair{"zero3", zero3}}) ft_test::check_same_losses(ref, metrics, name, 1e-4);

  // Checkpoint: HF-loadable base weights + ft's adapter files.
  const fsys::path final_dir = tmp.path() / "out/final";
  for (const auto& [n, t] : ft::safetensors::load((final_dir / "model.safetensors").string())) {
    INFO(n);
    CHECK_FALSE(ft::is_bottleneck_param(n));
  }
  const auto loaded = ft::load_checkpoint(final_dir, false);
  REQUIRE(loaded.adapter.has_value());
  CHECK(loaded.adapter->size == 8);
  CHECK(loaded.model.size() == 41u + 4u * 4u);

  // Resume from step 4 reproduces steps 5..8.
  const auto resumed = run("resume", "--strategy single --set train.resume_from=" +
                                         (tmp.path() / "out/checkpoint-4").string());
  const auto tail = ft_test::step_losses(resumed);
  REQUIRE(tail.size() == 4u);
  for (size_t i = 0; i < 4; ++i) {
    INFO("resumed step " << i + 5);
    CHECK(std::abs(tail[i] - ref[i + 4]) < 1e-4);
  }

  // eval applies the checkpoint's adapters; adapter.path starts a run from
  // them: its first loss, over all 256 rows at once, is that eval loss, and
  // the base weights (+ head) alone give another.
  const fsys::path data = ft_test::shared_dir() / "fixtures/parity-tiny/data.safetensors";
  const auto eval_metrics = tmp.path() / "eval.jsonl";
  ft_test::run_ok(fmt::format("eval --checkpoint {} --data {} --set runtime.metrics_out={}", final_dir.string(), data.string(),
                     eval_metrics.string()));
  const auto ev = ft_test::read_events(eval_metrics, "eval");
  REQUIRE(ev.size() == 1u);
  const double adapted = ev[0].at("loss").get<double>();
  const std::string from_final = fmt::format("--strategy single --set model.config={0} --set model.weights= "
                                             "--set train.batch_size=256 --set train.max_steps=1",
                                             final_dir.string());
  const auto restart = run("from-adapter", from_final + " --set adapter.path=" + final_dir.string());
  REQUIRE(ft_test::step_losses(restart).size() == 1u);
  CHECK(std::abs(ft_test::step_losses(restart)[0] - adapted) < 1e-5);
  const auto fresh = run("fresh-adapter", from_final);
  CHECK(std::abs(ft_test::step_losses(fresh)[0] - adapted) > 1e-4);

  // Adapters cannot be merged: export says so and writes nothing.
  auto refused = ft_test::run_ft(fmt::format("export {} {}", final_dir.string(), (tmp.path() / "x").string()));
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("cannot be folded into the base weights") != std::string::npos);
  CHECK_FALSE(fsys::exists(tmp.path() / "x"));
}
