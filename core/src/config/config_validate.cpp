// validate(): the range, enum and cross-field checks that make a bad run fail
// in the first second with the key to fix, rather than after the model and
// data have loaded. Also the key-typo suggestions used by the loader.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/version.h>

#include "config_fields.h"
#include "ft/config/config.h"
#include "ft/base/error.h"
#include "ft/base/torch_features.h"
#include "ft/observe/trace.h"

namespace ft {
namespace {

using Allowed = std::initializer_list<const char*>;

// Runs the checks for one config; every failure names source and key.
class Checker {
 public:
  explicit Checker(const RunConfig& c) : src_(c.source.empty() ? "config" : c.source) {}

  void one_of(const char* key, const std::string& value, Allowed allowed) const {
    for (const char* a : allowed) {
      if (value == a) return;
    }
    fail("{}: {}: unknown value '{}' (allowed: {})", src_, key, value,
         fmt::join(allowed.begin(), allowed.end(), ", "));
  }
  void at_least(const char* key, int64_t value, int64_t min) const {
    if (value < min) fail("{}: {}: must be >= {}, got {}", src_, key, min, value);
  }
  void positive(const char* key, double value) const {
    if (!(value > 0)) fail("{}: {}: must be > 0, got {}", src_, key, value);
  }
  void non_negative(const char* key, double value) const {
    if (!(value >= 0)) fail("{}: {}: must be >= 0, got {}", src_, key, value);
  }
  // [lo, hi) or [lo, hi] when closed.
  void in_range(const char* key, double value, double lo, double hi, bool closed) const {
    const bool ok = value >= lo && (closed ? value <= hi : value < hi);
    if (!ok) fail("{}: {}: must be in [{}, {}{}, got {}", src_, key, lo, hi, closed ? "]" : ")", value);
  }
  void required(const char* key, const std::string& value, const char* what) const {
    if (value.empty()) fail("{}: {}: required: {}", src_, key, what);
  }
  [[noreturn]] void bad(const char* key, const std::string& why) const {
    fail("{}: {}: {}", src_, key, why);
  }
  const std::string& source() const { return src_; }

