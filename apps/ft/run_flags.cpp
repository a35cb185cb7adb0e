// Flags -> config for `ft run`, `ft pretrain` and `ft config show`: one
// place, so the preview and the run cannot disagree.
#include "run_flags.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ft/config/config_import.h"
#include "ft/base/error.h"
#include "ft/optim/precision.h"
#include "ft/parallel/abilities.h"
#include "ft/parallel/strategy.h"
#include "ft/plugin/plugin_host.h"

namespace ft::app {
namespace {

// Hugging Face TrainingArguments names users type out of habit, and the ft
// key each one is (docs/importing-configs.md has the full import).
const std::vector<std::pair<std::string, std::string>>& hf_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"learning_rate", "train.lr"},
      {"per_device_train_batch_size", "train.batch_size"},
      {"per_device_eval_batch_size", "train.eval_batch_size"},
      {"num_train_epochs", "train.epochs"},
      {"max_steps", "train.max_steps"},
      {"gradient_accumulation_steps", "train.grad_accum"},
      {"weight_decay", "train.weight_decay"},
      {"warmup_ratio", "train.warmup_ratio"},
      {"warmup_steps", "train.warmup_steps"},
      {"max_grad_norm", "train.max_grad_norm"},
      {"lr_scheduler_type", "train.scheduler"},
      {"adam_beta1", "train.beta1"},
      {"adam_beta2", "train.beta2"},
      {"adam_epsilon", "train.eps"},
      {"seed", "train.seed"},
      {"logging_steps", "train.log_every"},
      {"eval_steps", "train.eval_every"},
      {"save_steps", "train.save_every"},
      {"save_total_limit", "train.save_total_limit"},
      {"output_dir", "train.output_dir"},
      {"resume_from_checkpoint", "train.resume_from"},
      {"gradient_checkpointing", "train.activation_checkpointing"},
      {"dataloader_drop_last", "train.drop_last"},
      {"group_by_length", "data.group_by_length"},
      {"label_smoothing_factor", "train.label_smoothing_factor"},
      {"metric_for_best_model", "train.best_metric"},
      {"greater_is_better", "train.greater_is_better"},
      {"load_best_model_at_end", "train.load_best_model_at_end"},
      {"early_stopping_patience", "train.early_stopping_patience"},
      {"early_stopping_threshold", "train.early_stopping_threshold"},
      {"max_seq_length", "data.max_seq_len"},
  };
  return names;
}

const std::string* ft_key_of(const std::string& hf_name) {
  for (const auto& [hf, key] : hf_names()) {
    if (hf == hf_name) return &key;
  }
  return nullptr;
}

std::string key_of(const std::string& override_text) {
  const auto eq = override_text.find('=');
  std::string key = override_text.substr(0, eq);
  key.erase(0, key.find_first_not_of(" \t"));
  key.erase(key.find_last_not_of(" \t") + 1);
  return key;
}

bool overrides_key(const std::vector<std::string>& overrides, const std::string& key) {
  return std::any_of(overrides.begin(), overrides.end(), [&](const std::string& o) { return key_of(o) == key; });
}

std::vector<std::string> flag_overrides(const RunFlags& f) {
  std::vector<std::string> out = f.hf_overrides;
  if (!f.data.empty()) out.push_back("data.train=" + f.data);
  if (!f.task.empty()) out.push_back("task=" + f.task);
  if (!f.text_field.empty()) out.push_back("data.text_field=" + f.text_field);
  if (!f.pair_field.empty()) out.push_back("data.pair_field=" + f.pair_field);
  if (!f.label_field.empty()) out.push_back("data.label_field=" + f.label_field);
  if (!f.lr.empty()) out.push_back("train.lr=" + f.lr);
  if (!f.batch_size.empty()) out.push_back("train.batch_size=" + f.batch_size);
  if (!f.epochs.empty()) out.push_back("train.epochs=" + f.epochs);
  // --set is the most specific: it wins over the named flags above.
  out.insert(out.end(), f.config.overrides.begin(), f.config.overrides.end());
  if (!f.strategy.empty()) out.push_back("strategy.name=" + f.strategy);
  if (!f.precision.empty()) out.push_back("strategy.precision=" + f.precision);
  if (!f.metrics_out.empty()) out.push_back("runtime.metrics_out=" + f.metrics_out);
  if (!f.output_dir.empty()) out.push_back("train.output_dir=" + f.output_dir);
  if (!f.resume.empty()) out.push_back("train.resume_from=" + f.resume);
  // Unset flags are 0; a negative value goes through so that validation refuses it by name.
  if (f.threads != 0) out.push_back("runtime.threads=" + std::to_string(f.threads));
  if (f.no_pin) out.push_back("runtime.pin_threads=false");
  if (f.max_steps != 0) out.push_back("train.max_steps=" + std::to_string(f.max_steps));
  if (f.timeout_s != 0) out.push_back(fmt::format("runtime.timeout_s={}", f.timeout_s));
  if (!f.profile_steps.empty()) out.push_back("runtime.profile_steps=" + f.profile_steps);
  return out;
}

