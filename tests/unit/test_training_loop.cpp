// The loop's user-facing controls (docs/training-loop.md): class weights,
// label smoothing and focal loss against their definitions (rows and
// token classification's tokens); ROC-AUC, PR-AUC,
// MCC and weighted F1 against scikit-learn (a committed fixture); early
// stopping that ends every rank at the same step, and load_best_model_at_end.
#include <algorithm>
#include <cmath>
#include <fstream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/comm/comm.h"
#include "ft/tasks/class_loss.h"
#include "ft/train/objective.h"
#include "ft/base/error.h"
#include "ft/observe/metrics.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;
using nlohmann::json;

// The loss of one row from its definition, in double: PyTorch's
// CrossEntropyLoss with weight w and label_smoothing e is
// (1 - e) * w[y] * -log p[y] + e / K * sum_c w[c] * -log p[c];
// focal: w[y] * (1 - p[y])^gamma * -log p[y].
double reference_row(const std::vector<double>& z, int64_t y, const std::vector<double>& w, double e, double gamma) {
  const size_t k = z.size();
  double m = z[0], sum = 0;
  for (double v : z) m = std::max(m, v);
  for (double v : z) sum += std::exp(v - m);
  auto nll = [&](size_t c) { return -(z[c] - m - std::log(sum)); };
  auto weight = [&](size_t c) { return w.empty() ? 1.0 : w[c]; };
  const auto yc = static_cast<size_t>(y);
  if (gamma > 0) return weight(yc) * std::pow(1 - std::exp(-nll(yc)), gamma) * nll(yc);
  double smooth = 0;
  for (size_t c = 0; c < k; ++c) smooth += weight(c) * nll(c);
  return (1 - e) * weight(yc) * nll(yc) + e / static_cast<double>(k) * smooth;
}

// The mean as PyTorch reduces a weighted loss: sum over rows / sum of w[y].
double reference_mean(const at::Tensor& logits, const at::Tensor& labels, const ft::ClassLossOptions& o) {
  const at::Tensor z = logits.to(at::kDouble).contiguous();
  double total = 0, weights = 0;
  for (int64_t i = 0; i < z.size(0); ++i) {
    std::vector<double> row(z[i].data_ptr<double>(), z[i].data_ptr<double>() + z.size(1));
    const int64_t y = labels[i].item<int64_t>();
    total += reference_row(row, y, o.class_weights, o.label_smoothing, o.focal_gamma);
    weights += o.class_weights.empty() ? 1.0 : o.class_weights[static_cast<size_t>(y)];
  }
  return total / weights;
}

json fixture() {
  std::ifstream in(ft_test::source_dir() / "tests/data/metrics/sklearn.json");
  REQUIRE(in.good());
  return json::parse(in);
}

void check_score(const ft::ClassificationReport& r, const json& expected, const char* name) {
  INFO(name);
  REQUIRE(r.score(name).has_value());
  CHECK(std::abs(*r.score(name) - expected.at(name).get<double>()) < 1e-6);
}

// The tiny task with a dev set (its own training rows) and an evaluation
// every 2 steps; `extra` adds flags.
std::string tiny_run(const fsys::path& dir, const std::string& extra, int max_steps = 40) {
  return fmt::format(
      "run --config {0}/run.yaml --set data.dev={0}/train.jsonl --set train.eval_every=2 --max-steps {2} "
      "--output-dir {0}/out --metrics-out {0}/m.jsonl --timeout 60 {1}",
      dir.string(), extra, max_steps);
}

// How far the run got, from its final checkpoint's trainer state.
int64_t final_step(const fsys::path& dir) {
  std::ifstream in(dir / "out/final/training_state/trainer_state.json");
  REQUIRE(in.good());
  return json::parse(in).at("global_step").get<int64_t>();
}

}  // namespace

