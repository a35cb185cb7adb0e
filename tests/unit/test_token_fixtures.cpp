// Token classifiers (XForTokenClassification) of six families against
// transformers itself: tiny models transformers built, ran and trained on
// word/tag rows with run_ner.py's label alignment
// (scripts/hf-token-fixtures.py; the tagging rule is in its header and in
// each file). No Python runs here.
#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"
#include "ft_trainer_fixture.h"

namespace fsys = std::filesystem;

namespace {

const char* const kFamilies[] = {"bert", "distilbert", "electra", "roberta", "deberta-v2", "modernbert"};

fsys::path fixture_dir(const std::string& family) {
  return ft_test::source_dir() / "tests/data/hf/tasks" / (family + "-token-classification");
}

std::map<std::string, at::Tensor> reference(const std::string& family) {
  std::map<std::string, at::Tensor> out;
  for (auto& [n, t] : ft::safetensors::load((fixture_dir(family) / "reference.safetensors").string())) out[n] = t;
  return out;
}

bool have_fixtures() {
  if (fsys::exists(fixture_dir(kFamilies[0]) / "ref_losses.json")) return true;
  ft_test::skip("tests/data/hf/tasks/*-token-classification is not there: run scripts/hf-token-fixtures.py");
  return false;
}

void check_trajectory(const std::string& family, const std::string& flags) {
  ft_test::check_trainer_trajectory(fixture_dir(family), "--task token-classification " + flags, 5e-2);
}

}  // namespace

TEST_CASE("token-classification logits and loss match transformers within 1e-5, padded and padding-free") {
  if (!have_fixtures()) return;
  for (const std::string family : kFamilies) {
    INFO(family);
    const auto config = ft::BertConfig::from_json_file((fixture_dir(family) / "config.json").string());
    CHECK(config.head == ft::BertHead::kTokenClassification);
    CHECK(config.unbuilt_head.empty());
    ft::EncoderModel model(config);
    const auto report = model.load_weights(ft::read_model_weights(fixture_dir(family).string()), family,
                                           ft::EncoderModel::LoadOptions{});
    CHECK(report.loaded == static_cast<int64_t>(model.parameters().size()));
    CHECK(report.ignored.empty());
    auto ref = reference(family);
    model.eval();
    torch::NoGradGuard no_grad;
    ft::Batch b;
    b.input_ids = ref.at("input_ids");
    b.attention_mask = ref.at("attention_mask");
    b.token_type_ids = ref.at("token_type_ids");
    const int64_t k = config.num_labels;
    // transformers scores pad positions too; ft scores the positions it is given: every attended token.
    b.positions = b.attention_mask.reshape({-1}).nonzero().view({-1});
    const at::Tensor want = ref.at("logits").reshape({-1, k}).index_select(0, b.positions);
    const at::Tensor flat_labels = ref.at("labels").reshape({-1}).index_select(0, b.positions);
    for (bool padding_free : {true, false}) {
      model.set_padding_free(padding_free);
      const at::Tensor got = model.forward(b);
      INFO("padding_free=" << padding_free);
      REQUIRE(got.sizes() == want.sizes());
      CHECK((got - want).abs().max().item<double>() < 1e-5);
      const double loss = at::cross_entropy_loss(got, flat_labels, {}, at::Reduction::Mean, -100).item<double>();
      CHECK(std::abs(loss - ref.at("loss").item<double>()) < 1e-5);
    }
  }
}

TEST_CASE("8 steps of transformers.Trainer on token classifiers of six families: ft matches within 1e-4") {
  if (!have_fixtures()) return;
  for (const std::string family : kFamilies) check_trajectory(family, "--strategy single --set train.batch_size=16");
}

TEST_CASE("token-classification trajectories hold under every strategy: the mean over the global batch's tokens") {
  if (!have_fixtures()) return;
  for (const char* family : {"roberta", "modernbert"}) {
    ft_test::check_trajectory_under_strategies(fixture_dir(family), "--task token-classification");
  }
}
