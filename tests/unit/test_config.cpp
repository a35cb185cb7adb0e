// The run config: shipped files load, overrides land on the right fields with
// type checks, every user error names the source and key, to_yaml round-trips.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/version.h>

#include "ft/config/config.h"
#include "ft/base/error.h"
#include "ft/model/packed_attention.h"
#include "ft_test.h"

namespace {

using ft_test::error_of;

namespace fs = std::filesystem;

// The smallest config that validates; tests append sections or --set keys.
const std::string kBase =
    "model:\n"
    "  config: tiny\n"
    "data:\n"
    "  train: rows.jsonl\n"
    "  vocab: vocab.txt\n";

ft::RunConfig from(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return ft::config_from_yaml_string(yaml, "cfg.yaml", overrides);
}

// kBase's model with a data section of kBase's train/vocab plus `extra` lines.
std::string err_data(const std::string& extra) {
  return error_of(
      [&] { from("model:\n  config: tiny\ndata:\n  train: a.jsonl\n  vocab: v\n" + extra); });
}

std::string with_set(const std::string& assignment) {
  return error_of([&] { from(kBase, {assignment}); });
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fs::path config_path(const char* name) { return ft_test::source_dir() / "configs" / name; }

ft::RunConfig load_shipped(const char* name) { return ft::load_config(config_path(name).string(), {}); }

}  // namespace

TEST_CASE("the shipped configs are exactly these and each loads") {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(ft_test::source_dir() / "configs")) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"bench-imdb.yaml", "bench-mini.yaml", "bench-tiny.yaml", "bench-weibo.yaml",
                                          "default.yaml", "parity-tiny.yaml", "pretrain-imdb.yaml",
                                          "pretrain-tiny-imdb.yaml", "pretrain-weibo.yaml", "tiny-imdb.yaml",
                                          "trainer-preset.yaml", "weibo.yaml"});
  for (const auto& name : names) {
    CAPTURE(name);
    CHECK_NOTHROW(ft::load_config(config_path(name.c_str()).string(), {}));
  }
}

TEST_CASE("configs/default.yaml: the pretrained MiniLM fine-tuned on 3400 IMDB rows, 1000 dev") {
  const auto c = load_shipped("default.yaml");
  CHECK(c.model.config == "data/all-minilm-l6-v2");
  CHECK(c.model.weights == "");  // the directory brings its weights
  CHECK_FALSE(c.model.dropout.has_value());
  CHECK(c.data.train == "data/imdb/train.jsonl");
  CHECK(c.data.vocab == "");  // the directory's tokenizer.json
  CHECK(c.data.labels == std::vector<std::string>{"neg", "pos"});
  CHECK(c.data.max_rows == 4400);
  CHECK(c.data.take == "random");
  CHECK(std::llround(c.data.max_rows * c.data.dev_fraction) == 1000);
  CHECK(c.data.max_seq_len == 256);
  CHECK(c.data.padding == "longest");
  CHECK(c.data.pair_truncation == "fast");
  CHECK(c.train.batch_size == 32);
  CHECK(c.train.lr == 1e-4);
  CHECK(c.train.weight_decay == 0.01);
  CHECK(c.train.scheduler == "linear");
  CHECK(c.train.warmup_ratio == 0.1);
  CHECK(c.train.epochs == 1);
  CHECK(c.train.eval_every == 0);
  CHECK(c.strategy.name == "single");
  CHECK(c.strategy.precision == "bf16");
  CHECK(c.source == config_path("default.yaml").string());
}

TEST_CASE("configs/tiny-imdb.yaml: the random-init tiny BERT of earlier defaults") {
  const auto c = load_shipped("tiny-imdb.yaml");
  CHECK(c.model.config == "tiny");
  CHECK(c.data.vocab == "data/bert-base-uncased/vocab.txt");
  CHECK(c.data.max_rows == 10000);
  CHECK(c.data.dev_fraction == 0.1);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.output_dir == "runs/tiny-imdb");
}

TEST_CASE("default_config() is configs/default.yaml, byte for byte") {
  CHECK(ft::default_config_yaml() == read_text(config_path("default.yaml")));
  CHECK(ft::to_yaml(ft::default_config()) == ft::to_yaml(load_shipped("default.yaml")));
}

TEST_CASE("keys the YAML leaves out keep the struct defaults") {
  const auto c = from(kBase);
  CHECK(c.train.batch_size == 32);
  CHECK(c.train.lr == 2e-5);
  CHECK(c.data.dev_fraction == 0.08);
  CHECK(c.data.format == "auto");
  CHECK(c.runtime.timeout_s == 30.0);
  CHECK(c.strategy.options.empty());
  CHECK(c.source == "cfg.yaml");
}

