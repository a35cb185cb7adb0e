// Prompt and prefix tuning runs of the real `ft` on ../shared/fixtures/
// parity-tiny (hidden 128, 2 layers, 2 heads, 6 labels; fp32, dropout 0):
// every strategy, padding-free on and off, matches single within 1e-4; the
// trainable state is the formula; checkpoints hold PEFT's files; resume,
// eval, predict and a run started from the saved adapter agree; export and
// the other readers refuse with the reason.
#include <cmath>
#include <filesystem>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/config/config.h"
#include "ft/base/fs.h"
#include "ft/model/model.h"
#include "ft/model/prompt_learning.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"

namespace fsys = std::filesystem;

namespace {

constexpr int64_t kHidden = 128, kLayers = 2, kLabels = 6, kP = 4;
constexpr int64_t kClassifier = kLabels * kHidden + kLabels;

struct Runner {
  ft_test::TempDir tmp;
  std::string common;
  Runner(const std::string& tag, const std::string& method)
      : tmp(tag),
        common("run --config configs/parity-tiny.yaml --threads 1 --set train.lr=1e-2 --set train.max_steps=8 " +
               method) {}
  fsys::path run(const std::string& name, const std::string& extra) const {
    const auto metrics = tmp.path() / (name + ".jsonl");
    ft_test::run_ok(fmt::format("{} --metrics-out {} {}", common, metrics.string(), extra));
    return metrics;
  }
  fsys::path out() const { return tmp.path() / "out"; }
};

std::map<std::string, at::Tensor> tensors(const fsys::path& file) {
  std::map<std::string, at::Tensor> out;
  for (auto& [n, t] : ft::safetensors::load(file.string())) out[n] = t;
  return out;
}

nlohmann::json json_of(const fsys::path& file) { return nlohmann::json::parse(ft_test::read_text(file)); }

double eval_loss(const Runner& r, const fsys::path& checkpoint, const std::string& name) {
  const fsys::path data = ft_test::shared_dir() / "fixtures/parity-tiny/data.safetensors";
  const auto metrics = r.tmp.path() / (name + ".jsonl");
  ft_test::run_ok(fmt::format("eval --checkpoint {} --data {} --set runtime.metrics_out={}", checkpoint.string(),
                              data.string(), metrics.string()));
  const auto ev = ft_test::read_events(metrics, "eval");
  REQUIRE(ev.size() == 1u);
  return ev[0].at("loss").get<double>();
}

// The strategies and layouts that must reproduce the single-process losses
// (global batch 32, fp32, dropout 0).
void check_strategies(const Runner& r, const std::vector<double>& ref,
                      const std::vector<std::pair<std::string, std::string>>& cases, int64_t trainable) {
  for (const auto& [name, extra] : cases) {
    const auto metrics = r.run(name, extra);
    CHECK(ft_test::summary_of(metrics).at("trainable_params") == trainable);
    ft_test::check_same_losses(ref, metrics, name, 1e-4);
  }
}

// Resuming at step 4, under another strategy, reproduces steps 5..8.
void check_resume(const Runner& r, const std::vector<double>& ref, const std::string& strategy, int nproc) {
  const auto resumed = r.run("resume-" + strategy,
                             fmt::format("--strategy {} --nproc {} --set train.batch_size={} --set train.resume_from={}",
                                         strategy, nproc, 32 / nproc, (r.out() / "checkpoint-4").string()));
  const auto tail = ft_test::step_losses(resumed);
  REQUIRE(tail.size() == 4u);
  for (size_t i = 0; i < 4; ++i) {
    INFO("resumed step " << i + 5 << ": " << tail[i] << " vs " << ref[i + 4]);
    CHECK(std::abs(tail[i] - ref[i + 4]) < 1e-4);
  }
}

// ft eval applies the checkpoint's virtual tokens; a run started from them
// (section.path) has that loss as its first loss over all 256 rows; the
// base weights (+ head) alone give another.
void check_eval_and_restart(const Runner& r, const fsys::path& final_dir, const std::string& method) {
  const double tuned = eval_loss(r, final_dir, "eval-" + std::string(method));
  const std::string from_final = fmt::format("--strategy single --set model.config={0} --set model.weights= "
                                             "--set train.batch_size=256 --set train.max_steps=1",
                                             final_dir.string());
  const auto restart = r.run("from-saved", from_final + fmt::format(" --set {}.path={}", method, final_dir.string()));
  REQUIRE(ft_test::step_losses(restart).size() == 1u);
  CHECK(std::abs(ft_test::step_losses(restart)[0] - tuned) < 1e-5);
  const fsys::path base_only = r.tmp.path() / "base-only";
  fsys::create_directories(base_only);
  for (const char* f : {"config.json", "model.safetensors"}) fsys::copy_file(final_dir / f, base_only / f);
  CHECK(std::abs(eval_loss(r, base_only, "eval-base") - tuned) > 1e-4);
}

// ft predict's probabilities equal the model built the Trainer's way from
// the checkpoint's PEFT files, on [CLS] hello world [SEP].
void check_predict(const fsys::path& final_dir, ft::PromptLearning method) {
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n";
  for (int i = 7; i < 21128; ++i) vocab += fmt::format("tok{}\n", i);  // parity-tiny's vocab_size
  ft::fs::write_file_atomic(final_dir / "vocab.txt", vocab);
  const std::string out = ft_test::run_ok(fmt::format("predict --checkpoint {} 'hello world'", final_dir.string()));
  const auto predicted = nlohmann::json::parse(out.substr(out.find('{'))).at("probabilities");

  ft::EncoderModel m(ft::BertConfig::from_json_file((final_dir / "config.json").string()));
  m.load_weights(ft::safetensors::load((final_dir / "model.safetensors").string()), "test");
  method.path = final_dir.string();
  ft::apply_prompt_learning(m, method, 0);
  m.eval();
  ft::Batch b;
  b.input_ids = at::tensor({2, 5, 6, 3}, at::kLong).view({1, 4});
  b.attention_mask = at::ones({1, 4}, at::kLong);
  b.token_type_ids = at::zeros({1, 4}, at::kLong);
  torch::NoGradGuard no_grad;
  const at::Tensor probs = at::softmax(m.forward(b), -1)[0];
  REQUIRE(predicted.size() == static_cast<size_t>(kLabels));
  for (int64_t k = 0; k < kLabels; ++k) {
    INFO("label " << k);
    CHECK(std::abs(predicted.at(fmt::format("LABEL_{}", k)).get<double>() - probs[k].item<double>()) < 1e-6);
  }
}

// What every prompt-learning checkpoint shares: PEFT's config fields, the
// classifier as base_model.classifier.*, plain HF base weights.
void check_peft_files(const fsys::path& dir, const char* peft_type, int64_t table_width) {
  const auto cfg = json_of(dir / "adapter_config.json");
  CHECK(cfg.at("peft_type") == peft_type);
  CHECK(cfg.at("task_type") == "SEQ_CLS");
  CHECK(cfg.at("num_virtual_tokens") == kP);
  CHECK(cfg.at("token_dim") == kHidden);
  CHECK(cfg.at("num_transformer_submodules") == 1);
  CHECK(cfg.at("num_attention_heads") == 2);
  CHECK(cfg.at("num_layers") == kLayers);
  CHECK(cfg.at("inference_mode") == true);
  CHECK(cfg.at("modules_to_save") == nlohmann::json::array({"classifier"}));
  CHECK(cfg.at("base_model_name_or_path") == "../shared/fixtures/parity-tiny/model.safetensors");
  const auto adapter = tensors(dir / "adapter_model.safetensors");
  CHECK(adapter.size() == 3u);
  CHECK(adapter.at("prompt_embeddings").sizes() == at::IntArrayRef({kP, table_width}));
  CHECK(adapter.at("base_model.classifier.weight").sizes() == at::IntArrayRef({kLabels, kHidden}));
  CHECK(adapter.at("base_model.classifier.bias").sizes() == at::IntArrayRef({kLabels}));
  const auto base = tensors(dir / "model.safetensors");
  CHECK(base.size() == 41u);  // BERT with 2 layers, no virtual tokens
  for (const auto& [n, t] : base) CHECK_FALSE(ft::is_prompt_learning_param(n));
  // The trained classifier is in both files, the same.
  CHECK(at::equal(base.at("classifier.weight"), adapter.at("base_model.classifier.weight")));
}

}  // namespace