// The embedded default run's data selection (10 000 random IMDB rows, its
// label names, a 10 % dev split) and output dir describe IMDB: a run that
// names its own data starts from HF's habits instead (all rows, labels from
// the file, no dev split unless asked, an output dir named after the data).
// They go below the user's own --set, and stay out where an import set them.
std::vector<std::string> own_data_defaults(const std::string& train, const ConfigImports& imports) {
  const std::string stem = std::filesystem::path(train).stem().string();
  const std::vector<std::string> wanted = {"data.max_rows=0", "data.take=first", "data.labels=[]",
                                           "data.dev_fraction=0", "data.dev=",
                                           "train.output_dir=" + (std::filesystem::path("runs") / stem).string()};
  const auto imported = imports.values();
  std::vector<std::string> out;
  for (const auto& w : wanted) {
    const std::string key = key_of(w);
    if (std::none_of(imported.begin(), imported.end(), [&](const ImportedValue& v) { return v.key == key; })) {
      out.push_back(w);
    }
  }
  return out;
}

// "from the embedded default: model.config, data.vocab, ..." for the start.
std::string inherited_note(const std::vector<std::string>& overrides, const ConfigImports& imports) {
  const auto imported = imports.values();
  std::vector<std::string> kept;
  for (const auto& key : yaml_keys(default_config_yaml(), "configs/default.yaml (embedded)")) {
    const bool replaced = overrides_key(overrides, key) ||
                          std::any_of(imported.begin(), imported.end(), [&](const ImportedValue& v) { return v.key == key; });
    if (!replaced) kept.push_back(key);
  }
  return fmt::format("from the embedded default (configs/default.yaml; --config FILE or --set KEY=VALUE to change): {}",
                     fmt::join(kept, ", "));
}

// Other frameworks' names for what ft calls differently: one line with ft's name.
void check_foreign_strategy(const RunConfig& config) {
  const std::string& name = config.strategy.name;
  if (name == "deepspeed") {
    fail("{}: strategy.name deepspeed: ft runs DeepSpeed's ZeRO stages as zero1, zero2 and zero3 (--strategy zero2); "
         "--deepspeed ds_config.json imports a DeepSpeed config",
         config.source);
  }
  if (name == "accelerate") {
    fail("{}: strategy.name accelerate: accelerate launches DDP, FSDP or DeepSpeed; use --strategy ddp (or auto), "
         "and --accelerate-config FILE to import an accelerate config",
         config.source);
  }
  if (name == "fsdp2" || name == "fully_shard") {
    fail("{}: strategy.name {}: ft's FSDP (per-unit sharding, as FSDP2's fully_shard) is --strategy fsdp", config.source, name);
  }
}

int env_world_size() {
  const char* w = std::getenv("WORLD_SIZE");
  return w != nullptr ? std::max(1, std::atoi(w)) : 1;
}

}  // namespace

std::optional<std::string> one_process_ranks(const std::string& strategy, const std::vector<std::string>& plugin_dirs) {
  const std::vector<std::filesystem::path> dirs(plugin_dirs.begin(), plugin_dirs.end());
  const PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(dirs));
  if (const OneProcess* one = host.create(strategy)->ability<OneProcess>()) return one->ranks_option();
  return std::nullopt;
}

bool quiet_process() {
  const char* rank = std::getenv("RANK");
  return std::getenv("FT_LAUNCHED") != nullptr || (rank != nullptr && std::string(rank) != "0");
}