TEST_CASE("--set changes exactly the named field, typed like the file") {
  const auto c = from(kBase + "train:\n  lr: 1.0e-4\n  batch_size: 8\n",
                      {"train.lr=3e-5", "strategy.options.bucket_mb=25", "data.labels=[a, b]",
                       "model.dropout=0", "train.shuffle=false", "data.text_field=a: b",
                       "runtime.threads=+3", "train.lr=5e-5"});
  CHECK(c.train.lr == 5e-5);  // the later --set wins
  CHECK(c.train.batch_size == 8);  // untouched file value
  CHECK(c.strategy.options == std::map<std::string, std::string>{{"bucket_mb", "25"}});
  CHECK(c.data.labels == std::vector<std::string>{"a", "b"});
  REQUIRE(c.model.dropout.has_value());
  CHECK(*c.model.dropout == 0.0);
  CHECK_FALSE(c.train.shuffle);
  CHECK(c.data.text_field == "a: b");
  CHECK(c.runtime.threads == 3);
  CHECK(c.source == "cfg.yaml + --set");

  const auto d = from("model:\n  config: tiny\n  dropout: 0.2\ndata:\n  train: r.jsonl\n  vocab: v\n");
  CHECK(*d.model.dropout == 0.2);
  CHECK_FALSE(from("model:\n  config: tiny\n  dropout: 0.2\ndata:\n  train: r.jsonl\n  vocab: v\n",
                   {"model.dropout=null"})
                  .model.dropout.has_value());
  CHECK(from(kBase, {"data.dev="}).data.dev.empty());
  CHECK(from(kBase, {"strategy.options={a: 1, b: x}"}).strategy.options ==
        std::map<std::string, std::string>{{"a", "1"}, {"b", "x"}});
  // A section the file lacks is created.
  CHECK(from(kBase, {"runtime.metrics_out=m.jsonl"}).runtime.metrics_out == "m.jsonl");
  // Overrides alone, on an empty file.
  CHECK(from("", {"model.config=mini", "data.train=t.safetensors"}).model.config == "mini");
}

TEST_CASE("--set errors name --set and the key") {
  CHECK(with_set("train.batch_size=abc") ==
        "--set: train.batch_size: expected an integer, got 'abc'");
  CHECK(with_set("train.lr=fast") == "--set: train.lr: expected a number, got 'fast'");
  CHECK(with_set("trainlr") == "--set trainlr: expected key=value (e.g. --set train.lr=3e-5)");
  CHECK(with_set("=3") == "--set =3: expected key=value (e.g. --set train.lr=3e-5)");
  CHECK(with_set("train.lrr=1") == "--set: unknown key 'train.lrr' (did you mean 'train.lr'?)");
  CHECK(with_set("train.learning_rate=1") ==
        "--set: unknown key 'train.learning_rate' (did you mean 'train.lr'?)");
  CHECK(with_set("strategy.options.a.b=1") ==
        "--set: unknown key 'strategy.options.a.b' (docs/configuration.md lists every key)");
  CHECK(with_set("data.labels=[a, b").find("--set data.labels=[a, b: cannot parse the value") == 0);
  CHECK(with_set("train.batch_size=0") == "cfg.yaml + --set: train.batch_size: must be >= 1, got 0");
}

