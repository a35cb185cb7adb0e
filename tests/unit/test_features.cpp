// Feature extraction: `ft features extract` writes the pooled features of
// every train/dev row; `ft features train` fits a classifier on them and
// writes a checkpoint whose encoder is the source's, bit for bit, and whose
// `ft eval` gives the head's own final dev loss.
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
  // "epoch 20 step 360: dev loss 0.1234 ..." (72 rows / batch 4 = 18 steps an epoch)
  std::smatch m;
  REQUIRE(std::regex_search(tr, m, std::regex(R"(epoch 20 step 360: dev loss ([0-9.]+))")));
  const double head_loss = std::stod(m[1]);
  CHECK(tr.find("trained the classifier (34 parameters)") != std::string::npos);  // 16 x 2 + 2

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
  REQUIRE(std::regex_search(ev, m, std::regex(R"(eval step 0: loss ([0-9.]+))")));
  CHECK(std::abs(std::stod(m[1]) - head_loss) < 1e-4);
}
