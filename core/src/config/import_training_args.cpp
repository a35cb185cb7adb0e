// Hugging Face TrainingArguments as JSON (`args.to_json_string()`, or a file
// written by hand) -> ft keys (docs/importing-configs.md). TrainingArguments
// is one object whose every field has a default, so a mapped key the file
// leaves out takes Hugging Face's default: the run is the one the Trainer
// would make from these arguments.
#include <cmath>
#include <map>
#include <set>

#include "import_builder.h"

namespace ft::config_import {
namespace {

// Defaults of the mapped fields (transformers 4.x; unchanged in v5).
const std::map<std::string, Json>& hf_defaults() {
  static const std::map<std::string, Json> d = {
      {"per_device_train_batch_size", 8}, {"per_device_eval_batch_size", 8}, {"gradient_accumulation_steps", 1},
      {"learning_rate", 5e-5},            {"weight_decay", 0.0},              {"adam_beta1", 0.9},
      {"adam_beta2", 0.999},              {"adam_epsilon", 1e-8},             {"max_grad_norm", 1.0},
      {"num_train_epochs", 3.0},          {"max_steps", -1},                  {"lr_scheduler_type", "linear"},
      {"warmup_ratio", 0.0},              {"warmup_steps", 0},                {"logging_steps", 500},
      {"logging_strategy", "steps"},      {"eval_strategy", "no"},            {"eval_steps", nullptr},
      {"save_strategy", "steps"},         {"save_steps", 500},                {"save_total_limit", nullptr},
      {"load_best_model_at_end", false},  {"metric_for_best_model", nullptr}, {"greater_is_better", nullptr},
      {"seed", 42},                       {"fp16", false},                    {"bf16", false},
      {"gradient_checkpointing", false},  {"optim", "adamw_torch"},           {"dataloader_drop_last", false},
      {"group_by_length", false},         {"disable_tqdm", false},            {"output_dir", nullptr},
      {"deepspeed", nullptr},             {"fsdp", ""},                       {"fsdp_config", nullptr},
      {"report_to", "none"},              {"logging_dir", nullptr},           {"resume_from_checkpoint", nullptr},
      {"use_cpu", false},                 {"no_cuda", false},                 {"optim_args", nullptr},
      {"lr_scheduler_kwargs", nullptr},   {"label_smoothing_factor", 0.0},    {"neftune_noise_alpha", nullptr},
      {"adafactor", false},               {"data_seed", nullptr},             {"ddp_bucket_cap_mb", nullptr},
      {"ddp_timeout", 1800},              {"auto_find_batch_size", false},    {"torch_compile", false},
      {"early_stopping_patience", nullptr}, {"early_stopping_threshold", nullptr}};
  return d;
}

// Fields with no bearing on what ft runs; a non-default value is still
// named, in case the user relied on it.
const std::map<std::string, Json>& ignorable() {
  static const std::map<std::string, Json> d = {
      {"log_level", "passive"}, {"log_level_replica", "warning"}, {"log_on_each_node", true},
      {"logging_nan_inf_filter", true}, {"save_safetensors", true}, {"fp16_opt_level", "O1"},
      {"half_precision_backend", "auto"}, {"fp16_backend", "auto"}, {"local_rank", -1}, {"past_index", -1},
      {"remove_unused_columns", true}, {"length_column_name", "length"}, {"dataloader_pin_memory", true},
      {"skip_memory_metrics", true}, {"hub_strategy", "every_save"}, {"hub_token", "<HUB_TOKEN>"},
      {"eval_do_concat_batches", true}, {"ray_scope", "last"}, {"dataloader_num_workers", 0}, {"eval_delay", 0},
      {"average_tokens_across_devices", true}, {"accelerator_config", nullptr}, {"overwrite_output_dir", false},
      {"do_train", false}, {"do_eval", false}, {"do_predict", false}, {"prediction_loss_only", false},
      {"per_gpu_train_batch_size", nullptr}, {"per_gpu_eval_batch_size", nullptr}, {"eval_accumulation_steps", nullptr},
      {"torch_empty_cache_steps", nullptr}, {"logging_first_step", false}, {"save_on_each_node", false},
      {"save_only_model", false}, {"restore_callback_states_from_checkpoint", false}, {"use_mps_device", false},
      {"jit_mode_eval", false}, {"use_ipex", false}, {"bf16_full_eval", false}, {"fp16_full_eval", false},
      {"tf32", nullptr}, {"ddp_backend", nullptr}, {"tpu_num_cores", nullptr}, {"tpu_metrics_debug", false},
      {"debug", ""}, {"dataloader_prefetch_factor", nullptr}, {"run_name", nullptr}, {"label_names", nullptr},
      {"ignore_data_skip", false}, {"ddp_find_unused_parameters", nullptr}, {"ddp_broadcast_buffers", nullptr},
      {"dataloader_persistent_workers", false}, {"use_legacy_prediction_loop", false}, {"push_to_hub", false},
      {"hub_model_id", nullptr}, {"hub_private_repo", nullptr}, {"hub_always_push", false}, {"hub_revision", nullptr},
      {"gradient_checkpointing_kwargs", nullptr}, {"include_inputs_for_metrics", false}, {"include_for_metrics", ""},
      {"push_to_hub_model_id", nullptr}, {"push_to_hub_organization", nullptr}, {"push_to_hub_token", nullptr},
      {"mp_parameters", ""}, {"full_determinism", false}, {"torchdynamo", nullptr}, {"torch_compile_backend", nullptr},
      {"torch_compile_mode", nullptr}, {"include_tokens_per_second", false}, {"include_num_input_tokens_seen", false},
      {"optim_target_modules", nullptr}, {"batch_eval_metrics", false}, {"eval_on_start", false},
      {"use_liger_kernel", false}, {"liger_kernel_config", nullptr}, {"eval_use_gather_object", false},
      {"dispatch_batches", nullptr}, {"split_batches", nullptr}, {"project", "huggingface"},
      {"trackio_space_id", "trackio"}, {"parallelism_config", nullptr}, {"fsdp_min_num_params", 0},
      {"fsdp_transformer_layer_cls_to_wrap", nullptr}};
  return d;
}

// Fields that change what is trained and that ft does not have.
const std::map<std::string, std::string>& missing_features() {
  static const std::map<std::string, std::string> m = {
      {"neftune_noise_alpha", "NEFTune embedding noise is not in ft"},
      {"adafactor", "Adafactor is not in ft (it has AdamW and SGD)"}};
  return m;
}

bool empty_value(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
         (v.is_array() && v.empty()) || (v.is_object() && v.empty());
}

class Args {
 public:
  Args(const Json& root, std::set<std::string> set_earlier) : root_(root), earlier_(std::move(set_earlier)) {}
  bool given(const std::string& k) const { return root_.contains(k); }
  // The file's value, else Hugging Face's default.
  Field get(const std::string& k) const {
    if (root_.contains(k)) return {root_.at(k), k};
    return {hf_defaults().at(k), k + " (default)"};
  }
  bool null(const std::string& k) const { return get(k).json.is_null(); }
  // A DeepSpeed config with an optimizer or scheduler replaces HF's own
  // (the Trainer then ignores optim and lr_scheduler_type, and fills only
  // the "auto" values): those keys stay with the file read before.
  bool taken(const std::string& ft_key) const { return earlier_.count(ft_key) > 0; }

