// Freezing, layer-wise LR decay and the head LR (ft/optim/param_plan.h): the plan
// values themselves, and what a distributed run does with them.
#include <cmath>

#include <fmt/format.h>

#include "ft/config/config.h"
#include "ft/model/model.h"
#include "ft/optim/param_plan.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"

namespace {

ft::EncoderModel tiny_model() {
  ft::BertConfig c = ft::BertConfig::preset("tiny");  // 2 layers
  return ft::EncoderModel(c);
}

const std::string kQuery0 = "bert.encoder.layer.0.attention.self.query.weight";
const std::string kQuery1 = "bert.encoder.layer.1.attention.self.query.weight";

}  // namespace

TEST_CASE("glob_match: * spans dots, ? is one character, the whole name must match") {
  CHECK(ft::glob_match("bert.embeddings.*", "bert.embeddings.word_embeddings.weight"));
  CHECK(ft::glob_match("*.LayerNorm.*", "bert.encoder.layer.1.output.LayerNorm.bias"));
  CHECK(ft::glob_match("bert.encoder.layer.?.attention.*", kQuery1));
  CHECK_FALSE(ft::glob_match("bert.encoder.layer.?.attention", kQuery1));
  CHECK_FALSE(ft::glob_match("embeddings.*", "bert.embeddings.word_embeddings.weight"));
  CHECK(ft::glob_match("*", "classifier.bias"));
  CHECK(ft::glob_match("**bias", "classifier.bias"));
  CHECK_FALSE(ft::glob_match("classifier.?", "classifier.bias"));
}

TEST_CASE("plan: layer-wise decay scales the LR by depth below the head; head_lr replaces it on the head") {
  auto model = tiny_model();
  ft::TrainConfig t;
  t.lr = 1e-3;
  t.layer_lr_decay = 0.5;
  auto plan = ft::build_param_plan(model, t);
  CHECK(plan.at("classifier.weight").lr_scale == 1.0);
  CHECK(plan.at("bert.pooler.dense.weight").lr_scale == 1.0);
  CHECK(plan.at(kQuery1).lr_scale == 0.5);
  CHECK(plan.at(kQuery0).lr_scale == 0.25);
  CHECK(plan.at("bert.embeddings.word_embeddings.weight").lr_scale == 0.125);
  for (const auto& [name, s] : plan) CHECK(s.trainable);
  // Decay stays the BERT convention: none on biases and LayerNorm.
  CHECK(plan.at(kQuery0).weight_decay == t.weight_decay);
  CHECK(plan.at("bert.encoder.layer.0.attention.self.query.bias").weight_decay == 0.0);

  t.head_lr = 4e-3;
  plan = ft::build_param_plan(model, t);
  CHECK(plan.at("classifier.weight").lr_scale == doctest::Approx(4.0).epsilon(1e-15));
  CHECK(plan.at(kQuery1).lr_scale == 0.5);
}

TEST_CASE("plan: freeze_layers freezes the embeddings and the first N layers; patterns freeze by name") {
  auto model = tiny_model();
  ft::TrainConfig t;
  t.freeze_layers = 1;
  auto plan = ft::build_param_plan(model, t);
  CHECK_FALSE(plan.at("bert.embeddings.LayerNorm.weight").trainable);
  CHECK_FALSE(plan.at(kQuery0).trainable);
  CHECK(plan.at(kQuery1).trainable);
  CHECK(plan.at("classifier.bias").trainable);

  t.freeze_layers = 0;
  plan = ft::build_param_plan(model, t);
  CHECK_FALSE(plan.at("bert.embeddings.word_embeddings.weight").trainable);
  CHECK(plan.at(kQuery0).trainable);

  t.freeze_layers = -1;
  t.freeze = {"*.attention.*", "bert.pooler.*"};
  plan = ft::build_param_plan(model, t);
  CHECK_FALSE(plan.at(kQuery0).trainable);
  CHECK_FALSE(plan.at("bert.encoder.layer.1.attention.output.LayerNorm.bias").trainable);
  CHECK_FALSE(plan.at("bert.pooler.dense.bias").trainable);
  CHECK(plan.at("bert.encoder.layer.1.intermediate.dense.weight").trainable);
  CHECK(plan.at("bert.embeddings.word_embeddings.weight").trainable);
}

TEST_CASE("plan errors name the key and the fix") {
  auto model = tiny_model();
  ft::TrainConfig t;
  t.freeze = {"bert.encoder.layers.*"};
  CHECK(ft_test::error_of([&] { ft::build_param_plan(model, t); }) ==
        "train.freeze: pattern 'bert.encoder.layers.*' matches no parameter (names look like "
        "'bert.encoder.layer.0.attention.self.query.weight'; use * and ?)");
  t.freeze = {};
  t.freeze_layers = 3;
  CHECK(ft_test::error_of([&] { ft::build_param_plan(model, t); }) ==
        "train.freeze_layers: the model has 2 encoder layers, got 3 (use -1 for none, 0 for the embeddings only)");
  t.freeze_layers = -1;
  t.freeze = {"*"};
  CHECK(ft_test::error_of([&] { ft::build_param_plan(model, t); }).find("every parameter is frozen") !=
        std::string::npos);
  CHECK(ft_test::error_of([&] {
          ft::config_from_yaml_string(ft::default_config_yaml(), "x.yaml", {"train.layer_lr_decay=0"});
        }) == "x.yaml + --set: train.layer_lr_decay: must be > 0 (1 = off)");
}

TEST_CASE("ddp with frozen layers: frozen weights come back bit-identical, trainable ones move, only they hold state") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("freeze-ddp");
  const auto metrics = tmp.path() / "metrics.jsonl";
  auto out = ft_test::run_ft(fmt::format(
      "run --config configs/parity-tiny.yaml --strategy ddp --nproc 2 --threads 1 --set train.batch_size=16 "
      "--set train.max_steps=3 --set train.freeze_layers=0 --set train.freeze=[bert.pooler.*] "
      "--set train.output_dir={} --metrics-out {}",
      (tmp.path() / "out").string(), metrics.string()));
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  const auto initial = ft::safetensors::load((ft_test::shared_dir() / "fixtures/parity-tiny/model.safetensors").string());
  const auto trained = ft::safetensors::load((tmp.path() / "out/final/model.safetensors").string());
  std::map<std::string, at::Tensor> after(trained.begin(), trained.end());
  int64_t trainable = 0, frozen_seen = 0, moved = 0;
  for (const auto& [name, before] : initial) {
    if (!after.count(name)) continue;
    const bool frozen = name.rfind("bert.embeddings.", 0) == 0 || name.rfind("bert.pooler.", 0) == 0;
    INFO(name);
    if (frozen) {
      CHECK(at::equal(before, after.at(name)));
      ++frozen_seen;
    } else {
      trainable += before.numel();
      moved += at::equal(before, after.at(name)) ? 0 : 1;
    }
  }
  CHECK(frozen_seen == 7);  // 3 embedding tables, LayerNorm weight+bias, pooler weight+bias
  CHECK(moved > 0);
  const auto summary = ft_test::read_events(metrics, "summary").at(0);
  CHECK(summary.at("trainable_params").get<int64_t>() == trainable);
  // AdamW: two fp32 moments per trainable element on each DDP replica.
  for (const auto& b : summary.at("optimizer_bytes")) CHECK(b.get<int64_t>() == 2 * 4 * trainable);
  for (const auto& b : summary.at("grad_bytes")) CHECK(b.get<int64_t>() == 4 * trainable);
}