TEST_CASE("file errors name the file and the key") {
  auto err = [](const std::string& extra) { return error_of([&] { from(kBase + extra); }); };
  CHECK(err("train:\n  lrr: 1\n") == "cfg.yaml: unknown key 'train.lrr' (did you mean 'train.lr'?)");
  CHECK(err("trian:\n  lr: 1\n") == "cfg.yaml: unknown key 'trian' (did you mean 'train'?)");
  CHECK(err("zzz: 1\n") ==
        "cfg.yaml: unknown key 'zzz' (the sections are model, data, train, lora, adapter, prompt, prefix, pretrain, embedding, strategy, runtime)");
  CHECK(err("train:\n  qqqqqqqq: 1\n") ==
        "cfg.yaml: unknown key 'train.qqqqqqqq' (docs/configuration.md lists every key)");
  CHECK(err("train:\n  batch_size: abc\n") ==
        "cfg.yaml: train.batch_size: expected an integer, got 'abc'");
  CHECK(err("train:\n  batch_size: 3.5\n") ==
        "cfg.yaml: train.batch_size: expected an integer, got '3.5'");
  CHECK(err("train:\n  batch_size: [1]\n") ==
        "cfg.yaml: train.batch_size: expected an integer, got a list");
  CHECK(err("train:\n  lr: .nan\n") == "cfg.yaml: train.lr: expected a number, got '.nan'");
  CHECK(err("train:\n  shuffle: maybe\n") ==
        "cfg.yaml: train.shuffle: expected true or false, got 'maybe'");
  CHECK(err("train:\n  optimizer: {a: 1}\n") ==
        "cfg.yaml: train.optimizer: expected a string, got a mapping");
  CHECK(err_data("  labels: neg\n") ==
        "cfg.yaml: data.labels: expected a list like [a, b], got 'neg'");
  CHECK(err("strategy:\n  options:\n    bucket: [1, 2]\n") ==
        "cfg.yaml: strategy.options.bucket: expected a single value, got a list");
  CHECK(err("train: 5\n") == "cfg.yaml: train: expected a mapping of keys, got '5'");
  CHECK(err("train:\n  lr: 1\n  lr: 2\n") == "cfg.yaml: train.lr: the key appears twice");
  CHECK(error_of([] { from("- a\n- b\n"); }) ==
        "cfg.yaml: expected a mapping with the sections model, data, train, strategy, runtime; "
        "got a list");
}

TEST_CASE("validation: ranges, enums and cross-field rules") {
  auto err = [](const std::string& extra) { return error_of([&] { from(kBase + extra); }); };
  CHECK(err("train:\n  batch_size: 0\n") == "cfg.yaml: train.batch_size: must be >= 1, got 0");
  CHECK(err("train:\n  batch_size: -4\n") == "cfg.yaml: train.batch_size: must be >= 1, got -4");
  CHECK(err("train:\n  grad_accum: 0\n") == "cfg.yaml: train.grad_accum: must be >= 1, got 0");
  CHECK(err("train:\n  lr: 0\n") == "cfg.yaml: train.lr: must be > 0, got 0");
  CHECK(err("train:\n  lr: -1e-5\n") == "cfg.yaml: train.lr: must be > 0, got -1e-05");
  CHECK(err_data("  dev_fraction: 1\n") ==
        "cfg.yaml: data.dev_fraction: must be in [0, 1), got 1");
  CHECK(err_data("  dev_fraction: -0.1\n") ==
        "cfg.yaml: data.dev_fraction: must be in [0, 1), got -0.1");
  CHECK(err("train:\n  optimizer: adam\n") ==
        "cfg.yaml: train.optimizer: unknown value 'adam' (allowed: adamw, sgd)");
  CHECK(err("strategy:\n  precision: fp8\n") ==
        "cfg.yaml: strategy.precision: unknown value 'fp8' (allowed: auto, fp32, bf16, fp16)");
  CHECK(err_data("  padding: max\n") ==
        "cfg.yaml: data.padding: unknown value 'max' (allowed: longest, max_length)");
  auto err_model = [](const std::string& extra) {
    return error_of([&] { from("model:\n  config: tiny\n" + extra + "data:\n  train: a.safetensors\n"); });
  };
  CHECK(err_model("  attention: flash\n") ==
        "cfg.yaml: model.attention: unknown value 'flash' (allowed: auto, packed, tiled, sdpa, eager)");
  if (!ft::sdpa_available())
    CHECK(err_model("  attention: sdpa\n") ==
          fmt::format("cfg.yaml: model.attention: 'sdpa' needs LibTorch 2.0 or newer; this ft is built against "
                      "LibTorch {}; use auto, packed or eager", TORCH_VERSION));
  CHECK(err_data("  pair_truncation: rust\n") ==
        "cfg.yaml: data.pair_truncation: unknown value 'rust' (allowed: fast, slow)");
  CHECK(err("runtime:\n  device: tpu\n") ==
        "cfg.yaml: runtime.device: unknown value 'tpu' (allowed: cpu, cuda)");
  CHECK(err("train:\n  best_metric: f2\n") ==
        "cfg.yaml: train.best_metric: unknown value 'f2' (allowed: accuracy, macro_f1, loss, micro_f1, "
        "subset_accuracy, mse, mae, pearson, spearman, f1, precision, recall, recall@1, recall@10, mrr@10, weighted_f1, "
        "mcc, roc_auc, pr_auc)");
  CHECK(err("train:\n  best_metric: loss\n  metric_for_best_model: loss\n") ==
        "cfg.yaml: train.metric_for_best_model: the key appears twice (as train.best_metric)");
  CHECK(err("train:\n  class_weights: [1, -2]\n") ==
        "cfg.yaml: train.class_weights: a class weight is negative (-2); weights must be >= 0");
  CHECK(err("runtime:\n  report_to: [wandb]\n") ==
        "cfg.yaml: runtime.report_to: 'wandb' is not supported; ft reports to mlflow and tensorboard, and writes "
        "report.html into the output directory");
  CHECK(err("task: summarization\n") ==
        "cfg.yaml: task: 'summarization' is not a task ft trains (text-classification, token-classification, "
            "sentence-embedding; "
        "fill-mask is ft pretrain's)");
  CHECK(err("train:\n  save_every: 10\n") ==
        "cfg.yaml: train.save_every: needs train.output_dir (where to write the checkpoints)");
  CHECK(err_data("  dev_fraction: 0\ntrain:\n  eval_every: 5\n") ==
        "cfg.yaml: train.eval_every: there is no dev set (data.dev is empty and "
        "data.dev_fraction is 0)");
  CHECK(err_data("  labels: [a, b, a]\n") ==
        "cfg.yaml: data.labels: 'a' appears twice");
  CHECK(error_of([] { from("model:\n  config: tiny\n  dropout: 1\ndata:\n  train: a.jsonl\n  vocab: v\n"); }) ==
        "cfg.yaml: model.dropout: must be in [0, 1), got 1");
  CHECK(error_of([] { from("data:\n  train: a.jsonl\n  vocab: v\n"); }) ==
        "cfg.yaml: model.config: required: a preset (tiny, mini, base), an HF config.json or a "
        "checkpoint directory");
  CHECK(error_of([] { from("model:\n  config: tiny\ndata:\n  train: a.jsonl\n"); }) ==
        "cfg.yaml: data.vocab: required for text data ('a.jsonl'); build one with `ft vocab "
        "build` or point data.vocab at a vocab.txt");
  CHECK(error_of([] { from("model:\n  config: tiny\ndata:\n  train: rows.txt\n  vocab: v\n"); }) ==
        "cfg.yaml: data.train: cannot tell the format of 'rows.txt' from its extension; set "
        "data.format to json, jsonl, csv, tsv or safetensors");
  // Pre-tokenized data needs no vocab; max_steps lets epochs be 0.
  CHECK_NOTHROW(from("model:\n  config: tiny\ndata:\n  train: a.safetensors\n"
                     "train:\n  epochs: 0\n  max_steps: 5\n"));
  CHECK(err("train:\n  epochs: 0\n") == "cfg.yaml: train.epochs: must be >= 1, got 0");
}