TEST_CASE("class weights, label smoothing and focal loss match their definitions (1e-6)") {
  at::manual_seed(7);
  const at::Tensor logits = at::randn({24, 3}, at::kFloat) * 2;
  const at::Tensor labels = at::randint(0, 3, {24}, at::kLong);
  const std::vector<ft::ClassLossOptions> cases = {
      {{}, 0.0, 0.0},          {{0.5, 2.0, 1.25}, 0.0, 0.0}, {{}, 0.1, 0.0},
      {{0.5, 2.0, 1.25}, 0.2, 0.0}, {{}, 0.0, 2.0},           {{0.5, 2.0, 1.25}, 0.0, 1.5}};
  for (const auto& o : cases) {
    INFO("weights " << o.class_weights.size() << " smoothing " << o.label_smoothing << " gamma " << o.focal_gamma);
    const double got = ft::class_loss_terms(logits, labels, o).mean().item<double>();
    CHECK(std::abs(got - reference_mean(logits, labels, o)) < 1e-6);
  }
  // gamma 0 is the weighted cross-entropy; the gradient flows through both.
  const at::Tensor x = logits.clone().requires_grad_(true);
  ft::class_loss_terms(x, labels, {{0.5, 2.0, 1.25}, 0.0, 1.0}).mean().backward();
  CHECK(x.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("class_weights auto is scikit-learn's balanced weighting (multi-label: negatives / positives); lists and names are checked") {
  // Label counts of 12 rows: {8, 3, 1}.
  const ft::LabelCounts labels{{8, 3, 1}, 12, false};
  ft::ClassWeights spec;
  spec.automatic = true;
  // compute_class_weight('balanced'): n / (k * count) = 12 / (3 * {8, 3, 1})
  const auto w = ft::resolve_class_weights(spec, labels, {"a", "b", "c"}, 3, "run.yaml");
  REQUIRE(w.size() == 3);
  CHECK(w[0] == doctest::Approx(0.5));
  CHECK(w[1] == doctest::Approx(12.0 / 9.0));
  CHECK(w[2] == doctest::Approx(4.0));
  // Multi-label, 12 rows holding the labels {8, 3, 0} times: BCE's pos_weight, negatives / positives; unseen 1.
  const auto pos = ft::resolve_class_weights(spec, ft::LabelCounts{{8, 3, 0}, 12, true}, {"a", "b", "c"}, 3, "run.yaml");
  CHECK(pos == std::vector<double>{0.5, 3.0, 1.0});
  ft::ClassWeights named;
  named.by_name = {{"c", 3.0}};
  CHECK(ft::resolve_class_weights(named, labels, {"a", "b", "c"}, 3, "run.yaml") == std::vector<double>{1, 1, 3});
  ft::ClassWeights wrong;
  wrong.values = {1.0, 2.0};
  CHECK(ft_test::error_of([&] { ft::resolve_class_weights(wrong, labels, {"a", "b", "c"}, 3, "run.yaml"); })
            .find("run.yaml: train.class_weights: 2 weights for 3 labels") != std::string::npos);
  ft::ClassWeights unknown;
  unknown.by_name = {{"d", 2.0}};
  CHECK(ft_test::error_of([&] { ft::resolve_class_weights(unknown, labels, {"a", "b", "c"}, 3, "run.yaml"); })
            .find("no label 'd'") != std::string::npos);
}

TEST_CASE("weighted token classification: micro-batch losses over the step's divisor are CrossEntropyLoss(weight)'s mean") {
  at::manual_seed(11);
  const auto comm = ft::Comm::create(ft::DistEnv{});
  // Two micro-batches of 9 and 14 labelled tokens over 4 tags.
  const at::Tensor logits = at::randn({23, 4}, at::kFloat) * 2;
  const at::Tensor labels = at::randint(0, 4, {23}, at::kLong);
  const std::vector<ft::ClassLossOptions> cases = {
      {{}, 0.0, 0.0}, {{0.25, 3.0, 1.5, 0.5}, 0.0, 0.0}, {{0.25, 3.0, 1.5, 0.5}, 0.1, 0.0}, {{}, 0.0, 2.0}};
  for (const auto& o : cases) {
    INFO("weights " << o.class_weights.size() << " smoothing " << o.label_smoothing << " gamma " << o.focal_gamma);
    const auto objective = ft::make_token_classification_objective({"B-X", "I-X", "B-Y", "O"}, o);
    std::vector<ft::Batch> micro(2);
    micro[0].labels = labels.narrow(0, 0, 9);
    micro[1].labels = labels.narrow(0, 9, 14);
    const double divisor = objective->step_divisor(micro, *comm);
    const double step = (objective->loss(logits.narrow(0, 0, 9), micro[0]).item<double>() +
                         objective->loss(logits.narrow(0, 9, 14), micro[1]).item<double>()) /
                        divisor;
    CHECK(std::abs(step - reference_mean(logits, labels, o)) < 1e-6);
  }
}

TEST_CASE("weighted F1, MCC, ROC-AUC and PR-AUC match scikit-learn on fixed predictions (1e-6)") {
  const json f = fixture();
  for (const char* name : {"binary", "four_classes"}) {
    INFO(name);
    const json& c = f.at(name);
    const auto k = c.at("classes").get<int64_t>();
    const auto labels = c.at("labels").get<std::vector<int64_t>>();
    auto r = ft::classification_report(c.at("preds").get<std::vector<int64_t>>(), labels, k, 0.0);
    ft::add_ranking_scores(r, c.at("probs").get<std::vector<double>>(), labels, k);
    const json& e = c.at("expected");
    for (const char* metric : {"accuracy", "macro_f1", "weighted_f1", "mcc", "roc_auc", "pr_auc"}) check_score(r, e, metric);
    CHECK(json(r.confusion) == e.at("confusion"));
  }
  const json& m = f.at("multi_label");
  const auto k = m.at("labels_n").get<int64_t>();
  const auto truth = m.at("truth").get<std::vector<uint8_t>>();
  auto r = ft::multi_label_report(ft::multi_label_counts(m.at("decided").get<std::vector<uint8_t>>(), truth, k), 0.0);
  ft::add_multi_label_ranking_scores(r, m.at("scores").get<std::vector<double>>(), truth, k);
  for (const char* metric : {"micro_f1", "macro_f1", "subset_accuracy", "roc_auc", "pr_auc"}) check_score(r, m.at("expected"), metric);
  // MCC of a perfect and of a constant prediction.
  CHECK(ft::matthews_corrcoef({{5, 0}, {0, 7}}) == doctest::Approx(1.0));
  CHECK(ft::matthews_corrcoef({{5, 0}, {7, 0}}) == 0.0);
}

TEST_CASE("early stopping ends every rank at the same step: single, ddp x2, zero3 x2, and from TrainingArguments") {
  // Threshold 10: no evaluation after the first counts as an improvement, so
  // patience 2 stops at the third evaluation, step 6 of 40.
  const std::string stop = "--set train.best_metric=loss --set train.early_stopping_patience=2 "
                           "--set train.early_stopping_threshold=10";
  for (const std::string strategy : {"single", "ddp --nproc 2", "zero3 --nproc 2"}) {
    INFO(strategy);
    ft_test::TempDir tmp("early-stop");
    ft_test::write_tiny_task(tmp.path());
    const std::string out = ft_test::run_ok(tiny_run(tmp.path(), stop + " --strategy " + strategy));
    CHECK(out.find("early stopping at step 6: loss has not improved in 2 evaluation(s)") != std::string::npos);
    CHECK(ft_test::summary_of(tmp.path() / "m.jsonl").at("steps") == 6);
    CHECK(ft_test::read_events(tmp.path() / "m.jsonl", "eval").size() == 3);
    const auto early = ft_test::read_events(tmp.path() / "m.jsonl", "early_stopping");
    REQUIRE(early.size() == 1);
    // The best is the lowest loss (a strict improvement, whatever the threshold).
    const auto evals = ft_test::read_events(tmp.path() / "m.jsonl", "eval");
    const auto lowest = std::min_element(evals.begin(), evals.end(), [](const json& a, const json& b) {
      return a.at("loss").get<double>() < b.at("loss").get<double>();
    });
    CHECK(early[0].at("best_step") == lowest->at("step"));
    CHECK(final_step(tmp.path()) == 6);
  }
  ft_test::TempDir tmp("early-stop-ta");
  ft_test::write_tiny_task(tmp.path());
  std::ofstream(tmp.path() / "args.json") << R"({"eval_strategy": "steps", "eval_steps": 2, "save_steps": 2,
    "metric_for_best_model": "eval_loss", "early_stopping_patience": 2, "early_stopping_threshold": 10,
    "learning_rate": 5e-3, "warmup_steps": 5, "per_device_train_batch_size": 4, "seed": 11, "logging_steps": 1})";
  const std::string out =
      ft_test::run_ok(tiny_run(tmp.path(), fmt::format("--training-args {}/args.json", tmp.path().string())));
  CHECK(out.find("early stopping at step 6") != std::string::npos);
  CHECK(final_step(tmp.path()) == 6);
}

