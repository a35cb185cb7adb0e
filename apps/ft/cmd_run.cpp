// `ft run`: train. With --nproc N (or --nnodes) the process becomes the
// launcher and re-executes itself as N workers; a worker (launched by us or
// by torchrun / mpirun / srun) joins the job from its environment.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "mlflow_tracker.h"
#include "run_flags.h"
#include "ft/comm/comm.h"
#include "ft/config/config.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/config/config_import.h"
#include "ft/comm/dist_env.h"
#include "ft/base/error.h"
#include "ft/observe/events.h"
#include "ft/base/fs.h"
#include "ft/comm/launcher.h"
#include "ft/tasks/mlm.h"
#include "ft/plugin/plugin_host.h"
#include "ft/train/runtime.h"
#include "ft/train/trainer.h"

namespace ft::app {
namespace {

int launch(const RunFlags& f, const RunConfig& config) {
  if (f.nproc < 1) fail("--nproc {}: need at least 1 worker", f.nproc);
  LaunchOptions lo;
  lo.nproc = f.nproc;
  lo.nnodes = f.nnodes;
  lo.node_rank = f.node_rank;
  lo.master_addr = f.master_addr;
  lo.master_port = f.master_port;
  lo.timeout_s = config.runtime.timeout_s;
  lo.save_grace_s = config.runtime.save_grace_s + 5;  // the workers' own bound, and time to exit
  if (f.max_restarts < 0) fail("--max-restarts {}: must be >= 0", f.max_restarts);
  lo.max_restarts = f.max_restarts;
  const std::string out = config.train.output_dir;
  lo.describe_resume = [out] {
    if (out.empty()) return std::string("from step 0 (train.output_dir is not set, so there are no checkpoints)");
    const auto found = latest_checkpoint(out);
    if (!found) return fmt::format("from step 0 (no complete checkpoint in {} yet)", out);
    return fmt::format("from {} (step {})", found->dir.string(), found->global_step);
  };
  lo.argv.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
  lo.argv.insert(lo.argv.end(), f.raw_args.begin(), f.raw_args.end());
  lo.extra_env["FT_LAUNCHED"] = "1";
  return launch_and_supervise(lo);
}

// Rows HF's Trainer would take without a word but that are most likely
// mistakes in the file: one warning for each kind.
void warn_suspicious_rows(const RunInputs& in, const std::string& file, EventLog& events) {
  int64_t empty = 0;
  std::vector<int64_t> per_label(in.label_names.size(), 0);
  std::vector<const Dataset*> sets{in.train.get()};
  for (const auto& dev : in.dev) sets.push_back(dev.data.get());
  for (const Dataset* d : sets) {
    for (const int64_t len : d->lengths()) empty += len <= 2 ? 1 : 0;  // [CLS] [SEP] and nothing between
    for (const int64_t label : d->labels()) {
      if (label >= 0 && label < static_cast<int64_t>(per_label.size())) ++per_label[static_cast<size_t>(label)];
    }
  }
  if (empty > 0) events.warn(fmt::format("{}: {} row(s) have an empty text; they train on [CLS] [SEP] alone", file, empty));
  std::vector<std::string> once;
  for (size_t i = 0; i < per_label.size(); ++i) {
    if (per_label[i] == 1) once.push_back("'" + in.label_names[i] + "'");
  }
  if (!once.empty()) {
    events.warn(fmt::format("{}: label(s) {} occur in one row only (a typo in the label column?); set data.labels "
                            "to fix the label set",
                            file, fmt::join(once, ", ")));
  }
}

// The command line as a shell would take it back, for the run report.
std::string command_line(const std::vector<std::string>& args) {
  std::string out = "ft";
  for (const auto& a : args) {
    const bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?[]{}();&|<>~#!") == std::string::npos;
    std::string quoted = "'";
    for (char ch : a) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += " " + (plain ? a : quoted + "'");
  }
  return out;
}

}  // namespace

int run_training(RunConfig config, const std::vector<std::string>& plugin_dirs, const std::vector<std::string>& notes,
                 const std::string& command, const PrepareInputs& prepare) {
  const DistEnv env = detect_dist_env(process_env());
  // First: threads started from here on inherit the CPU affinity.
  const ThreadPlan threads = configure_threads(
      {config.runtime.threads, env.local_rank, env.local_world_size, config.runtime.pin_threads});
  if (env.rank == 0 && threads.warning) std::fprintf(stderr, "%s\n", threads.warning->c_str());
  std::vector<std::filesystem::path> dirs(plugin_dirs.begin(), plugin_dirs.end());
  PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(dirs));
  auto strategy = host.create(config.strategy.name);
  RunInputs inputs = prepare                                      ? prepare(config)
                     : config.task == RunConfig::Task::kMaskedLm ? prepare_pretrain_inputs(config)
                                                                  : prepare_inputs(config);
  CommOptions co;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.runtime.timeout_s * 1000));
  // torch's variable for the interface Gloo binds (multi-host jobs).
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) co.network_interface = ifname;
  auto comm = Comm::create(env, co);
  // Without --metrics-out, a run with an output directory keeps its metrics there, beside
  // report.html (`ft report DIR` rebuilds it); a resumed run continues that history.
  const std::string& out = config.train.output_dir;
  const bool own_metrics = config.runtime.metrics_out.empty() && !out.empty();
  if (own_metrics) {
    if (env.rank == 0) std::filesystem::create_directories(out);
    config.runtime.metrics_out = (std::filesystem::path(out) / "metrics.jsonl").string();
  }
  const auto& targets = config.runtime.report_to;
  auto reports_to = [&](const char* t) { return std::find(targets.begin(), targets.end(), t) != targets.end(); };
  if (reports_to("tensorboard") && config.runtime.tensorboard_dir.empty()) {  // HF's logging_dir default
    config.runtime.tensorboard_dir = (std::filesystem::path(out.empty() ? "." : out) / "runs").string();
  }
  EventLog events(env.rank == 0, config.runtime.metrics_out, config.runtime.progress, config.runtime.tensorboard_dir);
  if (own_metrics && !config.train.resume_from.empty()) events.append_metrics();
  std::unique_ptr<MlflowTracker> mlflow;
  if (env.rank == 0 && reports_to("mlflow")) {
    mlflow = std::make_unique<MlflowTracker>(config, events);
    events.listen([t = mlflow.get()](const std::string& record) { t->record(record); });
  }
  if (!out.empty()) events.keep_report((std::filesystem::path(out) / "report.html").string());
  // The run's record goes out just before its first event: a run that fails to start
  // (bad data, a checkpoint that does not fit) leaves no metrics file behind.
  events.listen([&events, started = false, command, yaml = to_yaml(config), task = task_name(config.task),
                 name = config.strategy.name, world = env.world_size](const std::string&) mutable {
    if (started) return;
    started = true;
    events.run_started(command, yaml, task, name, world);
  });
  for (const auto& note : notes) events.info(note);
  if (inputs.skipped_rows > 0) {
    events.info(fmt::format("skipped {} bad row(s) (data.bad_rows=skip){}", inputs.skipped_rows,
                            inputs.skip_notes.empty() ? "" : fmt::format("; the first: {}", fmt::join(inputs.skip_notes, "; "))));
  }
  for (const auto& note : inputs.notes) events.info(note);
  if (config.task == RunConfig::Task::kClassify && inputs.tokenizer && !inputs.train->extracted_features()) {
    warn_suspicious_rows(inputs, config.data.train, events);
  }
  // The problem type the data or the checkpoint settled on, said once (docs/tasks.md).
  const ProblemType problem = inputs.train->problem_type();
  const std::string labels = problem == ProblemType::kRegression
                                 ? std::string("regression (one score per row)")
                                 : fmt::format("{} labels{}", inputs.label_names.size(),
                                               problem == ProblemType::kMultiLabel ? ", multi-label" : "");
  std::vector<std::string> dev_rows;
  for (const auto& dev : inputs.dev) {
    dev_rows.push_back(dev.name.empty() ? std::to_string(dev.data->size()) : fmt::format("{} {}", dev.data->size(), dev.name));
  }
  events.info(fmt::format("{} train / {} dev rows, {}, {}", inputs.train->size(),
                          dev_rows.empty() ? std::string("0") : fmt::format("{}", fmt::join(dev_rows, " + ")), labels,
                          threads.describe()));
  // The tracker's run ends FINISHED with the report and config, or FAILED with what there is.
  auto end_tracking = [&](bool ok) {
    if (!mlflow) return;
    std::vector<std::pair<std::string, std::string>> artefacts{{"config.yaml", to_yaml(config)}};
    const auto report = std::filesystem::path(out) / "report.html";
    std::error_code ec;
    if (!out.empty() && std::filesystem::is_regular_file(report, ec)) artefacts.emplace_back("report.html", fs::read_file(report));
    mlflow->finish(ok, artefacts);
  };
  try {
    Trainer trainer(config, std::move(inputs), strategy, config.strategy.name, *comm, events);
    trainer.fit();
  } catch (...) {
    end_tracking(false);
    throw;
  }
  end_tracking(true);
  strategy->teardown();
  return 0;
}