TEST_CASE("prompt tuning runs: every strategy equals single, PEFT files, resume, eval, predict, refusals") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const Runner r("prompt-runs", fmt::format("--set prompt.length={} --set prompt.init=vocab", kP));
  const auto single = r.run("single", "--strategy single --set train.save_every=4 --output-dir " + r.out().string());
  // P x hidden + the classifier; the pooler stays frozen, as in PEFT.
  const int64_t trainable = kP * kHidden + kClassifier;
  CHECK(ft_test::summary_of(single).at("trainable_params") == trainable);
  CHECK(ft_test::summary_of(single).at("optimizer_bytes")[0] == 8 * trainable);
  const auto ref = ft_test::step_losses(single);
  REQUIRE(ref.size() == 8u);
  CHECK(std::abs(ref.back() - ref.front()) > 1e-3);  // it trains
  check_strategies(r, ref,
                   {{"padded", "--strategy single --set model.padding_free=false"},
                    {"ddp", "--strategy ddp --nproc 2 --set train.batch_size=16"},
                    {"zero3", "--strategy zero3 --nproc 2 --set train.batch_size=16"},
                    {"zero3-padded", "--strategy zero3 --nproc 2 --set train.batch_size=16 --set model.padding_free=false"},
                    {"zero1", "--strategy zero1 --nproc 2 --set train.batch_size=16"},
                    {"dp", "--strategy dp --set strategy.options.replicas=2"},
                    {"horovod", "--strategy horovod --nproc 2 --set train.batch_size=16"}},
                   trainable);

  const fsys::path final_dir = r.out() / "final";
  check_peft_files(final_dir, "PROMPT_TUNING", kHidden);
  const auto cfg = json_of(final_dir / "adapter_config.json");
  CHECK(cfg.at("prompt_tuning_init") == "SAMPLE_VOCAB");
  CHECK(cfg.at("prompt_tuning_init_text").is_null());
  const auto loaded = ft::load_checkpoint(final_dir, false);
  REQUIRE(loaded.prompt_learning.has_value());
  CHECK(loaded.prompt_learning->method == ft::PromptMethod::kPrompt);
  CHECK(loaded.prompt_learning->length == kP);
  CHECK(loaded.prompt_learning->init == "vocab");
  CHECK(loaded.model.size() == 42u);

  check_resume(r, ref, "ddp", 2);
  check_eval_and_restart(r, final_dir, "prompt");
  ft::PromptLearning method;
  method.length = kP;
  check_predict(final_dir, method);

  // Refusals name what to do.
  auto refused = ft_test::run_ft(fmt::format("export {} {}", final_dir.string(), (r.tmp.path() / "x").string()));
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("holds a PROMPT_TUNING adapter") != std::string::npos);
  CHECK_FALSE(fsys::exists(r.tmp.path() / "x"));
  const std::string from_final = "--strategy single --set train.max_steps=1 --set ";
  auto as_lora = ft_test::run_ft(r.common + " " + from_final + "prompt.length=0 --set lora.rank=4 --set lora.adapter=" +
                                 final_dir.string());
  CHECK(as_lora.exit_code == 1);
  CHECK(as_lora.output.find("'peft_type' is \"PROMPT_TUNING\", not \"LORA\": load it with prompt.path") !=
        std::string::npos);
  auto as_prefix = ft_test::run_ft(r.common + " " + from_final + "prompt.length=0 --set prefix.length=4 --set prefix.path=" +
                                   final_dir.string());
  CHECK(as_prefix.output.find("holds a PROMPT_TUNING adapter; point prompt.path at it instead") != std::string::npos);
  auto other_length = ft_test::run_ft(r.common + " " + from_final + "prompt.length=5 --set prompt.path=" +
                                      final_dir.string());
  CHECK(other_length.output.find("has num_virtual_tokens 4, but prompt.length is 5; set prompt.length=4") !=
        std::string::npos);
}