std::vector<std::string> map_hf_names(const std::vector<std::string>& overrides, std::vector<std::string>& notes) {
  std::vector<std::string> out;
  for (const auto& o : overrides) {
    const std::string key = key_of(o);
    const std::string* ft_key = ft_key_of(key);
    if (ft_key == nullptr) {
      out.push_back(o);
      continue;
    }
    notes.push_back(fmt::format("--set {}: Hugging Face's name for {}", key, *ft_key));
    out.push_back(*ft_key + o.substr(o.find('=') == std::string::npos ? o.size() : o.find('=')));
  }
  return out;
}

void add_run_flags(CLI::App& cmd, RunFlags& flags) {
  add_config_flags(cmd, flags.config);
  cmd.add_option("--data", flags.data, "training data file (json, jsonl, csv, tsv): your own data, all of it");
  cmd.add_option("--task", flags.task, "what to train: text-classification (default) or token-classification (task)");
  cmd.add_option("--text-field", flags.text_field, "the field or column holding the text (data.text_field)");
  cmd.add_option("--pair-field", flags.pair_field, "the field or column holding a pair's second text (data.pair_field)");
  cmd.add_option("--label-field", flags.label_field, "the field or column holding the label (data.label_field)");
  cmd.add_option("--lr", flags.lr, "peak learning rate (train.lr)");
  cmd.add_option("--batch-size", flags.batch_size, "examples per rank per step (train.batch_size)");
  cmd.add_option("--epochs", flags.epochs, "passes over the training data (train.epochs)");
  cmd.add_option("-s,--strategy", flags.strategy, "strategy name (see `ft strategies`; default single, ddp with --nproc > 1)");
  cmd.add_option("--precision", flags.precision, "fp32 | bf16 | fp16 | auto");
  flags.nproc_opt = cmd.add_option("--nproc", flags.nproc, "worker processes on this host");
  flags.nnodes_opt = cmd.add_option("--nnodes", flags.nnodes, "hosts in the job");
  flags.node_rank_opt = cmd.add_option("--node-rank", flags.node_rank, "this host's index");
  flags.addr_opt = cmd.add_option("--master-addr", flags.master_addr, "rendezvous address (rank 0's host)");
  flags.port_opt = cmd.add_option("--master-port", flags.master_port, "rendezvous port (0: pick a free one)");
  cmd.add_option("--metrics-out", flags.metrics_out, "write JSON Lines metrics here (rank 0)");
  cmd.add_option("--output-dir", flags.output_dir, "checkpoint directory");
  cmd.add_flag("--overwrite-output-dir", flags.overwrite_output_dir,
               "train into an output directory that holds files (its old checkpoints may be rotated away)");
  cmd.add_option("--resume", flags.resume, "resume from this checkpoint directory");
  cmd.add_option("--threads", flags.threads, "intra-op threads per rank (default: cores / ranks)");
  cmd.add_flag("--no-pin", flags.no_pin, "do not pin each local rank to its own CPUs");
  cmd.add_option("--max-steps", flags.max_steps, "stop after this many optimizer steps");
  cmd.add_option("--timeout", flags.timeout_s, "seconds before a stuck collective or dead rank stops the job");
  cmd.add_option("--max-restarts", flags.max_restarts,
                 "restart the workers up to N times after a failure, resuming from the newest complete checkpoint");
  cmd.add_option("--profile-steps", flags.profile_steps, "A:B: trace optimizer steps A..B per rank (docs/observability.md)");
  // Hugging Face's argument names, hidden from --help: each becomes its ft key.
  for (const auto& [hf, key] : hf_names()) {
    const std::string ft_key = key;
    const std::string name = hf;
    cmd.add_option_function<std::string>("--" + hf,
                                         [&flags, ft_key, name](const std::string& v) {
                                           flags.hf_overrides.push_back(ft_key + "=" + v);
                                           flags.hf_notes.push_back(
                                               fmt::format("--{}: Hugging Face's name for {}", name, ft_key));
                                         })
        ->group("");
  }
  // The rest of TrainingArguments' names: refused by name, with the reason,
  // instead of CLI11's "not expected".
  for (const auto& field : training_args_fields()) {
    if (ft_key_of(field) != nullptr || cmd.get_option_no_throw("--" + field) != nullptr) continue;
    cmd.add_option_function<std::string>("--" + field,
                                         [field](const std::string&) {
                                           const std::string missing = training_args_missing_feature(field);
                                           if (!missing.empty()) fail("--{}: {}; remove it", field, missing);
                                           fail("--{}: TrainingArguments' {} has no `ft run` flag; put it in a JSON file for "
                                                "--training-args, which maps, ignores or refuses each field "
                                                "(docs/importing-configs.md)",
                                                field, field);
                                         })
        ->group("");
  }
}

