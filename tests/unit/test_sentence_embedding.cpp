// The sentence-embedding task against sentence-transformers
// (tests/data/st/, scripts/st-fixtures.py): the pooling modules' embeddings,
// the SentenceTransformerTrainer trajectories of each loss under single and
// data-parallel runs with negatives from the global batch, the cached loss
// against the plain one, the saved directory, ft predict, and bad inputs.
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"

namespace fsys = std::filesystem;
using json = nlohmann::json;

namespace {

const fsys::path kSt = ft_test::source_dir() / "tests/data/st";

at::Tensor tensor_of(const ft::TensorList& list, const std::string& name) {
  for (const auto& [n, t] : list)
    if (n == name) return t;
  FAIL("no tensor " << name);
  return {};
}

// The model of directory `dir` on the fixture's ids: [rows, dim].
at::Tensor embed(const fsys::path& dir, const at::Tensor& ids, const at::Tensor& mask, bool padding_free) {
  auto ckpt = ft::load_checkpoint(dir, false);
  ft::EncoderModel model(ckpt.config);
  model.load_weights(ckpt.model, dir.string());
  model.set_padding_free(padding_free);
  model.eval();
  torch::NoGradGuard no_grad;
  ft::Batch b;
  b.input_ids = ids;
  b.attention_mask = mask;
  b.token_type_ids = at::zeros_like(ids);
  return model.forward(b);
}

// `ft run --task sentence-embedding` from tiny-mean-norm on fixture `name`,
// its 8 steps against the SentenceTransformerTrainer's within `tol`.
std::vector<double> trajectory(const std::string& name, const std::string& flags, double tol = 1e-4) {
  ft_test::TempDir tmp("st-" + name);
  const auto metrics = tmp.path() / "m.jsonl";
  ft_test::run_ok(fmt::format(
      "run --config tests/data/hf/minilm-trainer/ft.yaml --task sentence-embedding --set model.config={} "
      "--set data.train={} --set train.lr=1e-3 --set model.dropout=0 --metrics-out {} {}",
      (kSt / "tiny-mean-norm").string(), (kSt / name / "train.safetensors").string(), metrics.string(), flags));
  const auto got = ft_test::step_losses(metrics);
  std::ifstream in(kSt / name / "ref_losses.json");
  const auto want = json::parse(in).at("losses").get<std::vector<double>>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(name << " " << flags << " step " << i + 1 << ": ft " << got[i] << " vs sentence-transformers " << want[i]);
    CHECK(std::abs(got[i] - want[i]) < tol);
  }
  return got;
}

}  // namespace

TEST_CASE("each pooling module gives sentence-transformers' embeddings") {
  const auto fixture = ft::safetensors::load((kSt / "embeddings.safetensors").string());
  // "": full 64-token rows; "short.": 6 to 54 tokens, 15 of 16 rows padded.
  for (const std::string batch : {"", "short."}) {
    const at::Tensor ids = tensor_of(fixture, batch + "input_ids"), mask = tensor_of(fixture, batch + "attention_mask");
    for (const char* variant : {"tiny-mean-norm", "tiny-cls", "tiny-max-dense", "tiny-meansqrt"}) {
      const at::Tensor want = tensor_of(fixture, std::string(variant) + "." + batch + "sentence_embedding");
      for (const bool packed : {false, true}) {
        const at::Tensor got = embed(kSt / variant, ids, mask, packed);
        INFO(variant << " " << batch << (packed ? " padding-free" : " padded"));
        REQUIRE(got.sizes() == want.sizes());
        CHECK((got - want).abs().max().item<double>() < 1e-5);
      }
    }
  }
}