 private:
  const Json& root_;
  std::set<std::string> earlier_;
};

void import_optimizer(Builder& b, const Args& a) {
  const std::string optim = b.text(a.get("optim"));
  static const std::set<std::string> adamw = {"adamw_torch", "adamw_hf", "adamw_torch_fused", "adamw_apex_fused",
                                              "adamw_torch_xla", "adamw_torch_npu_fused"};
  if (a.given("adafactor") && b.boolean(a.get("adafactor"))) b.error("adafactor", "{}", missing_features().at("adafactor"));
  if (a.taken("train.optimizer")) {
    // DeepSpeed's optimizer section decides.
  } else if (adamw.count(optim)) {
    b.set("train.optimizer", "adamw", "optim");
  } else if (optim == "sgd") {
    b.set("train.optimizer", "sgd", "optim");
  } else b.error("optim", "'{}' is not in ft (it maps adamw_torch, adamw_hf, adamw_torch_fused and sgd)", optim);
  if (!empty_value(a.get("optim_args").json)) {
    b.error("optim_args", "ft reads the optimizer from adam_beta1/2, adam_epsilon and weight_decay; remove optim_args");
  }
  b.set("train.lr", b.number(a.get("learning_rate")), a.get("learning_rate").key);
  b.set("train.weight_decay", b.number(a.get("weight_decay")), a.get("weight_decay").key);
  b.set("train.beta1", b.number(a.get("adam_beta1")), a.get("adam_beta1").key);
  b.set("train.beta2", b.number(a.get("adam_beta2")), a.get("adam_beta2").key);
  b.set("train.eps", b.number(a.get("adam_epsilon")), a.get("adam_epsilon").key);
  b.set("train.max_grad_norm", b.number(a.get("max_grad_norm")), a.get("max_grad_norm").key);
}

void import_schedule(Builder& b, const Args& a) {
  const double epochs = b.number(a.get("num_train_epochs"));
  const int64_t max_steps = b.integer(a.get("max_steps"));
  if (max_steps > 0) {
    b.set("train.max_steps", max_steps, "max_steps");
  } else if (!a.taken("train.max_steps")) {
    if (epochs != std::floor(epochs) || epochs < 1) {
      b.error("num_train_epochs", "ft trains whole epochs; got {} (or set max_steps)", epochs);
    }
    b.set("train.epochs", static_cast<int64_t>(epochs), a.get("num_train_epochs").key);
    b.set("train.max_steps", int64_t{0}, a.get("max_steps").key);
  }
  if (a.taken("train.scheduler")) return;  // DeepSpeed's scheduler section decides
  const std::string type = b.text(a.get("lr_scheduler_type"));
  const bool warmup_used = type != "constant";
  if (type == "linear" || type == "cosine") b.set("train.scheduler", type, "lr_scheduler_type");
  else if (type == "constant" || type == "constant_with_warmup") b.set("train.scheduler", "constant", "lr_scheduler_type");
  else b.error("lr_scheduler_type", "'{}' is not in ft (it has linear, cosine, constant, constant_with_warmup)", type);
  if (!empty_value(a.get("lr_scheduler_kwargs").json)) {
    b.error("lr_scheduler_kwargs", "ft's schedules take no extra arguments; remove them");
  }
  const int64_t steps = warmup_used ? b.integer(a.get("warmup_steps")) : 0;
  const double ratio = warmup_used ? b.number(a.get("warmup_ratio")) : 0.0;
  if (!warmup_used && (b.integer(a.get("warmup_steps")) > 0 || b.number(a.get("warmup_ratio")) > 0)) {
    b.warn("lr_scheduler_type", "'constant' has no warm-up in Hugging Face either; warmup_steps/warmup_ratio ignored");
  }
  b.set("train.warmup_steps", steps, a.get("warmup_steps").key);
  b.set("train.warmup_ratio", ratio, a.get("warmup_ratio").key);
  b.set("train.warmup_type", "linear", "lr_scheduler_type");
}

void import_batches(Builder& b, const Args& a) {
  b.set("train.batch_size", b.integer(a.get("per_device_train_batch_size")), a.get("per_device_train_batch_size").key);
  b.set("train.eval_batch_size", b.integer(a.get("per_device_eval_batch_size")), a.get("per_device_eval_batch_size").key);
  b.set("train.grad_accum", b.integer(a.get("gradient_accumulation_steps")), a.get("gradient_accumulation_steps").key);
  b.set("train.seed", b.integer(a.get("seed")), a.get("seed").key);
  b.set("train.drop_last", b.boolean(a.get("dataloader_drop_last")), a.get("dataloader_drop_last").key);
  b.set("data.group_by_length", b.boolean(a.get("group_by_length")), a.get("group_by_length").key);
  if (!a.null("data_seed")) b.warn("data_seed", "ft shuffles with train.seed; data.split_seed picks the dev split; ignored");
}

// Steps given as a ratio (< 1) of the run are HF's; ft wants a count.
std::optional<int64_t> step_count(Builder& b, const Field& f) {
  const double v = b.number(f);
  if (v > 0 && v < 1) {
    b.warn(f.key, "a ratio of the run's steps is not in ft; give a step count. Ignored");
    return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

void import_eval_save_log(Builder& b, const Args& a) {
  const std::string log_strategy = b.text(a.get("logging_strategy"));
  if (log_strategy != "steps") b.warn("logging_strategy", "ft logs every train.log_every steps; ignored");
  if (auto n = step_count(b, a.get("logging_steps"))) b.set("train.log_every", *n, a.get("logging_steps").key);

  // evaluation_strategy is the name before transformers 4.41.
  const std::string eval_key = a.given("eval_strategy") || !a.given("evaluation_strategy") ? "eval_strategy" : "evaluation_strategy";
  const Field eval = a.get(eval_key);
  const std::string es = eval.json.is_null() ? "no" : b.text(eval);
  if (es == "steps") {
    const Field steps = a.null("eval_steps") ? a.get("logging_steps") : a.get("eval_steps");
    if (auto n = step_count(b, steps)) b.set("train.eval_every", *n, steps.key);
  } else if (es == "epoch" || es == "no") {
    b.set("train.eval_every", int64_t{0}, eval.key);
    if (es == "no" && a.given(eval_key)) b.warn(eval_key, "ft still evaluates at the end of each epoch when it has dev data; to skip it, set data.dev_fraction=0 with no data.dev");
  } else {
    b.error(eval_key, "expected no, steps or epoch, got '{}'", es);
  }

  const std::string ss = b.text(a.get("save_strategy"));
  const bool has_output = !a.null("output_dir");
  if (has_output) b.set("train.output_dir", b.text(a.get("output_dir")), "output_dir");
  if (ss == "steps") {
    // HF saves under output_dir; with none given here, train.output_dir decides (the YAML's, or no saving).
    if (has_output) {
      if (auto n = step_count(b, a.get("save_steps"))) b.set("train.save_every", *n, a.get("save_steps").key);
    }
    b.set("train.save_each_epoch", false, "save_strategy");
  } else if (ss == "epoch") {
    b.set("train.save_every", int64_t{0}, "save_strategy");
    b.set("train.save_each_epoch", true, "save_strategy");
  } else if (ss == "no" || ss == "best") {
    b.set("train.save_every", int64_t{0}, "save_strategy");
    b.set("train.save_each_epoch", false, "save_strategy");
    b.warn("save_strategy", ss == "no" ? "ft writes <output_dir>/final when train.output_dir is set"
                                       : "ft keeps the best checkpoint among those it writes; saving on improvement is not in ft");
  } else {
    b.error("save_strategy", "expected no, steps, epoch or best, got '{}'", ss);
  }
  const Field limit = a.get("save_total_limit");
  b.set("train.save_total_limit", limit.json.is_null() ? int64_t{0} : b.integer(limit), limit.key);

  const bool load_best = b.boolean(a.get("load_best_model_at_end"));
  std::string metric = a.null("metric_for_best_model") ? (load_best ? "loss" : "") : b.text(a.get("metric_for_best_model"));
  if (metric.rfind("eval_", 0) == 0) metric = metric.substr(5);
  if (!metric.empty()) {
    // A compute_metrics' common names; ft's own names pass through (validated with the config).
    std::string ft_metric = metric;
    if (metric == "acc") ft_metric = "accuracy";
    if (metric == "f1" || metric == "f1_macro") ft_metric = "macro_f1";
    if (metric == "f1_weighted") ft_metric = "weighted_f1";
    if (metric == "matthews_correlation") ft_metric = "mcc";
    if (metric == "f1") b.warn("metric_for_best_model", "ft's F1 is macro-averaged over the labels (train.best_metric=macro_f1)");
    b.set("train.best_metric", ft_metric, "metric_for_best_model");
  }
  if (!a.null("greater_is_better")) b.set("train.greater_is_better", b.boolean(a.get("greater_is_better")), "greater_is_better");
  if (a.given("load_best_model_at_end")) b.set("train.load_best_model_at_end", load_best, "load_best_model_at_end");
  // EarlyStoppingCallback's arguments, kept beside TrainingArguments' in the same file.
  if (!a.null("early_stopping_patience")) {
    b.set("train.early_stopping_patience", b.integer(a.get("early_stopping_patience")), "early_stopping_patience");
  }
  if (!a.null("early_stopping_threshold")) {
    b.set("train.early_stopping_threshold", b.number(a.get("early_stopping_threshold")), "early_stopping_threshold");
  }
}

// The DeepSpeed config TrainingArguments names is read first, as its own
// layer: its optimizer and scheduler sections take precedence over optim
// and lr_scheduler_type.
void import_named_deepspeed(Builder& b, const Json& root, ConfigImports& imports) {
  if (!root.contains("deepspeed") || root.at("deepspeed").is_null()) return;
  const Field ds{root.at("deepspeed"), "deepspeed"};
  if (ds.json.is_object()) {  // the config inline, as TrainingArguments(deepspeed={...}) accepts
    Builder inner(b.source() + " (deepspeed)");
    import_deepspeed_tree(inner, ds.json, imports.world_size());
    imports.add_imported(inner.take());
  } else {
    imports.add_deepspeed(b.text(ds));
  }
}

void import_parallelism(Builder& b, const Args& a) {
  const std::string fp = b.boolean(a.get("fp16")) ? "fp16" : b.boolean(a.get("bf16")) ? "bf16" : "fp32";
  if (b.boolean(a.get("fp16")) && b.boolean(a.get("bf16"))) b.error("fp16", "fp16 and bf16 are both true; choose one");
  b.set("strategy.precision", fp, "fp16/bf16");
  b.set("train.activation_checkpointing", b.boolean(a.get("gradient_checkpointing")), a.get("gradient_checkpointing").key);
  const Json& fsdp = a.get("fsdp").json;
  std::vector<std::string> words;
  if (fsdp.is_boolean() && fsdp.get<bool>()) words.push_back("full_shard");
  if (fsdp.is_string()) {
    std::string w;
    for (char c : fsdp.get<std::string>() + " ") {
      if (c == ' ' || c == ',') {
        if (!w.empty()) words.push_back(w);
        w.clear();
      } else {
        w += c;
      }
    }
  }
  if (fsdp.is_array()) {
    for (const auto& w : fsdp) words.push_back(b.text({w, "fsdp"}));
  }
  for (const auto& w : words) {
    static const std::map<std::string, const char*> modes = {
        {"full_shard", "FULL_SHARD"}, {"shard_grad_op", "SHARD_GRAD_OP"}, {"no_shard", "NO_SHARD"}, {"hybrid_shard", "HYBRID_SHARD"}};
    if (auto it = modes.find(w); it != modes.end()) {
      b.set("strategy.name", "fsdp", "fsdp");
      b.set("strategy.options.sharding_strategy", it->second, "fsdp");
    } else if (w == "offload") {
      b.warn("fsdp", "ft keeps parameters where training runs; 'offload' ignored");
    } else if (w != "auto_wrap") {
      b.error("fsdp", "'{}' is not in ft (it maps full_shard, shard_grad_op, no_shard, hybrid_shard, offload, auto_wrap)", w);
    }
  }
}

}  // namespace

void import_training_args_tree(Builder& b, const Json& root, ConfigImports& imports) {
  if (!root.is_object()) b.error("(top level)", "expected a JSON object of TrainingArguments fields");
  import_named_deepspeed(b, root, imports);
  std::set<std::string> earlier;
  for (const auto& f : imports.files())
    for (const auto& v : f.values) earlier.insert(v.key);
  const Args a(root, std::move(earlier));
  import_optimizer(b, a);
  import_schedule(b, a);
  import_batches(b, a);
  import_eval_save_log(b, a);
  import_parallelism(b, a);
  if (a.given("fsdp_config") && !a.null("fsdp_config")) import_fsdp_config(b, a.get("fsdp_config"));
  if (a.given("resume_from_checkpoint") && !a.null("resume_from_checkpoint")) {
    b.set("train.resume_from", b.text(a.get("resume_from_checkpoint")), "resume_from_checkpoint");
  }
  if (b.boolean(a.get("use_cpu")) || b.boolean(a.get("no_cuda"))) b.set("runtime.device", "cpu", a.given("use_cpu") ? "use_cpu" : "no_cuda");
  if (b.boolean(a.get("disable_tqdm"))) b.set("runtime.progress", false, "disable_tqdm");
  const Json& report = a.get("report_to").json;
  std::vector<std::string> targets;
  if (report.is_string()) targets.push_back(report.get<std::string>());
  if (report.is_array())
    for (const auto& r : report) targets.push_back(b.text({r, "report_to"}));
  std::vector<std::string> trackers;
  for (const auto& t : targets) {
    if (t == "tensorboard") {
      const std::string dir = !a.null("logging_dir") ? b.text(a.get("logging_dir"))
                              : !a.null("output_dir") ? b.text(a.get("output_dir")) + "/runs" : "runs";
      b.set("runtime.tensorboard_dir", dir, a.null("logging_dir") ? "report_to" : "logging_dir");
    } else if (t == "mlflow") {
      trackers.push_back(t);
    } else if (t != "none" && t != "all") {
      b.warn("report_to", "ft reports to mlflow and tensorboard (and writes report.html), not '" + t + "'; ignored");
    }
  }
  if (!trackers.empty()) b.set("runtime.report_to", std::string("[mlflow]"), "report_to");
  if (a.given("run_name") && !a.null("run_name")) b.set("runtime.run_name", b.text(a.get("run_name")), "run_name");
  if (b.number(a.get("label_smoothing_factor")) != 0) {
    b.set("train.label_smoothing_factor", b.number(a.get("label_smoothing_factor")), "label_smoothing_factor");
  }
  // Fields that change what is trained and that ft does not have.
  if (!a.null("neftune_noise_alpha")) b.error("neftune_noise_alpha", "{}; remove it", missing_features().at("neftune_noise_alpha"));
  if (b.boolean(a.get("auto_find_batch_size"))) b.warn("auto_find_batch_size", "ft trains the batch size it is given; ignored");
  if (b.boolean(a.get("torch_compile"))) b.warn("torch_compile", "ft runs LibTorch's eager kernels; ignored");
  if (!a.null("ddp_bucket_cap_mb")) b.warn("ddp_bucket_cap_mb", "set strategy.options.bucket_mb for ddp and zero1; ignored");
  if (b.number(a.get("ddp_timeout")) != 1800) b.warn("ddp_timeout", "ft's collective timeout is runtime.timeout_s; ignored");
  for (const auto& [k, v] : root.items()) {
    // Bookkeeping of the Python process: silent whatever it holds.
    static const std::set<std::string> silent = {"evaluation_strategy", "accelerator_config", "do_train", "do_eval",
                                                 "do_predict", "run_name", "local_rank", "hub_token",
                                                 "push_to_hub_token", "logging_dir"};
    if (hf_defaults().count(k) || silent.count(k) || k.empty() || k[0] == '_') continue;
    const auto it = ignorable().find(k);
    if (it == ignorable().end()) {
      b.warn(k, "not a TrainingArguments field ft maps; ignored");
    } else if (!empty_value(v) && v != it->second) {
      b.warn(k, "no counterpart in ft; ignored");
    }
  }
}

}  // namespace ft::config_import

namespace ft {

std::vector<std::string> training_args_fields() {
  std::vector<std::string> names;
  for (const auto* table : {&config_import::hf_defaults(), &config_import::ignorable()}) {
    for (const auto& [name, value] : *table) names.push_back(name);
  }
  return names;
}

std::string training_args_missing_feature(const std::string& field) {
  const auto& m = config_import::missing_features();
  const auto it = m.find(field);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace ft
