// LoRA: injection, merge, adapter files, what trains, and parity of LoRA
// runs across strategies (the real `ft` on ../shared/fixtures/parity-tiny).
#include <cmath>
#include <filesystem>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/base/fs.h"
#include "ft/model/lora.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"
#include "ft_small_model.h"

namespace fsys = std::filesystem;

namespace {

ft::LoraConfig lora4() {
  ft::LoraConfig l;
  l.rank = 4;
  l.alpha = 8;
  return l;
}

std::shared_ptr<ft::EncoderModel> base_model() {
  at::manual_seed(1);
  return std::make_shared<ft::EncoderModel>(ft_test::small_config());
}

at::Tensor param(const ft::EncoderModel& m, const std::string& name) {
  for (const auto& [n, t] : m.weights())
    if (n == name) return t;
  FAIL("no parameter " << name);
  return {};
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// A few sign-SGD steps on what LoRA trains: every trained element moves by
// 0.05 a step, so B is well away from zero whatever the tiny gradients.
void train_adapters(ft::EncoderModel& m, const ft::LoraConfig& lora, const ft::Batch& batch) {
  for (auto& item : m.named_parameters()) item.value().set_requires_grad(ft::is_lora_trainable(item.key(), lora));
  for (int step = 0; step < 3; ++step) {
    auto loss = at::cross_entropy_loss(m.forward(batch), batch.labels);
    loss.backward();
    torch::NoGradGuard no_grad;
    for (auto& p : m.parameters()) {
      if (!p.requires_grad()) continue;
      p.sub_(p.grad().sign() * 0.05);
      p.mutable_grad().zero_();
    }
  }
}


}  // namespace

TEST_CASE("fresh adapters: PEFT names, units and init, and the logits do not change") {
  auto m = base_model();
  m->eval();
  const auto batch = ft_test::small_batch();
  torch::NoGradGuard no_grad;
  const at::Tensor before = m->forward(batch);
  const auto adapted = ft::apply_lora(*m, lora4(), 42);
  CHECK(adapted == std::vector<std::string>{"bert.encoder.layer.0.attention.self.query",
                                            "bert.encoder.layer.0.attention.self.value",
                                            "bert.encoder.layer.1.attention.self.query",
                                            "bert.encoder.layer.1.attention.self.value"});
  const at::Tensor after = m->forward(batch);
  CHECK(at::equal(before, after));  // B = 0: exactly the base model

  const at::Tensor a = param(*m, "bert.encoder.layer.1.attention.self.value.lora_A.weight");
  const at::Tensor b = param(*m, "bert.encoder.layer.1.attention.self.value.lora_B.weight");
  CHECK(a.sizes() == at::IntArrayRef({4, 16}));
  CHECK(b.sizes() == at::IntArrayRef({16, 4}));
  CHECK(b.abs().max().item<float>() == 0.0f);
  CHECK(a.abs().max().item<double>() <= 0.25);  // kaiming a=sqrt(5): U(+-1/sqrt(16))
  CHECK(a.std().item<double>() > 0.1);          // ~0.25/sqrt(3) = 0.144
  // In layer 1's unit, so ZeRO/FSDP shard it with that layer.
  CHECK(m->unit_of("bert.encoder.layer.1.attention.self.value.lora_A.weight") == 2);
  int in_unit = 0;
  const auto units = m->unit_parameters();
  for (const auto& [n, t] : units[2]) in_unit += ft::is_lora_param(n) ? 1 : 0;
  CHECK(in_unit == 4);
  CHECK(m->weights().size() == 41u + 8u);  // 41 BERT tensors (2 layers) + 4 adapters x (A, B)

  // Same seed, same adapters (every rank draws the same A).
  auto m2 = base_model();
  ft::apply_lora(*m2, lora4(), 42);
  CHECK(at::equal(a, param(*m2, "bert.encoder.layer.1.attention.self.value.lora_A.weight")));

  CHECK(ft::is_lora_trainable("classifier.weight", lora4()));
  CHECK_FALSE(ft::is_lora_trainable("bert.pooler.dense.weight", lora4()));
  CHECK_FALSE(ft::is_lora_trainable("bert.encoder.layer.0.attention.self.query.weight", lora4()));
  auto no_head = lora4();
  no_head.train_head = false;
  CHECK_FALSE(ft::is_lora_trainable("classifier.bias", no_head));
}

TEST_CASE("targets match by name suffix as PEFT, and bad targets are named") {
  CHECK(ft::lora_targets_module("bert.encoder.layer.3.attention.output.dense", {"attention.output.dense"}));
  CHECK(ft::lora_targets_module("bert.encoder.layer.3.output.dense", {"output.dense"}));
  CHECK_FALSE(ft::lora_targets_module("bert.encoder.layer.3.attention.self.query", {"ery"}));
  auto dense = lora4();
  dense.targets = {"dense"};  // every dense: attention.output, intermediate, output (x2 layers), pooler
  auto m = base_model();
  CHECK(ft::apply_lora(*m, dense, 1).size() == 7u);
  CHECK(ft_test::error_of([&] { ft::apply_lora(*m, dense, 1); }).find("already has an adapter") != std::string::npos);
  auto l = lora4();
  l.targets = {"query", "qeury"};
  CHECK(ft_test::error_of([&] { ft::apply_lora(*base_model(), l, 1); }).find("'qeury' matches no module") !=
        std::string::npos);
  l.targets = {"output"};
  CHECK(ft_test::error_of([&] { ft::apply_lora(*base_model(), l, 1); }).find("is not a Linear layer") !=
        std::string::npos);
}

TEST_CASE("merged weights give the adapted model's logits after training") {
  auto m = base_model();
  const auto lora = lora4();
  ft::apply_lora(*m, lora, 3);
  const auto batch = ft_test::small_batch();
  train_adapters(*m, lora, batch);
  m->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor adapted = m->forward(batch);
  CHECK(param(*m, "bert.encoder.layer.0.attention.self.query.lora_B.weight").abs().max().item<double>() > 1e-3);

  const auto merged_weights = ft::merge_lora(m->weights(), lora);
  CHECK(merged_weights.size() == 41u);
  auto merged = base_model();
  merged->load_weights(merged_weights, "merged");
  merged->eval();
  const at::Tensor plain = merged->forward(batch);
  CHECK(max_abs_diff(adapted, plain) < 1e-5);

  // A replica (dp) gets the same adapters: same names, same function.
  auto twin = base_model();
  ft::replicate_lora(*m, *twin);
  twin->load_weights(m->weights(), "replica");
  twin->eval();
  CHECK(at::equal(twin->forward(batch), adapted));

  // The adapters matter: the base weights alone (+ trained head) differ.
  auto base_only = base_model();
  base_only->load_weights(ft::without_lora(m->weights()), "base");
  base_only->eval();
  CHECK(max_abs_diff(adapted, base_only->forward(batch)) > 1e-3);
}

TEST_CASE("adapter save -> load round trip is byte exact; PEFT files and errors") {
  ft_test::TempDir tmp("lora-adapter");
  auto m = base_model();
  auto lora = lora4();
  lora.targets = {"query", "value", "intermediate.dense"};
  ft::apply_lora(*m, lora, 5);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : m->named_parameters())
      if (ft::is_lora_trainable(item.key(), lora)) item.value().normal_();
  }
  ft::save_adapter(tmp.path(), m->weights(), lora, "some/base", ft::BertHead::kSequenceClassification);

  const auto raw = ft::safetensors::load((tmp.path() / "adapter_model.safetensors").string());
  CHECK(raw.size() == 6u * 2u + 2u);  // 6 adapted modules x (A, B) + classifier weight, bias
  bool has_peft_key = false;
  for (const auto& [n, t] : raw) has_peft_key |= n == "base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight";
  CHECK(has_peft_key);
  const auto cfg = nlohmann::json::parse(ft::fs::read_file(tmp.path() / "adapter_config.json"));
  CHECK(cfg.at("peft_type") == "LORA");
  CHECK(cfg.at("task_type") == "SEQ_CLS");
  CHECK(cfg.at("r") == 4);
  CHECK(cfg.at("lora_alpha") == 8);
  CHECK(cfg.at("target_modules") == nlohmann::json({"query", "value", "intermediate.dense"}));
  CHECK(cfg.at("modules_to_save") == nlohmann::json({"classifier"}));
  CHECK(cfg.at("base_model_name_or_path") == "some/base");

  const auto read = ft::read_adapter_config(tmp.path());
  CHECK(read.rank == 4);
  CHECK(read.alpha == 8.0);
  CHECK(read.train_head);
  CHECK(read.targets == lora.targets);
  CHECK(read.adapter == tmp.path().string());

  auto m2 = base_model();
  ft::apply_lora(*m2, lora, 99);  // different A, zero B: everything must come from the file
  ft::load_adapter(*m2, tmp.path(), lora);
  int compared = 0;
  for (const auto& [n, t] : m->weights()) {
    if (!ft::is_lora_trainable(n, lora)) continue;
    INFO(n);
    CHECK(at::equal(t, param(*m2, n)));
    ++compared;
  }
  CHECK(compared == 14);

  auto wrong_rank = lora;
  wrong_rank.rank = 8;
  auto m3 = base_model();
  ft::apply_lora(*m3, wrong_rank, 1);
  CHECK(ft_test::error_of([&] { ft::load_adapter(*m3, tmp.path(), wrong_rank); }).find("has r=4, but lora.rank is 8") !=
        std::string::npos);
  auto fewer = lora;
  fewer.targets = {"query"};
  auto m4 = base_model();
  ft::apply_lora(*m4, fewer, 1);
  CHECK(ft_test::error_of([&] { ft::load_adapter(*m4, tmp.path(), fewer); }).find("has no place in this model") !=
        std::string::npos);
}