TEST_CASE("the MiniLM's sentence-transformers directory embeds as SentenceTransformer.encode") {
  const fsys::path minilm = ft_test::source_dir() / "data/all-minilm-l6-v2";
  if (!fsys::exists(minilm / "modules.json")) {
    ft_test::skip("data/all-minilm-l6-v2 has no modules.json: run scripts/fetch-data.sh");
    return;
  }
  const auto fixture = ft::safetensors::load((kSt / "minilm-embeddings.safetensors").string());
  const at::Tensor got = embed(minilm, tensor_of(fixture, "input_ids"), tensor_of(fixture, "attention_mask"), true);
  const at::Tensor want = tensor_of(fixture, "sentence_embedding");
  REQUIRE(got.sizes() == want.sizes());
  CHECK((got - want).abs().max().item<double>() < 1e-5);
  CHECK((got.norm(2, {1}) - 1).abs().max().item<double>() < 1e-5);  // its Normalize module
}

TEST_CASE("MultipleNegativesRankingLoss follows the SentenceTransformerTrainer, alone and with global-batch negatives") {
  const auto single = trajectory("train-mnrl", "");
  // Two ranks of 8: each anchor ranks all 16 positives, so the run is the single one.
  for (const char* strategy : {"--strategy ddp --nproc 2 --set train.batch_size=8",
                               "--strategy zero2 --nproc 2 --set train.batch_size=8"}) {
    const auto ddp = trajectory("train-mnrl", strategy);
    for (size_t i = 0; i < single.size(); ++i) CHECK(std::abs(ddp[i] - single[i]) < 1e-5);
  }
  trajectory("train-mnrl-neg", "");
  trajectory("train-mnrl-neg", "--strategy ddp --nproc 2 --set train.batch_size=8");
  trajectory("train-mnrl-sym", "--set embedding.symmetric=true");
}

TEST_CASE("every strategy trains MultipleNegativesRankingLoss on its global batch") {
  for (const char* strategy : {"--strategy dp --set strategy.options.replicas=2 --set train.batch_size=16",
                               "--strategy zero1 --nproc 2 --set train.batch_size=8",
                               "--strategy horovod --nproc 2 --set train.batch_size=8",
                               "--strategy zero3 --nproc 2 --set train.batch_size=8",
                               "--strategy fsdp --nproc 2 --set train.batch_size=8",
                               "--strategy pipeline --nproc 2 --set train.batch_size=16",
                               "--strategy tensor --nproc 2 --set train.batch_size=16"}) {
    trajectory("train-mnrl", strategy);
  }
  trajectory("train-mnrl", "--strategy ddp_amp --precision bf16 --nproc 2 --set train.batch_size=8", 3e-2);
}

TEST_CASE("negatives from one rank only are a different loss") {
  ft_test::TempDir tmp("st-local");
  const auto metrics = tmp.path() / "m.jsonl";
  ft_test::run_ok(fmt::format(
      "run --config tests/data/hf/minilm-trainer/ft.yaml --task sentence-embedding --set model.config={} "
      "--set data.train={} --set train.lr=1e-3 --set model.dropout=0 --metrics-out {} --strategy ddp --nproc 2 "
      "--set train.batch_size=8 --set embedding.gather_across_devices=false",
      (kSt / "tiny-mean-norm").string(), (kSt / "train-mnrl/train.safetensors").string(), metrics.string()));
  std::ifstream in(kSt / "train-mnrl/ref_losses.json");
  const auto want = json::parse(in).at("losses").get<std::vector<double>>();
  const auto got = ft_test::step_losses(metrics);
  REQUIRE(got.size() == want.size());
  CHECK(std::abs(got[0] - want[0]) > 0.1);  // 7 negatives, not 15: log 8 against log 16 at the start
}

TEST_CASE("CoSENTLoss and CosineSimilarityLoss follow the SentenceTransformerTrainer") {
  trajectory("train-cosent", "--set embedding.loss=CoSENTLoss");
  trajectory("train-cosent", "--set embedding.loss=CoSENTLoss --strategy ddp --nproc 2 --set train.batch_size=8");
  trajectory("train-cosine", "--set embedding.loss=CosineSimilarityLoss");
}