void add_config_flags(CLI::App& cmd, ConfigFlags& flags, bool imports) {
  cmd.add_option("-c,--config", flags.config_path, "run config YAML (default: the embedded configs/default.yaml)");
  cmd.add_option("--set", flags.overrides, "override a config key, e.g. --set train.lr=3e-5 (repeatable)");
  cmd.add_option("--plugin-dir", flags.plugin_dirs, "extra directory to load strategy plugins from (repeatable)");
  if (!imports) return;
  cmd.add_option("--deepspeed", flags.deepspeed, "import a DeepSpeed ds_config.json (below --config; docs/importing-configs.md)");
  cmd.add_option("--accelerate-config", flags.accelerate_config, "import an accelerate config YAML (below --config)");
  cmd.add_option("--training-args", flags.training_args, "import HF TrainingArguments as JSON (below --config)");
}

RunConfig load_run_config(const ConfigFlags& flags) { return ft::load_run_config(flags, quiet_process()); }

namespace {

// HF's overwrite_output_dir: a new run into a directory holding files would
// rotate the old run's checkpoints away; resuming there is what it is for.
void check_output_dir(const RunConfig& config, bool overwrite) {
  const std::string& out = config.train.output_dir;
  std::error_code ec;
  if (out.empty() || overwrite || !config.train.resume_from.empty() || !std::filesystem::is_directory(out, ec)) return;
  // Hidden entries are interrupted saves' debris, which the run recovers or removes itself;
  // the metrics and report of a run that saved nothing are simply rewritten.
  bool holds_files = false;
  for (const auto& e : std::filesystem::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    holds_files = holds_files || (name.rfind('.', 0) != 0 && name != "metrics.jsonl" && name != "report.html");
  }
  if (!holds_files) return;
  fail("train.output_dir {} is not empty (an earlier run?); pass --overwrite-output-dir to train into it anyway, "
       "--resume auto to continue it, or --output-dir NEW",
       out);
}

// `ft run` and `ft pretrain`: the same flags, launcher and Trainer; the task differs.
void add_training_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv, RunConfig::Task task) {
  const bool pretrain = task == RunConfig::Task::kMaskedLm;
  auto flags = std::make_shared<RunFlags>();
  flags->raw_args = argv;
  auto* cmd = pretrain ? app.add_subcommand("pretrain", "masked-language-model pretraining of the encoder (docs/fine-tuning.md)")
                       : app.add_subcommand("run", "train a classifier");
  add_run_flags(*cmd, *flags);
  cmd->callback([=, &exit_code] {
    const bool is_worker = std::getenv("FT_LAUNCHED") != nullptr;
    const bool speaker = !quiet_process();
    ResolvedRun run = resolve_run(*flags, task, !speaker);
    RunConfig& config = run.config;
    // A group the launcher restarted resumes from the newest complete checkpoint ("auto"
    // finds and verifies it). Only an explicit --resume needs the look-ahead: it stays the
    // start point until the output directory holds a checkpoint of this run.
    const char* restart = std::getenv("FT_RESTART");
    if (is_worker && restart != nullptr && std::atoi(restart) > 0 && !config.train.output_dir.empty() &&
        (config.train.resume_from.empty() || latest_checkpoint(config.train.output_dir))) {
      config.train.resume_from = "auto";
    }
    // Before any worker starts or writes; torchrun's ranks > 0 leave it to rank 0.
    if (speaker) {
      check_output_dir(config, flags->overwrite_output_dir);
      for (const auto& w : run.warnings) std::fprintf(stderr, "ft: warning: %s\n", w.c_str());
    }
    if (!is_worker && (flags->nproc != 1 || flags->nnodes != 1 || flags->max_restarts > 0)) {
      // Workers get the same command line; FT_LAUNCHED keeps them from launching
      // again, and rank 0 prints the notes with the start line.
      exit_code = launch(*flags, config);
      return;
    }
    exit_code = run_training(config, flags->config.plugin_dirs, run.notes, command_line(flags->raw_args));
  });
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv) {
  add_training_command(app, exit_code, argv, RunConfig::Task::kClassify);
  add_training_command(app, exit_code, argv, RunConfig::Task::kMaskedLm);
}

}  // namespace ft::app