ResolvedRun resolve_run(RunFlags& flags, RunConfig::Task task, bool quiet) {
  ResolvedRun out;
  const bool pretrain = task == RunConfig::Task::kMaskedLm;
  ConfigFlags cf = flags.config;
  out.notes = flags.hf_notes;
  RunFlags named = flags;
  named.config.overrides = map_hf_names(cf.overrides, out.notes);
  cf.overrides = flag_overrides(named);
  // The embedded default run writes runs/default; pretraining on its data must not overwrite it.
  if (pretrain && cf.config_path.empty()) cf.overrides.insert(cf.overrides.begin(), "train.output_dir=runs/pretrain");
  const bool is_worker = std::getenv("FT_LAUNCHED") != nullptr;
  if (!is_worker && flags.nproc_opt != nullptr && flags.nproc_opt->count() > 0) cf.world_size = flags.nproc * flags.nnodes;
  const ConfigImports imports = read_imports(cf, quiet);
  // An accelerate config's launch settings, where the command line is silent.
  const ImportedLaunch l = imports.launch();
  if (l.nproc && flags.nproc_opt->count() == 0) flags.nproc = *l.nproc;
  if (l.nnodes && flags.nnodes_opt->count() == 0) flags.nnodes = *l.nnodes;
  if (l.node_rank && flags.node_rank_opt->count() == 0) flags.node_rank = *l.node_rank;
  if (l.master_addr && flags.addr_opt->count() == 0) flags.master_addr = *l.master_addr;
  if (l.master_port && flags.port_opt->count() == 0) flags.master_port = *l.master_port;

  const bool embedded = cf.config_path.empty();
  out.own_data = embedded && !pretrain && overrides_key(cf.overrides, "data.train");
  if (out.own_data) {
    std::string train;
    for (const auto& o : cf.overrides) {
      if (key_of(o) == "data.train") train = o.substr(o.find('=') + 1);
    }
    const auto defaults = own_data_defaults(train, imports);
    cf.overrides.insert(cf.overrides.begin(), defaults.begin(), defaults.end());
  }

  // torchrun and accelerate run DDP when several processes are asked for
  // and no strategy is named; `single` would only refuse the second rank.
  const bool launched_here = flags.nproc != 1 || flags.nnodes != 1;
  const int world = launched_here ? flags.nproc * flags.nnodes : env_world_size();
  RunConfig config = load_run_config(cf, imports);
  check_foreign_strategy(config);
  if (world > 1 && config.strategy.name == kDefaultStrategy && flags.strategy.empty() &&
      !overrides_key(cf.overrides, "strategy.name")) {
    cf.overrides.push_back(fmt::format("strategy.name={}", kDefaultMultiProcessStrategy));
    config = load_run_config(cf, imports);
    out.notes.push_back(fmt::format("{} processes and no --strategy: using {}, as torchrun and accelerate do", world,
                                    kDefaultMultiProcessStrategy));
  }
  if (embedded) out.notes.push_back(inherited_note(cf.overrides, imports));
  if (world == 1 && !one_process_ranks(config.strategy.name, flags.config.plugin_dirs)) {
    out.notes.push_back(fmt::format("strategy {} on 1 process: running one rank (--nproc N starts N)", config.strategy.name));
  }
  if (config.strategy.precision == "fp16" && config.runtime.device == "cpu") {
    // The Precision's own check, here before any worker starts or data loads.
    Precision(PrecisionMode::FP16, c10::kCPU);
  }
  if (config.train.output_dir.empty()) {
    out.warnings.push_back(fmt::format("{}: train.output_dir is not set: this run saves no checkpoint "
                                       "(--output-dir DIR to keep the model)",
                                       config.source));
  }
  if (pretrain) {
    config.task = task;
  } else if (config.task == RunConfig::Task::kMaskedLm) {
    fail("{}: task fill-mask is masked-LM pretraining: run it with `ft pretrain`", config.source);
  }
  out.config = std::move(config);
  return out;
}

}  // namespace ft::app