TEST_CASE("load_best_model_at_end writes the best evaluation's weights to final/") {
  // greater_is_better on the loss makes the worst-loss evaluation "best": an
  // early one, so final/ must differ from the last weights.
  ft_test::TempDir tmp("load-best");
  ft_test::write_tiny_task(tmp.path());
  ft_test::run_ok(tiny_run(tmp.path(), "--set train.best_metric=loss --set train.greater_is_better=true "
                                       "--set train.load_best_model_at_end=true --set train.save_total_limit=1", 10));
  const auto evals = ft_test::read_events(tmp.path() / "m.jsonl", "eval");
  REQUIRE(evals.size() == 5);
  size_t best = 0;
  for (size_t i = 1; i < evals.size(); ++i) {
    if (evals[i].at("loss").get<double>() > evals[best].at("loss").get<double>()) best = i;
  }
  const int64_t best_step = evals[best].at("step").get<int64_t>();
  REQUIRE(best_step < 10);
  const fsys::path best_dir = tmp.path() / "out" / fmt::format("checkpoint-{}", best_step);
  REQUIRE(fsys::exists(best_dir / "model.safetensors"));  // kept by the rotation as the best
  CHECK(ft_test::read_text(tmp.path() / "out/final/model.safetensors") == ft_test::read_text(best_dir / "model.safetensors"));
  // The summary reports the weights it wrote.
  CHECK(ft_test::summary_of(tmp.path() / "m.jsonl").at("eval_loss").get<double>() ==
        doctest::Approx(evals[best].at("loss").get<double>()).epsilon(1e-12));
}