 private:
  std::string src_;
};

void check_model(const Checker& ck, const ModelConfigRef& m) {
  ck.required("model.config", m.config,
              "a preset (tiny, mini, base), an HF config.json or a checkpoint directory");
  if (m.dropout) ck.in_range("model.dropout", *m.dropout, 0.0, 1.0, false);
  ck.one_of("model.attention", m.attention, {"auto", "packed", "tiled", "sdpa", "eager"});
  if (!m.problem_type.empty())
    ck.one_of("model.problem_type", m.problem_type,
              {"single_label_classification", "multi_label_classification", "regression"});
  if (m.attention == "sdpa" && !sdpa_available())
    ck.bad("model.attention", fmt::format("'sdpa' needs LibTorch 2.0 or newer; this ft is built against LibTorch {}; "
                                          "use auto, packed or eager", TORCH_VERSION));
}

void check_data(const Checker& ck, const RunConfig& c) {
  const DataConfig& d = c.data;
  ck.required("data.train", d.train, "the training data file (json, jsonl, csv, tsv, safetensors)");
  ck.one_of("data.format", d.format, {"auto", "json", "jsonl", "csv", "tsv", "safetensors"});
  for (const auto& f : d.dev.files) {
    // A name becomes part of metric keys (eval_<name>_accuracy, TensorBoard tags, MLflow).
    const bool plain = std::all_of(f.name.begin(), f.name.end(),
                                   [](unsigned char ch) { return std::isalnum(ch) || ch == '_' || ch == '-'; });
    if (!plain) ck.bad("data.dev", fmt::format("dev set name '{}': use letters, digits, '_' and '-'", f.name));
    if (f.path.empty()) ck.bad(DevFiles::key(f).c_str(), "the file is empty; give a path");
  }
  std::string format;
  try {
    format = resolve_data_format(d.format, d.train, "data.train");
    for (const auto& f : d.dev.files) resolve_data_format(d.format, f.path, DevFiles::key(f));
  } catch (const Error& e) {
    fail("{}: {}", ck.source(), e.what());
  }
  if (format != "safetensors") {
    ck.required("data.text_field", d.text_field, "the field holding the text");
    // data.label_field may be empty: unlabelled text, for ft pretrain (ft run refuses it).
  }
  std::set<std::string> names;
  for (const auto& label : d.labels) {
    if (label.empty()) ck.bad("data.labels", "a label name is empty");
    if (!names.insert(label).second) ck.bad("data.labels", fmt::format("'{}' appears twice", label));
  }
  if (!(d.label_scale > 0)) ck.bad("data.label_scale", "must be > 0 (regression labels are divided by it)");
  ck.at_least("data.max_rows", d.max_rows, 0);
  ck.one_of("data.take", d.take, {"first", "random"});
  ck.one_of("data.tag_scheme", d.tag_scheme, {"iob2", "any"});
  ck.in_range("data.dev_fraction", d.dev_fraction, 0.0, 1.0, false);
  ck.one_of("data.bad_rows", d.bad_rows, {"error", "skip"});
  ck.one_of("data.lowercase", d.lowercase, {"auto", "true", "false"});
  ck.at_least("data.max_seq_len", d.max_seq_len, 3);  // [CLS] + one token + [SEP]
  ck.one_of("data.padding", d.padding, {"longest", "max_length"});
  ck.one_of("data.pair_truncation", d.pair_truncation, {"fast", "slow"});

  // A model or checkpoint directory carries its tokenizer; the run names
  // what such a directory lacks, its weights first (a directory not there
  // yet, data not fetched, too). Only a model trained from scratch (a preset
  // or a config.json) needs a vocabulary built from the data.
  std::error_code ec;
  const std::filesystem::path model_path(c.model.config);
  const bool preset_or_file = c.model.config == "tiny" || c.model.config == "mini" || c.model.config == "base" ||
                              model_path.extension() == ".json";
  const bool model_dir = !preset_or_file && (std::filesystem::is_directory(model_path, ec) ||
                                             !std::filesystem::exists(model_path, ec));
  if (format != "safetensors" && d.vocab.empty() && !model_dir) {
    ck.bad("data.vocab",
           fmt::format("required for text data ('{}'); build one with `ft vocab build` or point "
                       "data.vocab at a vocab.txt",
                       d.train));
  }
}

void check_train(const Checker& ck, const RunConfig& c) {
  const TrainConfig& t = c.train;
  ck.at_least("train.max_steps", t.max_steps, 0);
  if (t.max_steps == 0) ck.at_least("train.epochs", t.epochs, 1);
  ck.at_least("train.batch_size", t.batch_size, 1);
  ck.at_least("train.eval_batch_size", t.eval_batch_size, 0);
  ck.at_least("train.grad_accum", t.grad_accum, 1);
  ck.one_of("train.optimizer", t.optimizer, {"adamw", "sgd"});
  ck.positive("train.lr", t.lr);
  ck.non_negative("train.weight_decay", t.weight_decay);
  ck.in_range("train.beta1", t.beta1, 0.0, 1.0, false);
  ck.in_range("train.beta2", t.beta2, 0.0, 1.0, false);
  ck.positive("train.eps", t.eps);
  ck.in_range("train.momentum", t.momentum, 0.0, 1.0, false);
  ck.one_of("train.scheduler", t.scheduler, {"linear", "cosine", "constant"});
  ck.one_of("train.warmup_type", t.warmup_type, {"linear", "log"});
  ck.in_range("train.warmup_ratio", t.warmup_ratio, 0.0, 1.0, true);
  ck.at_least("train.warmup_steps", t.warmup_steps, 0);
  ck.non_negative("train.max_grad_norm", t.max_grad_norm);
  ck.at_least("train.log_every", t.log_every, 1);
  ck.at_least("train.eval_every", t.eval_every, 0);
  ck.at_least("train.save_every", t.save_every, 0);
  ck.at_least("train.save_total_limit", t.save_total_limit, 0);
  ck.one_of("train.best_metric", best_metric_ref(c).metric,
            {"accuracy", "macro_f1", "loss", "micro_f1", "subset_accuracy", "mse", "mae", "pearson", "spearman", "f1",
             "precision", "recall", "recall@1", "recall@10", "mrr@10", "weighted_f1", "mcc", "roc_auc", "pr_auc"});
  ck.at_least("train.early_stopping_patience", t.early_stopping_patience, 0);
  ck.non_negative("train.early_stopping_threshold", t.early_stopping_threshold);
  if (t.early_stopping_patience > 0 && t.eval_every == 0 && t.epochs < 2 && t.max_steps == 0) {
    ck.bad("train.early_stopping_patience", "evaluations come once per epoch and there is one epoch: set train.eval_every");
  }
  if ((t.early_stopping_patience > 0 || t.load_best_model_at_end) && c.data.dev.empty() && c.data.dev_fraction == 0) {
    ck.bad(t.early_stopping_patience > 0 ? "train.early_stopping_patience" : "train.load_best_model_at_end",
           "needs evaluations, and there is no dev set (data.dev is empty and data.dev_fraction is 0)");
  }
  if (t.load_best_model_at_end && t.output_dir.empty()) {
    ck.bad("train.load_best_model_at_end", "needs train.output_dir (the best weights are read back from a checkpoint)");
  }
  if (t.load_best_model_at_end && t.eval_every > 0 && t.save_every > 0 && t.save_every != t.eval_every) {
    ck.bad("train.load_best_model_at_end", fmt::format("needs a checkpoint at every evaluation: train.save_every ({}) "
                                                       "must equal train.eval_every ({}), or be 0 to follow it",
                                                       t.save_every, t.eval_every));
  }
  ck.in_range("train.label_smoothing_factor", t.label_smoothing_factor, 0.0, 1.0, false);
  ck.non_negative("train.focal_loss_gamma", t.focal_loss_gamma);
  if (t.focal_loss_gamma > 0 && t.label_smoothing_factor > 0) {
    ck.bad("train.focal_loss_gamma", "focal loss and train.label_smoothing_factor do not combine; set one of them");
  }
  ck.one_of("train.regression_loss", t.regression_loss, {"mse", "huber"});
  ck.in_range("train.multi_label_threshold", t.multi_label_threshold, 0.0, 1.0, false);
  if (t.save_every > 0 && t.output_dir.empty()) {
    ck.bad("train.save_every", "needs train.output_dir (where to write the checkpoints)");
  }
  if (t.resume_from == "auto" && t.output_dir.empty()) {
    ck.bad("train.resume_from", "'auto' resumes from the newest checkpoint in train.output_dir, which is empty");
  }
  if (t.save_each_epoch && t.output_dir.empty()) {
    ck.bad("train.save_each_epoch", "needs train.output_dir (where to write the checkpoints)");
  }
  if (t.eval_every > 0 && c.data.dev.empty() && c.data.dev_fraction == 0) {
    ck.bad("train.eval_every", "there is no dev set (data.dev is empty and data.dev_fraction is 0)");
  }
  for (const auto& p : t.freeze) {
    if (p.empty()) ck.bad("train.freeze", "a pattern is empty");
  }
  ck.at_least("train.freeze_layers", t.freeze_layers, -1);
  ck.in_range("train.layer_lr_decay", t.layer_lr_decay, 0.0, 1.0, true);
  if (!(t.layer_lr_decay > 0)) ck.bad("train.layer_lr_decay", "must be > 0 (1 = off)");
  ck.non_negative("train.head_lr", t.head_lr);
}

void check_lora(const Checker& ck, const RunConfig& c) {
  const LoraConfig& l = c.lora;
  ck.at_least("lora.rank", l.rank, 0);
  if (l.rank == 0) {
    if (!l.adapter.empty()) ck.bad("lora.adapter", "needs lora.rank > 0 (the adapter's rank)");
    return;
  }
  ck.positive("lora.alpha", l.alpha);
  ck.in_range("lora.dropout", l.dropout, 0.0, 1.0, false);
  for (const auto& t : l.targets) {
    if (t.empty()) ck.bad("lora.targets", "a module name is empty");
  }
  if (!c.train.freeze.empty() || c.train.freeze_layers >= 0) {
    ck.bad("lora.rank", "LoRA already freezes every base weight; drop train.freeze / train.freeze_layers");
  }
}

void check_embedding(const Checker& ck, const EmbeddingConfig& e) {
  ck.one_of("embedding.loss", e.loss,
            {"auto", "MultipleNegativesRankingLoss", "CachedMultipleNegativesRankingLoss", "CoSENTLoss",
             "CosineSimilarityLoss"});
  if (!(e.scale > 0)) ck.bad("embedding.scale", "must be above 0 (20 is sentence-transformers' default)");
  ck.at_least("embedding.mini_batch_size", e.mini_batch_size, 1);
  ck.one_of("embedding.pooling", e.pooling, {"auto", "cls", "mean", "max", "mean_sqrt_len_tokens"});
  ck.one_of("embedding.normalize", e.normalize, {"auto", "true", "false"});
}

void check_pretrain(const Checker& ck, const PretrainConfig& p) {
  ck.in_range("pretrain.mlm_probability", p.mlm_probability, 0.0, 1.0, false);
  if (p.mlm_probability == 0.0) ck.bad("pretrain.mlm_probability", "must be above 0 (0.15 is BERT's)");
  ck.at_least("pretrain.max_rows", p.max_rows, 0);
}

void check_adapter(const Checker& ck, const RunConfig& c) {
  const AdapterConfig& a = c.adapter;
  ck.at_least("adapter.size", a.size, 0);
  if (a.size == 0) return;
  ck.one_of("adapter.non_linearity", a.non_linearity, {"gelu", "relu"});
  for (const auto& l : a.layers) {
    if (l.empty() || l.find_first_not_of("0123456789") != std::string::npos) {
      ck.bad("adapter.layers", fmt::format("'{}' is not a layer index (0, 1, ...)", l));
    }
  }
  if (!c.train.freeze.empty() || c.train.freeze_layers >= 0) {
    ck.bad("adapter.size", "adapters already freeze every base weight; drop train.freeze / train.freeze_layers");
  }
}

void check_prompt_learning(const Checker& ck, const RunConfig& c) {
  ck.at_least("prompt.length", c.prompt.length, 0);
  ck.at_least("prefix.length", c.prefix.length, 0);
  if (c.prompt.length == 0 && !c.prompt.path.empty()) ck.bad("prompt.path", "needs prompt.length > 0 (the saved prompt's)");
  if (c.prefix.length == 0 && !c.prefix.path.empty()) ck.bad("prefix.path", "needs prefix.length > 0 (the saved prefix's)");
  if (c.prompt.length > 0) {
    ck.one_of("prompt.init", c.prompt.init, {"random", "vocab", "text"});
    if (c.prompt.init == "text" && c.prompt.init_text.empty()) {
      ck.bad("prompt.init_text", "required with prompt.init=text: the text whose tokens start the prompt");
    }
  }
  if (c.prefix.length > 0 && c.prefix.projection) {
    ck.bad("prefix.projection", "PEFT's prefix_projection (an MLP producing the prefixes) is not supported; "
                                "set it to false to train the prefixes directly");
  }
  const char* key = c.prompt.length > 0 ? "prompt.length" : "prefix.length";
  if ((c.prompt.length > 0 || c.prefix.length > 0) && (!c.train.freeze.empty() || c.train.freeze_layers >= 0)) {
    ck.bad(key, "prompt and prefix tuning already freeze every base weight; drop train.freeze / train.freeze_layers");
  }
}

// LoRA, adapters, prompt and prefix tuning each decide alone what trains.
void check_one_method(const Checker& ck, const RunConfig& c) {
  std::vector<std::string> set;
  if (c.lora.rank > 0) set.emplace_back("lora.rank");
  if (c.adapter.size > 0) set.emplace_back("adapter.size");
  if (c.prompt.length > 0) set.emplace_back("prompt.length");
  if (c.prefix.length > 0) set.emplace_back("prefix.length");
  if (set.size() > 1) {
    ck.bad(set[1].c_str(), fmt::format("choose one fine-tuning method: {} are set together, but LoRA (lora.rank), "
                                       "adapters (adapter.size), prompt tuning (prompt.length) and prefix tuning "
                                       "(prefix.length) exclude each other",
                                       fmt::join(set, " and ")));
  }
}

void check_strategy_runtime(const Checker& ck, const RunConfig& c) {
  ck.required("strategy.name", c.strategy.name, "a strategy name (`ft strategies` lists them)");
  ck.one_of("strategy.precision", c.strategy.precision, {"auto", "fp32", "bf16", "fp16"});
  ck.non_negative("strategy.loss_scale", c.strategy.loss_scale);
  ck.positive("strategy.loss_scale_init", c.strategy.loss_scale_init);
  ck.at_least("strategy.loss_scale_window", c.strategy.loss_scale_window, 1);
  ck.at_least("strategy.loss_scale_hysteresis", c.strategy.loss_scale_hysteresis, 1);
  ck.non_negative("strategy.loss_scale_min", c.strategy.loss_scale_min);
  for (const auto& kv : c.strategy.options) {
    if (kv.first.empty()) ck.bad("strategy.options", "an option name is empty");
  }
  ck.one_of("runtime.device", c.runtime.device, {"cpu", "cuda"});
  ck.at_least("runtime.threads", c.runtime.threads, 0);
  ck.positive("runtime.timeout_s", c.runtime.timeout_s);
  ck.positive("runtime.save_grace_s", c.runtime.save_grace_s);
  for (const auto& target : c.runtime.report_to) {
    if (target == "wandb" || target == "comet_ml" || target == "neptune" || target == "clearml" || target == "trackio") {
      ck.bad("runtime.report_to", fmt::format("'{}' is not supported; ft reports to mlflow and tensorboard, and writes "
                                              "report.html into the output directory",
                                              target));
    }
    ck.one_of("runtime.report_to", target, {"mlflow", "tensorboard", "none"});
  }
  if (!c.runtime.profile_steps.empty()) {
    ck.required("runtime.profile_dir", c.runtime.profile_dir, "where the per-rank traces go");
    if (!parse_step_window(c.runtime.profile_steps)) {
      ck.bad("runtime.profile_steps", fmt::format("'{}': {}", c.runtime.profile_steps, kStepWindowHelp));
    }
  }
}

// Optimal string alignment distance: a swapped pair of letters counts as one
// edit, the commonest typo.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

namespace config_detail {

std::string closest_key(const std::string& key) {
  // Names people bring from Hugging Face TrainingArguments.
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"learning_rate", "lr"},
      {"num_train_epochs", "epochs"},
      {"num_epochs", "epochs"},
      {"per_device_train_batch_size", "batch_size"},
      {"train_batch_size", "batch_size"},
      {"gradient_accumulation_steps", "grad_accum"},
      {"warmup", "warmup_ratio"},
      {"logging_steps", "log_every"},
      {"eval_steps", "eval_every"},
      {"save_steps", "save_every"},
      {"max_length", "max_seq_len"},
      {"strategy", "name"},
  };
  const auto dot = key.find('.');
  if (dot != std::string::npos) {
    const std::string section = key.substr(0, dot);
    const std::string name = key.substr(dot + 1);
    for (const auto& [alias, real] : aliases) {
      const std::string candidate = section + "." + real;
      if (name == alias) {
        const auto keys = known_keys();
        if (std::find(keys.begin(), keys.end(), candidate) != keys.end()) return candidate;
      }
    }
  }
  std::vector<std::string> candidates =
      dot == std::string::npos ? sections() : known_keys();
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& candidate : candidates) {
    const size_t distance = edit_distance(key, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  const size_t name_length = dot == std::string::npos ? key.size() : key.size() - dot - 1;
  const bool plausible = best_distance <= 2 || best_distance * 3 <= name_length;
  return best_distance > 0 && plausible ? best : "";
}

}  // namespace config_detail

std::string resolve_data_format(const std::string& format, const std::string& path,
                                const std::string& key) {
  if (format != "auto") return format;
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (ext == ".json") return "json";
  if (ext == ".jsonl" || ext == ".ndjson") return "jsonl";
  if (ext == ".csv") return "csv";
  if (ext == ".tsv" || ext == ".tab") return "tsv";
  if (ext == ".safetensors") return "safetensors";
  fail("{}: cannot tell the format of '{}' from its extension; set data.format to json, jsonl, "
       "csv, tsv or safetensors",
       key, path);
}

BestMetricRef best_metric_ref(const RunConfig& config) {
  const auto& files = config.data.dev.files;
  std::string m = config.train.best_metric;
  if (m.rfind("eval_", 0) == 0) m = m.substr(5);
  for (const auto& f : files) {
    const std::string prefix = f.name + "_";
    if (!f.name.empty() && m.size() > prefix.size() && m.rfind(prefix, 0) == 0) return {f.name, m.substr(prefix.size())};
  }
  return {files.empty() ? "" : files.front().name, config.train.best_metric};
}

void validate(const RunConfig& config) {
  const Checker ck(config);
  // Each section's first problem, all in one line: a config with three
  // mistakes needs one fix round, not three runs.
  std::vector<std::string> problems;
  const auto check = [&problems](const auto& section_check) {
    try {
      section_check();
    } catch (const Error& e) {
      problems.emplace_back(e.what());
    }
  };
  check([&] { check_model(ck, config.model); });
  check([&] { check_data(ck, config); });
  check([&] { check_train(ck, config); });
  check([&] { check_lora(ck, config); });
  check([&] { check_adapter(ck, config); });
  check([&] { check_prompt_learning(ck, config); });
  check([&] { check_one_method(ck, config); });
  check([&] { check_pretrain(ck, config.pretrain); });
  check([&] { check_embedding(ck, config.embedding); });
  check([&] { check_strategy_runtime(ck, config); });
  if (problems.size() == 1) fail("{}", problems.front());
  if (problems.size() > 1) fail("{} problems: {}", problems.size(), fmt::join(problems, "; "));
}

}  // namespace ft