TEST_CASE("prefix tuning runs: every strategy equals single, PEFT files, resume, eval, predict") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const Runner r("prefix-runs", fmt::format("--set prefix.length={}", kP));
  const auto single = r.run("single", "--strategy single --set train.save_every=4 --output-dir " + r.out().string());
  // P x layers x 2 x hidden + the classifier.
  const int64_t trainable = kP * kLayers * 2 * kHidden + kClassifier;
  CHECK(ft_test::summary_of(single).at("trainable_params") == trainable);
  const auto ref = ft_test::step_losses(single);
  REQUIRE(ref.size() == 8u);
  CHECK(std::abs(ref.back() - ref.front()) > 1e-3);
  check_strategies(r, ref,
                   {{"padded", "--strategy single --set model.padding_free=false"},
                    {"ddp", "--strategy ddp --nproc 2 --set train.batch_size=16"},
                    {"ddp-padded", "--strategy ddp --nproc 2 --set train.batch_size=16 --set model.padding_free=false"},
                    {"fsdp", "--strategy fsdp --nproc 2 --set train.batch_size=16"},
                    {"zero2", "--strategy zero2 --nproc 2 --set train.batch_size=16"},
                    {"zero3", "--strategy zero3 --nproc 2 --set train.batch_size=16"},
                    {"dp-padded", "--strategy dp --set strategy.options.replicas=2 --set model.padding_free=false"},
                    {"horovod", "--strategy horovod --nproc 2 --set train.batch_size=16"}},
                   trainable);

  const fsys::path final_dir = r.out() / "final";
  check_peft_files(final_dir, "PREFIX_TUNING", kLayers * 2 * kHidden);
  const auto cfg = json_of(final_dir / "adapter_config.json");
  CHECK(cfg.at("prefix_projection") == false);
  CHECK(cfg.at("encoder_hidden_size") == kHidden);
  CHECK_FALSE(cfg.contains("prompt_tuning_init"));
  // PEFT's table, split by layer: layer 1's value is columns [3h, 4h).
  const auto loaded = ft::load_checkpoint(final_dir, false);
  REQUIRE(loaded.prompt_learning.has_value());
  CHECK(loaded.prompt_learning->method == ft::PromptMethod::kPrefix);
  std::map<std::string, at::Tensor> model(loaded.model.begin(), loaded.model.end());
  CHECK(model.size() == 41u + 2u * kLayers);
  const at::Tensor table = tensors(final_dir / "adapter_model.safetensors").at("prompt_embeddings");
  CHECK(at::equal(table.narrow(1, 3 * kHidden, kHidden), model.at("bert.encoder.layer.1.attention.self.prefix_value")));
  CHECK(at::equal(table.narrow(1, 0, kHidden), model.at("bert.encoder.layer.0.attention.self.prefix_key")));

  check_resume(r, ref, "fsdp", 2);

  // zero3's shards consolidate into the same PEFT files.
  const fsys::path sharded = r.tmp.path() / "sharded";
  r.run("zero3-sharded", "--strategy zero3 --nproc 2 --set train.batch_size=16 --set train.save_sharded=true "
                         "--output-dir " + sharded.string());
  const fsys::path full = r.tmp.path() / "consolidated";
  ft_test::run_ok(fmt::format("consolidate {} --out {}", (sharded / "final").string(), full.string()));
  check_peft_files(full, "PREFIX_TUNING", kLayers * 2 * kHidden);
  const auto mine = tensors(full / "adapter_model.safetensors");
  for (const auto& [n, t] : tensors(final_dir / "adapter_model.safetensors")) {
    INFO(n);
    CHECK(at::allclose(mine.at(n), t, 0.0, 1e-5));  // zero3 x 2 vs single: same run within fp32 noise
  }
  check_eval_and_restart(r, final_dir, "prefix");
  ft::PromptLearning method;
  method.method = ft::PromptMethod::kPrefix;
  method.length = kP;
  check_predict(final_dir, method);
  auto refused = ft_test::run_ft(fmt::format("export {} {}", final_dir.string(), (r.tmp.path() / "x").string()));
  CHECK(refused.output.find("holds a PREFIX_TUNING adapter") != std::string::npos);
}

