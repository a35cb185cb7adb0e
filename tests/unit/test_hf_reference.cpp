// ft against Hugging Face's own libraries on a real pretrained checkpoint,
// all-MiniLM-L6-v2 (scripts/fetch-data.sh). The references were written by
// transformers / tokenizers from PyPI (scripts/hf-fixtures.py, versions in
// tests/data/hf/README.md); no Python runs here.
#include <fstream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/model/model.h"
#include "ft/tasks/run_inputs.h"
#include "ft/io/safetensors.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft_fixture_texts.h"
#include "ft_run.h"

namespace fsys = std::filesystem;

namespace {

fsys::path minilm() { return ft_test::source_dir() / "data/all-minilm-l6-v2"; }
fsys::path fixtures() { return ft_test::source_dir() / "tests/data/hf"; }

#define REQUIRE_MINILM()                                                                 \
  do {                                                                                   \
    if (!fsys::exists(minilm() / "model.safetensors")) {                                 \
      ft_test::skip("needs " + minilm().string() + " (run scripts/fetch-data.sh)");      \
      return;                                                                            \
    }                                                                                    \
  } while (0)

at::Tensor named(const ft::TensorList& list, const std::string& name) {
  for (const auto& [n, t] : list)
    if (n == name) return t;
  FAIL("no tensor " << name);
  return {};
}

// The MiniLM's BertModel weights plus a classifier: what transformers'
// AutoModelForSequenceClassification holds after from_pretrained + the seed.
ft::TensorList minilm_with_head(const ft::TensorList& head) {
  ft::TensorList w = ft::safetensors::load((minilm() / "model.safetensors").string());
  for (const char* name : {"classifier.weight", "classifier.bias"}) w.emplace_back(name, named(head, name));
  return w;
}

ft::BertConfig minilm_config(int64_t num_labels) {
  ft::BertConfig c = ft::BertConfig::from_json_file((minilm() / "config.json").string());
  c.num_labels = num_labels;
  return c;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("MiniLM classifier logits match transformers within 1e-5, padded and padding-free") {
  REQUIRE_MINILM();
  const auto fx = ft::safetensors::load((fixtures() / "minilm-logits.safetensors").string());
  ft::EncoderModel model(minilm_config(2));
  const auto report = model.load_weights(minilm_with_head(fx), "minilm", {});
  CHECK(report.base_model_names);  // a BertModel file: names without "bert."
  CHECK(report.loaded == static_cast<int64_t>(model.parameters().size()));
  model.eval();
  torch::NoGradGuard no_grad;
  ft::Batch b;
  b.input_ids = named(fx, "input_ids");
  b.attention_mask = named(fx, "attention_mask");
  b.token_type_ids = named(fx, "token_type_ids");
  const at::Tensor want = named(fx, "logits");
  REQUIRE(want.size(0) == 128);
  for (bool padding_free : {true, false}) {
    model.set_padding_free(padding_free);
    const at::Tensor got = model.forward(b);
    INFO("padding_free=" << padding_free);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(max_diff(got, want) < 1e-5);
    // The logits are not trivially alike: rows differ well beyond the tolerance.
    CHECK(max_diff(got[0], got[64]) > 1e-3);
  }
}

TEST_CASE("MiniLM tokenizer.json gives AutoTokenizer's ids: singles and pairs, two max lengths") {
  REQUIRE_MINILM();
  std::ifstream in(fixtures() / "minilm-tokens.json");
  REQUIRE(in);
  const auto fx = nlohmann::json::parse(in);
  const auto from_json = ft::WordPieceTokenizer::from_tokenizer_json((minilm() / "tokenizer.json").string());
  const auto from_vocab = ft::WordPieceTokenizer::from_file((minilm() / "vocab.txt").string());
  int compared = 0;
  for (const auto& source : fx.at("sources")) {
    const std::string name = source.at("name");
    if (name == "weibo" && !ft_test::have_shared("data/weibo-emotion")) {
      ft_test::skip("needs ../shared/data/weibo-emotion for the Weibo texts");
      continue;
    }
    const auto texts = ft_test::fixture_texts(source);
    for (const auto& c : source.at("cases")) {
      const int max_length = c.at("max_length");
      const bool pair = c.at("pair");
      const auto& ids = c.at("input_ids");
      const auto& types = c.at("token_type_ids");
      REQUIRE(ids.size() + (pair ? 1 : 0) == texts.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        std::optional<std::string_view> b;
        if (pair) b = texts[i + 1];
        for (const auto* tok : {&from_json, &from_vocab}) {
          const auto enc = tok->encode(texts[i], b, max_length, false);
          INFO(name << " row " << i << " pair=" << pair << " max_length=" << max_length);
          CHECK(enc.input_ids == ids[i].get<std::vector<int64_t>>());
          CHECK(enc.token_type_ids == types[i].get<std::vector<int64_t>>());
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 0);
}

namespace {

// `ft run` on the Trainer fixture: the MiniLM + the fixture's initial
// classifier, 8 global batches of 16 in file order, the Trainer's settings
// (tests/data/hf/minilm-trainer/ft.yaml).
std::vector<double> trainer_fixture_losses(const std::string& flags, const std::string& tag) {
  ft_test::TempDir tmp("hf-trainer-" + tag);
  const auto init = tmp.path() / "init.safetensors";
  const auto head = ft::safetensors::load((fixtures() / "minilm-trainer/init_head.safetensors").string());
  ft::safetensors::save(init.string(), minilm_with_head(head));
  const auto metrics = tmp.path() / "metrics.jsonl";
  ft_test::run_ok(fmt::format("run --config tests/data/hf/minilm-trainer/ft.yaml --set model.weights={} "
                              "--metrics-out {} {}",
                              init.string(), metrics.string(), flags));
  return ft_test::step_losses(metrics);
}

std::vector<double> trainer_reference_losses() {
  std::ifstream in(fixtures() / "minilm-trainer/ref_losses.json");
  return nlohmann::json::parse(in).at("losses").get<std::vector<double>>();
}

void check_trajectory(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(want.size() == 8);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("step " << i + 1 << ": ft " << got[i] << " vs transformers.Trainer " << want[i]);
    CHECK(std::abs(got[i] - want[i]) < 1e-4);
  }
  // The run learns: the trajectory is not flat, so matching it means something.
  CHECK(std::abs(want.front() - want.back()) > 1e-2);
}

}  // namespace

TEST_CASE("8 steps of transformers.Trainer on the MiniLM: ft single matches within 1e-4") {
  REQUIRE_MINILM();
  check_trajectory(trainer_fixture_losses("--strategy single --set train.batch_size=16", "single"),
                   trainer_reference_losses());
}

TEST_CASE("8 steps of transformers.Trainer on the MiniLM: ft ddp x2 matches within 1e-4") {
  REQUIRE_MINILM();
  check_trajectory(trainer_fixture_losses("--strategy ddp --nproc 2 --set train.batch_size=8", "ddp"),
                   trainer_reference_losses());
}

TEST_CASE("load report: a BertModel directory fine-tuned as a classifier says what is new, one line each") {
  REQUIRE_MINILM();
  ft_test::TempDir tmp("hf-load-report");
  const std::string out = ft_test::run_ok(fmt::format(
      "run --set model.config=data/all-minilm-l6-v2 --set data.train=tests/data/hf/minilm-trainer/data.safetensors "
      "--set data.dev_fraction=0 --set train.max_steps=1 --set train.batch_size=4 --set train.output_dir={}",
      (tmp.path() / "out").string()));
  CHECK(out.find("data/all-minilm-l6-v2: loaded 103 tensors (a BertModel: its names gained the 'bert.' prefix)") !=
        std::string::npos);
  CHECK(out.find("data/all-minilm-l6-v2: newly initialised, not in the weights: classifier.weight, classifier.bias") !=
        std::string::npos);
  // The pooler is the checkpoint's: nothing else is new, nothing unused.
  CHECK(out.find("bert.pooler.dense.weight") == std::string::npos);
  CHECK(out.find("not used by this model") == std::string::npos);
}

TEST_CASE("load rules: a missing pooler is initialised, half a module is an error, a wider classifier is replaced") {
  REQUIRE_MINILM();
  ft::TensorList base = ft::safetensors::load((minilm() / "model.safetensors").string());
  ft::TensorList no_pooler;
  for (const auto& [n, t] : base)
    if (n.rfind("pooler.", 0) != 0) no_pooler.emplace_back(n, t);
  ft::EncoderModel::LoadOptions head_optional;
  head_optional.head_optional = true;
  {
    ft::EncoderModel m(minilm_config(3));
    const auto r = m.load_weights(no_pooler, "minilm", head_optional);
    CHECK(r.initialised ==
          std::vector<std::string>{"bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight",
                                   "classifier.bias"});
  }
  {
    ft::TensorList half = no_pooler;
    half.emplace_back("pooler.dense.weight", named(base, "pooler.dense.weight"));
    ft::EncoderModel m(minilm_config(3));
    CHECK(ft_test::error_of([&] { m.load_weights(half, "minilm", head_optional); }) ==
          "minilm: missing tensor 'bert.pooler.dense.bias' (the checkpoint does not match config.json)");
  }
  {
    ft::TensorList two_labels = base;
    two_labels.emplace_back("classifier.weight", at::zeros({2, 384}));
    two_labels.emplace_back("classifier.bias", at::zeros({2}));
    ft::EncoderModel m(minilm_config(3));
    const auto r = m.load_weights(two_labels, "minilm", head_optional);
    CHECK(r.replaced == std::vector<std::string>{"classifier.weight: 2x384 given, 3x384 here",
                                                 "classifier.bias: 2 given, 3 here"});
    // Freshly initialised as HF does: normal(0, 0.02) weights, zero bias.
    for (const auto& [n, t] : m.weights()) {
      if (n == "classifier.weight") CHECK(t.abs().max().item<double>() > 0);
      if (n == "classifier.bias") CHECK(t.abs().max().item<double>() == 0);
    }
    // Without head_optional (a checkpoint to resume) the same file is an error.
    ft::EncoderModel strict(minilm_config(3));
    CHECK(ft_test::error_of([&] { strict.load_weights(two_labels, "minilm"); }) ==
          "minilm: tensor 'classifier.weight' has shape 2x384, config.json implies 3x384");
  }
}

TEST_CASE("bad model directories and tokenizer files: one line naming the file or key") {
  REQUIRE_MINILM();
  ft_test::TempDir tmp("hf-bad");
  const auto copy_minilm = [&](const std::string& name, std::initializer_list<const char*> files) {
    const auto dir = tmp.path() / name;
    fsys::create_directories(dir);
    for (const char* f : files) fsys::copy_file(minilm() / f, dir / f);
    return dir;
  };
  const std::string common =
      "--set data.train=tests/data/hf/minilm-trainer/data.safetensors --set data.dev_fraction=0 "
      "--set train.max_steps=1 --set train.output_dir=";
  auto first_error = [](const ft_test::RunOutput& r) {
    const auto at = r.output.find("ft: error: ");
    return at == std::string::npos ? std::string("<no error>") : r.output.substr(at, r.output.find('\n', at) - at);
  };
  {  // no config.json
    const auto dir = copy_minilm("no-config", {"model.safetensors", "vocab.txt"});
    const auto r = ft_test::run_ft(fmt::format("run --set model.config={} {}", dir.string(), common));
    CHECK(r.exit_code != 0);
    CHECK(first_error(r) == fmt::format("ft: error: cannot read model config {}/config.json: no such file or not readable",
                                        dir.string()));
  }
  {  // no weights
    const auto dir = copy_minilm("no-weights", {"config.json", "vocab.txt"});
    const auto r = ft_test::run_ft(fmt::format("run --set model.config={} {}", dir.string(), common));
    CHECK(r.exit_code != 0);
    CHECK(first_error(r) ==
          fmt::format("ft: error: model.config: {0} has no model.safetensors or pytorch_model.bin; to train from random "
                      "init point model.config at {0}/config.json",
                      dir.string()));
  }
  {  // hidden size in config.json disagrees with the weights
    const auto dir = copy_minilm("wrong-hidden", {"model.safetensors", "vocab.txt"});
    auto cfg = nlohmann::json::parse(ft_test::read_text(minilm() / "config.json"));
    cfg["hidden_size"] = 768;
    std::ofstream(dir / "config.json") << cfg.dump();
    const auto r = ft_test::run_ft(fmt::format("run --set model.config={} {}", dir.string(), common));
    CHECK(r.exit_code != 0);
    CHECK(first_error(r) ==
          fmt::format("ft: error: {}: tensor 'bert.embeddings.word_embeddings.weight' has shape 30522x384, config.json "
                      "implies 30522x768",
                      dir.string()));
  }
  {  // a tokenizer.json ft cannot honour
    const auto dir = copy_minilm("bpe", {"config.json", "model.safetensors"});
    auto tok = nlohmann::json::parse(ft_test::read_text(minilm() / "tokenizer.json"));
    tok["model"]["type"] = "BPE";
    std::ofstream(dir / "tokenizer.json") << tok.dump();
    CHECK(ft_test::error_of([&] { ft::WordPieceTokenizer::from_tokenizer_json((dir / "tokenizer.json").string()); }) ==
          fmt::format("{}: model.type: 'BPE' is not supported; ft reads WordPiece (BERT-family) tokenizers",
                      (dir / "tokenizer.json").string()));
    tok = nlohmann::json::parse(ft_test::read_text(minilm() / "tokenizer.json"));
    tok["normalizer"]["strip_accents"] = false;
    std::ofstream(dir / "tokenizer.json") << tok.dump();
    CHECK(ft_test::error_of([&] { ft::WordPieceTokenizer::from_tokenizer_json((dir / "tokenizer.json").string()); }) ==
          fmt::format("{}: normalizer.strip_accents: ft strips accents exactly when it lower-cases; set it to null",
                      (dir / "tokenizer.json").string()));
    tok = nlohmann::json::parse(ft_test::read_text(minilm() / "tokenizer.json"));
    tok["added_tokens"].push_back({{"id", 30522}, {"content", "<new>"}, {"special", false}});
    std::ofstream(dir / "tokenizer.json") << tok.dump();
    CHECK(ft_test::error_of([&] { ft::WordPieceTokenizer::from_tokenizer_json((dir / "tokenizer.json").string()); })
              .find("added_tokens[5] ('<new>'): ft only honours the BERT special tokens") != std::string::npos);
  }
}