TEST_CASE("the loop's keys refuse what they cannot do, one line each") {
  ft_test::TempDir tmp("loop-keys");
  ft_test::write_tiny_task(tmp.path());
  auto run = [&](const std::string& extra) {
    return ft_test::run_ft(fmt::format("run --config {}/run.yaml --max-steps 1 {}", tmp.path().string(), extra));
  };
  const auto no_dev = run("--set train.early_stopping_patience=2 --set train.eval_every=1");
  CHECK(no_dev.exit_code != 0);
  CHECK(no_dev.output.find("train.early_stopping_patience: needs evaluations, and there is no dev set") != std::string::npos);
  const auto mismatch = run(fmt::format("--set data.dev={}/train.jsonl --set train.eval_every=2 --set train.save_every=3 "
                                        "--set train.load_best_model_at_end=true --output-dir {}/out",
                                        tmp.path().string(), tmp.path().string()));
  CHECK(mismatch.exit_code != 0);
  CHECK(mismatch.output.find("train.save_every (3) must equal train.eval_every (2)") != std::string::npos);
  const auto weights = run("--set train.class_weights=[1,2,3]");
  CHECK(weights.exit_code != 0);
  CHECK(weights.output.find("train.class_weights: 3 weights for 2 labels") != std::string::npos);
  // Pretraining's loss is not shaped: refused, not ignored.
  const auto pretrain = ft_test::run_ft(
      fmt::format("pretrain --config {}/run.yaml --max-steps 1 --set train.class_weights=auto", tmp.path().string()));
  CHECK(pretrain.exit_code != 0);
  CHECK(pretrain.output.find("train.class_weights: shapes cross-entropy over classes; this run is") != std::string::npos);
  const auto both = run("--set train.focal_loss_gamma=2 --set train.label_smoothing_factor=0.1");
  CHECK(both.exit_code != 0);
  CHECK(both.output.find("do not combine") != std::string::npos);
  // A weighted, smoothed run trains.
  const auto ok = run(fmt::format("--set 'train.class_weights={{neg: 1, pos: 3}}' --set train.label_smoothing_factor=0.1 "
                                  "--metrics-out {}/m.jsonl",
                                  tmp.path().string()));
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(std::isfinite(ft_test::step_losses(tmp.path() / "m.jsonl").at(0)));
}