TEST_CASE("the cached loss trains as the plain one") {
  ft_test::TempDir tmp("st-cached");
  const auto run = [&](const std::string& name, const std::string& flags) {
    ft_test::run_ok(fmt::format(
        "run --config tests/data/hf/minilm-trainer/ft.yaml --task sentence-embedding --set model.config={} "
        "--set data.train={} --set train.lr=1e-3 --output-dir {} --metrics-out {} {}",
        (kSt / "tiny-mean-norm").string(), (kSt / "train-mnrl/train.safetensors").string(),
        (tmp.path() / name).string(), (tmp.path() / (name + ".jsonl")).string(), flags));
    return ft::safetensors::load((tmp.path() / name / "final/model.safetensors").string());
  };
  const auto same_weights = [](const ft::TensorList& a, const ft::TensorList& b) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      // A key bias shifts every score of a query alike, which softmax ignores:
      // its gradient is zero but for rounding, which AdamW scales to lr-sized steps.
      if (a[i].first.find("key.bias") != std::string::npos) continue;
      worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
    }
    CHECK(worst < 1e-5);
  };
  const std::string cached = "--set embedding.loss=CachedMultipleNegativesRankingLoss ";
  // Without dropout, mini-batches of 4 give the plain loss's gradients.
  const auto plain = run("plain", "--set model.dropout=0");
  same_weights(plain, run("cached", "--set model.dropout=0 " + cached + "--set embedding.mini_batch_size=4"));
  ft_test::check_same_losses(ft_test::step_losses(tmp.path() / "plain.jsonl"), tmp.path() / "cached.jsonl", "cached", 1e-5);
  // With dropout, the replay must draw the no-grad pass's masks: one mini-batch
  // holding the whole batch (16 anchors and 16 positives: mini_batch_size
  // counts texts) then trains exactly as the plain loss, masks and all.
  const auto plain_dropout = run("plain-dropout", "--set model.dropout=0.1");
  same_weights(plain_dropout,
               run("cached-dropout", "--set model.dropout=0.1 " + cached + "--set embedding.mini_batch_size=32"));
  ft_test::check_same_losses(ft_test::step_losses(tmp.path() / "plain-dropout.jsonl"), tmp.path() / "cached-dropout.jsonl",
                             "cached with dropout", 1e-5);
  trajectory("train-mnrl", cached + "--set embedding.mini_batch_size=4");
  trajectory("train-mnrl", cached + "--set embedding.mini_batch_size=4 --strategy ddp --nproc 2 --set train.batch_size=8");
}

TEST_CASE("a fine-tuned model saves as a sentence-transformers directory that ft predict embeds with") {
  ft_test::TempDir tmp("st-save");
  const fsys::path out = tmp.path() / "out";
  ft_test::run_ok(fmt::format(
      "run --config tests/data/hf/minilm-trainer/ft.yaml --task sentence-embedding --set model.config={} "
      "--set data.train={} --set train.lr=1e-3 --set model.dropout=0 --max-steps 2 --output-dir {}",
      (kSt / "tiny-max-dense").string(), (kSt / "train-mnrl/train.safetensors").string(), out.string()));
  const fsys::path final_dir = out / "final";
  const json modules = json::parse(ft_test::read_text(final_dir / "modules.json"));
  REQUIRE(modules.size() == 4);
  CHECK(modules[1].at("path") == "1_Pooling");
  CHECK(modules[2].at("type") == "sentence_transformers.models.Dense");
  CHECK(modules[3].at("type") == "sentence_transformers.models.Normalize");
  CHECK(json::parse(ft_test::read_text(final_dir / "1_Pooling/config.json")).at("pooling_mode_max_tokens") == true);
  const json encoder_config = json::parse(ft_test::read_text(final_dir / "config.json"));
  CHECK(encoder_config.at("architectures") == json::array({"BertModel"}));
  // A bare encoder has no classifier, so no labels (as save_pretrained writes a BertModel's).
  CHECK_FALSE(encoder_config.contains("num_labels"));
  CHECK_FALSE(encoder_config.contains("id2label"));
  const auto weights = ft::safetensors::load((final_dir / "model.safetensors").string());
  CHECK(tensor_of(weights, "embeddings.word_embeddings.weight").dim() == 2);  // base-model names
  const auto dense = ft::safetensors::load((final_dir / "2_Dense/model.safetensors").string());
  CHECK(tensor_of(dense, "linear.weight").sizes() == at::IntArrayRef({16, 32}));
  // ft predict prints the normalised Dense output.
  const std::string line = ft_test::run_ok(fmt::format("predict --checkpoint {} 'a fine film'", final_dir.string()));
  const json record = json::parse(line.substr(line.find('{')));
  CHECK(record.at("text") == "a fine film");
  const auto e = record.at("embedding").get<std::vector<double>>();
  REQUIRE(e.size() == 16);
  double norm = 0;
  for (double v : e) norm += v * v;
  CHECK(std::abs(norm - 1) < 1e-6);
}