// The real binary on parity-tiny: what trains, state bytes, parity of
// single / zero2 / ddp, the checkpoint layout, resume, eval and export.
TEST_CASE("LoRA runs: trainable state, zero2/ddp parity, checkpoint, resume, eval, export") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("lora-runs");
  const fsys::path data = ft_test::shared_dir() / "fixtures/parity-tiny/data.safetensors";
  const std::string common =
      "run --config configs/parity-tiny.yaml --threads 1 --set lora.rank=4 --set lora.alpha=8 --set train.lr=1e-2 "
      "--set train.max_steps=6";
  auto run = [&](const std::string& name, const std::string& extra) {
    const auto metrics = tmp.path() / (name + ".jsonl");
    ft_test::run_ok(fmt::format("{} --metrics-out {} {}", common, metrics.string(), extra));
    return metrics;
  };
  const auto single = run("single", "--strategy single --output-dir " + (tmp.path() / "out").string() +
                                        " --set train.save_every=3");
  const auto zero2 = run("zero2", "--strategy zero2 --nproc 2 --set train.batch_size=16");
  const auto ddp = run("ddp", "--strategy ddp --nproc 2 --set train.batch_size=16");

  // parity-tiny: hidden 128, 2 layers, 6 labels. 4 adapted modules x
  // (4x128 + 128x4) + classifier 6x128 + 6.
  const int64_t trainable = 4 * (4 * 128 + 128 * 4) + 6 * 128 + 6;
  const auto s_single = ft_test::summary_of(single), s_zero2 = ft_test::summary_of(zero2), s_ddp = ft_test::summary_of(ddp);
  CHECK(s_single.at("trainable_params") == trainable);
  CHECK(s_zero2.at("trainable_params") == trainable);
  CHECK(s_ddp.at("trainable_params") == trainable);
  // fp32 AdamW: exp_avg + exp_avg_sq = 8 bytes per trainable element.
  CHECK(s_single.at("optimizer_bytes")[0] == 8 * trainable);
  CHECK(s_ddp.at("optimizer_bytes")[0] == 8 * trainable);
  CHECK(s_ddp.at("optimizer_bytes")[1] == 8 * trainable);
  CHECK(s_zero2.at("optimizer_bytes")[0].get<int64_t>() + s_zero2.at("optimizer_bytes")[1].get<int64_t>() ==
        8 * trainable);
  CHECK(s_single.at("grad_bytes")[0] == 4 * trainable);
  CHECK(s_ddp.at("grad_bytes")[0] == 4 * trainable);

  const auto ref = ft_test::step_losses(single);
  REQUIRE(ref.size() == 6u);
  CHECK(std::abs(ref.back() - ref.front()) > 1e-3);  // it trains
  for (const auto& [name, metrics] : {std::pair{"zero2", zero2}, std::pair{"ddp", ddp}}) ft_test::check_same_losses(ref, metrics, name, 1e-4);

  // Checkpoint: HF-loadable base weights + PEFT adapter files.
  const fsys::path final_dir = tmp.path() / "out/final";
  for (const auto& [n, t] : ft::safetensors::load((final_dir / "model.safetensors").string())) {
    INFO(n);
    CHECK_FALSE(ft::is_lora_param(n));
  }
  const auto loaded = ft::load_checkpoint(final_dir, false);
  REQUIRE(loaded.lora.has_value());
  CHECK(loaded.lora->rank == 4);
  CHECK(loaded.model.size() == 41u + 8u);

  // Resume from step 3 reproduces steps 4..6.
  const auto resumed = run("resume", "--strategy single --set train.resume_from=" +
                                         (tmp.path() / "out/checkpoint-3").string());
  const auto tail = ft_test::step_losses(resumed);
  REQUIRE(tail.size() == 3u);
  for (size_t i = 0; i < 3; ++i) {
    INFO("resumed step " << i + 4);
    CHECK(std::abs(tail[i] - ref[i + 3]) < 1e-4);
  }

  // Export: without --merge-lora a clear error; with it, plain HF weights
  // whose eval equals the adapted checkpoint's eval.
  auto refused = ft_test::run_ft(fmt::format("export {} {}", final_dir.string(), (tmp.path() / "x").string()));
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("pass --merge-lora") != std::string::npos);
  CHECK_FALSE(fsys::exists(tmp.path() / "x"));
  const fsys::path merged = tmp.path() / "merged";
  ft_test::run_ok(fmt::format("export --merge-lora {} {}", final_dir.string(), merged.string()));
  CHECK(fsys::exists(merged / "config.json"));
  CHECK_FALSE(fsys::exists(merged / "adapter_config.json"));
  CHECK(ft::safetensors::load((merged / "model.safetensors").string()).size() == 41u);

  auto eval_loss = [&](const fsys::path& ckpt, const std::string& name) {
    const auto metrics = tmp.path() / (name + ".jsonl");
    ft_test::run_ok(fmt::format("eval --checkpoint {} --data {} --set runtime.metrics_out={}", ckpt.string(), data.string(),
                       metrics.string()));
    auto ev = ft_test::read_events(metrics, "eval");
    REQUIRE(ev.size() == 1u);
    return ev[0].at("loss").get<double>();
  };
  const double adapted = eval_loss(final_dir, "eval-adapted");
  const double plain = eval_loss(merged, "eval-merged");
  CHECK(std::abs(adapted - plain) < 1e-5);
  // predict applies the adapter too: the same probabilities as the export.
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n";
  for (int i = 7; i < 21128; ++i) vocab += fmt::format("tok{}\n", i);  // parity-tiny's vocab_size
  for (const auto& d : {final_dir, merged}) ft::fs::write_file_atomic(d / "vocab.txt", vocab);
  auto probabilities = [&](const fsys::path& ckpt) {
    const std::string out = ft_test::run_ok(fmt::format("predict --checkpoint {} 'hello world'", ckpt.string()));
    return nlohmann::json::parse(out.substr(out.find('{'))).at("probabilities");
  };
  const auto p_adapted = probabilities(final_dir), p_merged = probabilities(merged);
  REQUIRE(p_adapted.size() == 6u);
  for (const auto& [label, p] : p_adapted.items()) {
    INFO(label);
    CHECK(std::abs(p.get<double>() - p_merged.at(label).get<double>()) < 1e-6);
  }

  // lora.adapter starts a run from the saved adapter: its first loss, over
  // all 256 rows at once, is the adapted checkpoint's eval loss.
  const auto restart = run("from-adapter", fmt::format("--strategy single --set model.config={0} --set model.weights= "
                                                       "--set lora.adapter={0} --set train.batch_size=256 "
                                                       "--set train.max_steps=1",
                                                       final_dir.string()));
  REQUIRE(ft_test::step_losses(restart).size() == 1u);
  CHECK(std::abs(ft_test::step_losses(restart)[0] - adapted) < 1e-5);

  // The adapter matters: the checkpoint's base weights (+ head) alone differ.
  const fsys::path base_only = tmp.path() / "base-only";
  fsys::create_directories(base_only);
  for (const char* f : {"config.json", "model.safetensors"}) fsys::copy_file(final_dir / f, base_only / f);
  CHECK(std::abs(eval_loss(base_only, "eval-base") - adapted) > 5e-4);
}

TEST_CASE("lora.targets left empty adapts each family's query and value projections, as PEFT's default") {
  const struct {
    const char* family;
    std::vector<std::string> suffixes;
  } cases[] = {{"roberta", {"attention.self.query", "attention.self.value"}},
               {"distilbert", {"attention.q_lin", "attention.v_lin"}},
               {"deberta-v2", {"attention.self.query_proj", "attention.self.value_proj"}},
               {"modernbert", {"attn.Wqkv"}}};
  for (const auto& c : cases) {
    INFO(c.family);
    const auto config = ft::BertConfig::from_json_file(
        (ft_test::source_dir() / "tests/data/hf/families" / c.family / "config.json").string());
    ft::EncoderModel model(config);
    ft::LoraConfig lora;
    lora.rank = 2;
    REQUIRE(lora.targets.empty());
    const auto adapted = ft::apply_lora(model, lora, 1);
    CHECK(adapted.size() == c.suffixes.size() * static_cast<size_t>(config.num_hidden_layers));
    for (const auto& name : adapted) {
      bool known = false;
      for (const auto& s : c.suffixes) known = known || name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
      CHECK_MESSAGE(known, name);
    }
    CHECK(ft::with_family_targets(lora, config).targets == config.family().lora_targets);
  }
}