TEST_CASE("named dev sets: each is evaluated and reported under its name, and best_metric reads the one it names") {
  ft_test::TempDir tmp("named-dev");
  const fsys::path d = tmp.path();
  ft_test::write_tiny_task(d);
  {  // "flipped": ten training rows with the other label, so its metrics differ from "train"'s
    std::ifstream in(d / "train.jsonl");
    std::ofstream out(d / "flipped.jsonl");
    std::string line;
    for (int i = 0; i < 10 && std::getline(in, line); ++i) {
      json j = json::parse(line);
      j["label"] = j["label"] == "pos" ? "neg" : "pos";
      out << j.dump() << "\n";
    }
  }
  // Threshold 10: patience 2 stops at the third evaluation, step 6 of 10.
  const std::string run = fmt::format(
      "run --config {0}/run.yaml --set train.eval_every=2 --max-steps 10 --timeout 60 --set train.early_stopping_patience=2 "
      "--set train.early_stopping_threshold=10 ",
      d.string());
  const std::string named = fmt::format("--set 'data.dev={{train: {0}/train.jsonl, flipped: {0}/flipped.jsonl}}'", d.string());
  const std::string out = ft_test::run_ok(run + named + fmt::format(" --set train.best_metric=flipped_loss "
                                                                    "--output-dir {0}/out --metrics-out {0}/named.jsonl",
                                                                    d.string()));
  CHECK(out.find("96 train / 96 train + 10 flipped dev rows") != std::string::npos);
  CHECK(out.find("eval step 2 (flipped): loss") != std::string::npos);
  const auto evals = ft_test::read_events(d / "named.jsonl", "eval");
  REQUIRE(evals.size() == 6);
  std::vector<json> flipped;
  for (size_t i = 0; i < evals.size(); ++i) {
    CHECK(evals[i].at("dev") == (i % 2 == 0 ? "train" : "flipped"));
    CHECK(evals[i].at("step") == 2 * static_cast<int64_t>(i / 2 + 1));
    CHECK(evals[i].at("samples") == (i % 2 == 0 ? 96 : 10));
    if (i % 2 == 1) flipped.push_back(evals[i]);
  }
  // Early stopping and the summary follow the set best_metric names.
  const auto early = ft_test::read_events(d / "named.jsonl", "early_stopping");
  REQUIRE(early.size() == 1);
  CHECK(early[0].at("metric") == "flipped_loss");
  const auto lowest = std::min_element(flipped.begin(), flipped.end(), [](const json& a, const json& b) {
    return a.at("loss").get<double>() < b.at("loss").get<double>();
  });
  CHECK(early[0].at("best_step") == lowest->at("step"));
  const json summary = ft_test::summary_of(d / "named.jsonl");
  CHECK(summary.at("eval_dev") == "flipped");
  CHECK(summary.at("eval_loss") == flipped.back().at("loss"));

  // The "train" set reads exactly as the same file given alone (same weights, same rows).
  ft_test::run_ok(run + fmt::format("--set data.dev={0}/train.jsonl --set train.best_metric=loss --metrics-out {0}/one.jsonl",
                                    d.string()));
  const auto single = ft_test::read_events(d / "one.jsonl", "eval");
  REQUIRE(single.size() == 3);
  for (size_t i = 0; i < single.size(); ++i) {
    CHECK_FALSE(single[i].contains("dev"));
    for (const char* key : {"loss", "accuracy", "macro_f1", "roc_auc"}) CHECK(single[i].at(key) == evals[2 * i].at(key));
  }

  // ft eval of the checkpoint reads both sets back from its saved config.
  ft_test::run_ok(fmt::format("eval --checkpoint {0}/out/final --set runtime.metrics_out={0}/eval.jsonl", d.string()));
  const auto again = ft_test::read_events(d / "eval.jsonl", "eval");
  REQUIRE(again.size() == 2);
  CHECK(again[0].at("dev") == "train");
  CHECK(again[1].at("dev") == "flipped");
  CHECK(again[1].at("loss").get<double>() == doctest::Approx(flipped.back().at("loss").get<double>()).epsilon(1e-9));

  // ft pretrain leaves both sets' rows out of its corpus and evaluates the masked LM on each.
  const std::string pre = ft_test::run_ok(fmt::format(
      "pretrain --config {0}/run.yaml --set 'data.dev={{flipped: {0}/flipped.jsonl, again: {0}/flipped.jsonl}}' "
      "--max-steps 2 --set train.eval_every=2 --metrics-out {0}/mlm.jsonl",
      d.string()));
  CHECK(pre.find("the 20 dev rows a fine-tuning run") != std::string::npos);
  const auto mlm = ft_test::read_events(d / "mlm.jsonl", "eval");
  REQUIRE(mlm.size() == 2);
  CHECK(mlm[0].at("dev") == "flipped");
  CHECK(mlm[1].at("dev") == "again");
  CHECK(mlm[0].at("loss") == mlm[1].at("loss"));  // the same rows, the same weights
  CHECK(mlm[1].at("task") == "masked_lm");

  // Bad names and metrics: one line each.
  auto refused = [&](const std::string& sets, const std::string& extra, const std::string& expected) {
    const auto r = ft_test::run_ft(fmt::format("run --config {}/run.yaml --max-steps 1 --set 'data.dev={}' {}", d.string(),
                                               sets, extra));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find(expected) != std::string::npos);
  };
  refused("{a: \"\"}", "", "data.dev.a: the file is empty");
  refused("{a: }", "", "data.dev.a: expected a file path, got nothing");
  refused("{x y: f.jsonl}", "", "data.dev: dev set name 'x y'");
  refused("{a: [f.jsonl]}", "", "data.dev.a: expected a file path");
  refused(fmt::format("{{a: {}/flipped.jsonl}}", d.string()), "--set train.best_metric=b_loss",
          "train.best_metric: unknown value 'b_loss'");
}