TEST_CASE("prompt and prefix config errors name the keys") {
  auto err = [](std::vector<std::string> sets) {
    return ft_test::error_of([&] { ft::config_from_yaml_string(ft::default_config_yaml(), "cfg.yaml", sets); });
  };
  CHECK(err({"prompt.length=4", "lora.rank=8"}) ==
        "cfg.yaml + --set: prompt.length: choose one fine-tuning method: lora.rank and prompt.length are set together, "
        "but LoRA (lora.rank), adapters (adapter.size), prompt tuning (prompt.length) and prefix tuning "
        "(prefix.length) exclude each other");
  CHECK(err({"prompt.length=4", "prefix.length=4"}).find("prefix.length: choose one fine-tuning method") !=
        std::string::npos);
  CHECK(err({"prefix.length=4", "prefix.projection=true"}).find("prefix.projection: PEFT's prefix_projection") !=
        std::string::npos);
  CHECK(err({"prompt.length=4", "prompt.init=text"}) ==
        "cfg.yaml + --set: prompt.init_text: required with prompt.init=text: the text whose tokens start the prompt");
  CHECK(err({"prompt.length=4", "prompt.init=zeros"}).find("prompt.init: unknown value 'zeros'") != std::string::npos);
  CHECK(err({"prompt.path=x"}) == "cfg.yaml + --set: prompt.path: needs prompt.length > 0 (the saved prompt's)");
  CHECK(err({"prefix.length=4", "train.freeze_layers=1"}).find("prefix.length: prompt and prefix tuning already "
                                                               "freeze every base weight") != std::string::npos);
}