namespace {

// `ft predict` on `dir`: each text's embedding.
std::vector<std::vector<double>> embeddings_of(const fsys::path& dir) {
  const std::string out = ft_test::run_ok(fmt::format("predict --checkpoint {} 'a fine film' 'the plot was bad'", dir.string()));
  std::vector<std::vector<double>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') rows.push_back(json::parse(line).at("embedding").get<std::vector<double>>());
  }
  REQUIRE(rows.size() == 2);
  return rows;
}

double max_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) d = std::max(d, std::abs(a[i][j] - b.at(i).at(j)));
  return d;
}

}  // namespace

TEST_CASE("a LoRA embedding model saves PEFT's adapter of the bare encoder and predicts as its merged weights") {
  ft_test::TempDir tmp("st-lora");
  const fsys::path out = tmp.path() / "out";
  const std::string train = fmt::format(
      "run --config tests/data/hf/minilm-trainer/ft.yaml --task sentence-embedding --set model.config={} "
      "--set data.train={} --set train.lr=1e-2 --set train.warmup_steps=0 --set model.dropout=0 --set lora.rank=4 "
      "--set lora.alpha=8 --max-steps 3 ",
      (kSt / "tiny-max-dense").string(), (kSt / "train-mnrl/train.safetensors").string());
  ft_test::run_ok(train + "--output-dir " + out.string());
  const fsys::path final_dir = out / "final";
  const json adapter = json::parse(ft_test::read_text(final_dir / "adapter_config.json"));
  CHECK(adapter.at("task_type") == "FEATURE_EXTRACTION");
  CHECK(adapter.at("modules_to_save").is_null());  // no classifier to save
  // PEFT wraps the bare BertModel: base_model.model.encoder..., no "bert.".
  const auto lora = ft::safetensors::load((final_dir / "adapter_model.safetensors").string());
  REQUIRE(lora.size() == 8);  // 2 layers x query, value x A, B
  for (const auto& [name, t] : lora) CHECK(name.rfind("base_model.model.encoder.layer.", 0) == 0);

  // The same model with B A folded into the weights (alpha / r = 2), saved without the adapter.
  const fsys::path merged = tmp.path() / "merged";
  fsys::copy(final_dir, merged, fsys::copy_options::recursive);
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "manifest.json"}) fsys::remove(merged / f);
  fsys::remove_all(merged / "training_state");
  auto weights = ft::safetensors::load((merged / "model.safetensors").string());
  double folded = 0;
  for (auto& [name, w] : weights) {
    if (name.find("attention.self.query.weight") == std::string::npos &&
        name.find("attention.self.value.weight") == std::string::npos)
      continue;
    const std::string module = "base_model.model." + name.substr(0, name.size() - std::string(".weight").size());
    const at::Tensor a = tensor_of(lora, module + ".lora_A.weight"), b = tensor_of(lora, module + ".lora_B.weight");
    const at::Tensor delta = 2.0 * b.mm(a);
    folded += delta.abs().sum().item<double>();
    w = w + delta;
  }
  CHECK(folded > 0);  // the adapters trained
  ft::safetensors::save((merged / "model.safetensors").string(), weights, {{"format", "pt"}});
  const auto with_adapter = embeddings_of(final_dir);
  CHECK(max_diff(with_adapter, embeddings_of(merged)) < 1e-5);
  CHECK(max_diff(with_adapter, embeddings_of(kSt / "tiny-max-dense")) > 1e-4);
  // ft export --merge-lora folds it the same way and keeps the sentence-transformers modules.
  const fsys::path exported = tmp.path() / "exported";
  ft_test::run_ok(fmt::format("export --merge-lora {} {}", final_dir.string(), exported.string()));
  CHECK(fsys::exists(exported / "modules.json"));
  CHECK(fsys::exists(exported / "2_Dense/model.safetensors"));
  CHECK(max_diff(with_adapter, embeddings_of(exported)) < 1e-5);

  // A run continues from the adapter (lora.adapter): its names find their modules.
  ft_test::run_ok(train + fmt::format("--set lora.adapter={} --output-dir {}/again", final_dir.string(), tmp.path().string()));
}