TEST_CASE("a checkpoint directory's vocab.txt satisfies data.vocab") {
  ft_test::TempDir dir("config-ckpt");
  std::ofstream(dir.path() / "vocab.txt") << "[PAD]\n";
  const std::string yaml = "model:\n  config: " + dir.path().string() + "\ndata:\n  train: a.csv\n";
  CHECK(from(yaml).data.vocab == "");
}

TEST_CASE("resolve_data_format: by extension, unless given") {
  CHECK(ft::resolve_data_format("auto", "d/x.JSON") == "json");
  CHECK(ft::resolve_data_format("auto", "x.jsonl") == "jsonl");
  CHECK(ft::resolve_data_format("auto", "x.ndjson") == "jsonl");
  CHECK(ft::resolve_data_format("auto", "x.csv") == "csv");
  CHECK(ft::resolve_data_format("auto", "x.tsv") == "tsv");
  CHECK(ft::resolve_data_format("csv", "x.txt") == "csv");
  CHECK(error_of([] { ft::resolve_data_format("auto", "x", "data.dev"); }) ==
        "data.dev: cannot tell the format of 'x' from its extension; set data.format to json, "
        "jsonl, csv, tsv or safetensors");
}

TEST_CASE("load_config: missing file and YAML syntax errors") {
  CHECK(error_of([] { ft::load_config("no/such/config.yaml", {}); })
            .rfind("no/such/config.yaml: config file not found", 0) == 0);
  ft_test::TempDir dir("config-syntax");
  const auto bad = (dir.path() / "bad.yaml").string();
  std::ofstream(bad) << "model:\n  config: tiny\ntrain: [1, 2\n";
  const std::string msg = error_of([&] { ft::load_config(bad, {}); });
  CHECK(msg.rfind(bad + ":4:1: YAML syntax error: ", 0) == 0);
  CHECK(error_of([&] { ft::load_config(dir.path().string(), {}); }) ==
        dir.path().string() + ": is a directory; --config wants a YAML file (see configs/)");
}

