// Feature extraction: `ft features extract` writes the pooled features of
// every train/dev row; `ft features train` fits a classifier on them through
// the Trainer and writes a checkpoint whose encoder is the source's, bit for
// bit, and whose `ft eval` gives the head's own final dev loss.
#include <regex>

#include <fmt/format.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace fsys = std::filesystem;

TEST_CASE("features: extract once, train a head on them, and the head's checkpoint evaluates to the same loss") {
  ft_test::TempDir tmp("features");
  ft_test::write_tiny_task(tmp.path());
  const std::string cfg = fmt::format("--config {}/run.yaml --set data.dev_fraction=0.25", tmp.path().string());
  const fsys::path enc = tmp.path() / "enc";
  ft_test::run_ok(fmt::format("run {} --max-steps 30 --output-dir {}", cfg, enc.string()));
  const fsys::path feats = tmp.path() / "feats.safetensors";
  const std::string ex =
      ft_test::run_ok(fmt::format("features extract {} --checkpoint {}/final --out {}", cfg, enc.string(), feats.string()));
  CHECK(ex.find("72 train / 24 dev rows x 16 features") != std::string::npos);  // 96 rows, 25 % held out
  std::map<std::string, at::Tensor> t;
  for (auto& [n, v] : ft::safetensors::load(feats.string())) t[n] = v;
  REQUIRE(t.count("train_features"));
  CHECK(t["train_features"].sizes() == at::IntArrayRef({72, 16}));
  CHECK(t["dev_labels"].sizes() == at::IntArrayRef({24}));
  CHECK(t["train_features"].abs().max().item<double>() <= 1.0);  // the pooler's tanh
  CHECK(ft::safetensors::metadata(feats.string()).at("source") == (enc / "final").string());

  const fsys::path head = tmp.path() / "head";
  const std::string tr = ft_test::run_ok(fmt::format("features train {} --set train.epochs=20 --set train.lr=1e-2 "
                                                     "--features {} --output-dir {}",
                                                     cfg, feats.string(), head.string()));
  INFO(tr);
  // The Trainer's run: "eval step 360: loss 0.5879 ..." (72 rows / batch 4 = 18 steps an epoch), its
  // metrics and report beside the checkpoints, and only the output projection trained.
  std::smatch m;
  REQUIRE(std::regex_search(tr, m, std::regex(R"(eval step 360: loss ([0-9.]+))")));
  const double head_loss = std::stod(m[1]);
  CHECK(tr.find("only classifier.weight and classifier.bias train") != std::string::npos);
  CHECK(tr.find("training Bert (2 layers) with single on 1 rank(s), precision fp32, 360 steps (18 per epoch)") !=
        std::string::npos);
  CHECK(fsys::is_regular_file(head / "metrics.jsonl"));
  CHECK(fsys::is_regular_file(head / "report.html"));

  // The new checkpoint: the source encoder untouched, a new classifier.
  const auto src = ft::load_checkpoint(enc / "final", false);
  const auto out = ft::load_checkpoint(head / "final", false);
  CHECK(out.check == ft::CheckpointCheck::kVerified);
  REQUIRE(src.model.size() == out.model.size());
  for (size_t i = 0; i < src.model.size(); ++i) {
    INFO(src.model[i].first);
    const bool classifier = src.model[i].first.rfind("classifier.", 0) == 0;
    CHECK(at::equal(src.model[i].second, out.model[i].second) == !classifier);
  }
  const std::string ev = ft_test::run_ok(fmt::format("eval {} --checkpoint {}/final", cfg, head.string()));
  INFO(ev);
  REQUIRE(std::regex_search(ev, m, std::regex(R"(eval step 360: loss ([0-9.]+))")));  // the checkpoint knows its step
  CHECK(std::abs(std::stod(m[1]) - head_loss) < 1e-4);

  // The loop is the Trainer's whatever the strategy: zero3's unit runner gathers the head alone
  // and gives the same classifier; pipeline, which has no stage to run, refuses in one line.
  const fsys::path z3 = tmp.path() / "head-zero3";
  ft_test::run_ok(fmt::format("features train {} --set train.epochs=20 --set train.lr=1e-2 --set strategy.name=zero3 "
                              "--features {} --output-dir {}",
                              cfg, feats.string(), z3.string()));
  const auto zero3 = ft::load_checkpoint(z3 / "final", false);
  REQUIRE(zero3.model.size() == out.model.size());
  for (size_t i = 0; i < out.model.size(); ++i) {
    INFO(out.model[i].first);
    CHECK((out.model[i].second - zero3.model[i].second).abs().max().item<double>() < 1e-6);
  }
  const auto pp = ft_test::run_ft(fmt::format("features train {} --set strategy.name=pipeline --features {} --output-dir {}",
                                              cfg, feats.string(), (tmp.path() / "head-pp").string()));
  CHECK(pp.exit_code != 0);
  CHECK(pp.output.find("strategy pipeline splits the encoder's layers over stages, and a batch of extracted "
                       "features runs none of them") != std::string::npos);
}