TEST_CASE("an embedding model trained with bottleneck adapters, prompt or prefix tuning predicts from its checkpoint") {
  ft_test::TempDir tmp("st-peft");
  for (const char* method : {"adapter.size=8", "prompt.length=4", "prefix.length=4"}) {
    INFO(method);
    const fsys::path out = tmp.path() / std::string(method).substr(0, std::string(method).find('.'));
    ft_test::run_ok(fmt::format(
        "run --config tests/data/hf/minilm-trainer/ft.yaml --task sentence-embedding --set model.config={} "
        "--set data.train={} --set data.max_seq_len=60 --set train.lr=1e-2 --set {} --max-steps 2 --output-dir {}",
        (kSt / "tiny-max-dense").string(), (kSt / "train-mnrl/train.safetensors").string(), method, out.string()));
    // The encoder's base names and the method's own files load together (they did not: a mix of names).
    const auto rows = embeddings_of(out / "final");
    CHECK(rows[0].size() == 16);
    CHECK(max_diff(rows, embeddings_of(kSt / "tiny-max-dense")) > 1e-6);
  }
}

TEST_CASE("bad sentence-embedding input gets one line") {
  ft_test::TempDir tmp("st-bad");
  const fsys::path& dir = tmp.path();
  auto fails_with = [&](const std::string& flags, const std::string& needle) {
    const auto r = ft_test::run_ft(fmt::format(
        "run --config tests/data/hf/minilm-trainer/ft.yaml --task sentence-embedding --set model.config={} "
        "--set data.vocab={} --max-steps 1 {}",
        (kSt / "tiny-mean-norm").string(), (kSt / "tiny-mean-norm/vocab.txt").string(), flags));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find(needle) != std::string::npos);
    CHECK(r.output.find("terminate called") == std::string::npos);
  };
  {
    std::ofstream f(dir / "pairs.jsonl");
    f << R"({"anchor": "a good film", "positive": "it was good"})" << "\n";
    f << R"({"anchor": "a bad film"})" << "\n";
  }
  fails_with("--set data.train=" + (dir / "pairs.jsonl").string(), "pairs.jsonl: row 2: missing field 'positive'");
  {
    std::ofstream f(dir / "scored.jsonl");
    f << R"({"sentence1": "a good film", "sentence2": "it was good", "score": 0.9})" << "\n";
    f << R"({"sentence1": "a bad film", "sentence2": "it was good", "score": 4.0})" << "\n";
  }
  fails_with("--set data.train=" + (dir / "scored.jsonl").string() + " --set embedding.loss=CosineSimilarityLoss",
             "row 2: score 4 is outside [-1, 1]");
  // A directory whose pooling ft cannot read.
  fsys::copy(kSt / "tiny-mean-norm", dir / "model", fsys::copy_options::recursive);
  {
    std::ofstream f(dir / "model/1_Pooling/config.json");
    f << R"({"word_embedding_dimension": 32, "pooling_mode_weightedmean_tokens": true})";
  }
  const auto r = ft_test::run_ft(fmt::format("predict --checkpoint {} 'a film'", (dir / "model").string()));
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("1_Pooling/config.json: pooling_mode_weightedmean_tokens is not a pooling ft computes") !=
        std::string::npos);
}