TEST_CASE("to_yaml writes every key and round-trips byte-exact") {
  auto c = from(kBase, {"data.labels=[其他, 'null', '~', 'a: b', '#x', '1', ' sp ']",
                        "strategy.options.bucket_mb=25", "strategy.options.hook=fp16",
                        "model.dropout=0.1", "train.lr=3e-5", "data.pair_field=null",
                        "train.output_dir=runs/x y", "runtime.timeout_s=2.5",
                        "strategy.options.empty="});
  const std::string text = ft::to_yaml(c);
  CHECK(text.find("  lr: 3e-05\n") != std::string::npos);
  CHECK(text.find("  timeout_s: 2.5\n") != std::string::npos);
  CHECK(text.find("  dropout: 0.1\n") != std::string::npos);
  CHECK(text.find("  batch_size: 32\n") != std::string::npos);
  CHECK(text.find("  shuffle: true\n") != std::string::npos);
  const auto back = from(text);
  CHECK(back.data.labels == c.data.labels);
  CHECK(back.data.labels == std::vector<std::string>{"其他", "null", "~", "a: b", "#x", "1", " sp "});
  CHECK(back.strategy.options == c.strategy.options);
  CHECK(back.model.dropout == c.model.dropout);
  CHECK(back.train.lr == 3e-5);
  CHECK(back.train.output_dir == "runs/x y");
  CHECK(back.data.pair_field == "");
  CHECK(back.strategy.options.at("empty") == "");
  CHECK(ft::to_yaml(back) == text);

  // No dropout override and no options: still every key, still round-trips.
  const std::string plain = ft::to_yaml(from(kBase));
  CHECK(plain.find("  dropout: ~\n") != std::string::npos);
  CHECK(plain.find("  options: {}\n") != std::string::npos);
  CHECK(ft::to_yaml(from(plain)) == plain);
  CHECK_FALSE(from(plain).model.dropout.has_value());

  // Named dev sets keep their order (the first one is the judged set).
  const auto named = from(kBase, {"data.dev={zeta: z.jsonl, alpha: a b.jsonl}"});
  REQUIRE(named.data.dev.files.size() == 2);
  CHECK(named.data.dev.files[0].name == "zeta");
  CHECK(named.data.dev.files[1].path == "a b.jsonl");
  const std::string named_text = ft::to_yaml(named);
  CHECK(named_text.find("  dev:\n    zeta: z.jsonl\n    alpha: a b.jsonl\n") != std::string::npos);
  CHECK(ft::to_yaml(from(named_text)) == named_text);
  CHECK(ft::best_metric_ref(named).dev == "zeta");
  auto judged = named;
  judged.train.best_metric = "eval_alpha_macro_f1";
  CHECK(ft::best_metric_ref(judged).dev == "alpha");
  CHECK(ft::best_metric_ref(judged).metric == "macro_f1");
  CHECK(ft::to_yaml(from(kBase, {"data.dev=one.jsonl"})).find("  dev: one.jsonl\n") != std::string::npos);
}

TEST_CASE("each pretraining config reads its fine-tuning run's data the same way (so the same dev rows are left out)") {
  for (const auto& [pretrain, run] : {std::pair{"pretrain-imdb.yaml", "default.yaml"}, std::pair{"pretrain-tiny-imdb.yaml", "tiny-imdb.yaml"},
        std::pair{"pretrain-weibo.yaml", "weibo.yaml"}}) {
    CAPTURE(pretrain);
    const auto p = load_shipped(pretrain).data;
    const auto r = load_shipped(run).data;
    CHECK(p.train == r.train);
    CHECK(p.format == r.format);
    CHECK(p.text_field == r.text_field);
    CHECK(p.labels == r.labels);
    CHECK(p.max_rows == r.max_rows);
    CHECK(p.take == r.take);
    CHECK(p.dev_fraction == r.dev_fraction);
    CHECK(p.split_seed == r.split_seed);
    CHECK(p.shuffle_before_split == r.shuffle_before_split);
    CHECK(p.strip_spaces == r.strip_spaces);
    // The same pieces, unless the run reads its pretrained model's own tokenizer (weibo.yaml's bge).
    if (!r.vocab.empty()) CHECK(p.vocab == r.vocab);
    CHECK(p.max_seq_len == r.max_seq_len);
  }
}
