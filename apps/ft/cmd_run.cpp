// `ft run`: train. With --nproc N (or --nnodes) the process becomes the
// launcher and re-executes itself as N workers; a worker (launched by us or
// by torchrun / mpirun / srun) joins the job from its environment.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ft/comm.h"
#include "ft/config.h"
#include "ft/checkpoint.h"
#include "ft/config_import.h"
#include "ft/dist_env.h"
#include "ft/error.h"
#include "ft/events.h"
#include "ft/launcher.h"
#include "ft/mlm.h"
#include "ft/plugin_host.h"
#include "ft/runtime.h"
#include "ft/trainer.h"

namespace ft::app {
namespace {

struct RunFlags {
  ConfigFlags config;
  std::string strategy, precision, metrics_out, output_dir, resume, profile_steps;
  int nproc = 1, nnodes = 1, node_rank = 0, master_port = 0;
  std::string master_addr = "127.0.0.1";
  int64_t threads = 0, max_steps = 0;
  int max_restarts = 0;
  bool no_pin = false;
  double timeout_s = 0;
  std::vector<std::string> raw_args;  // to re-execute ourselves as workers
};

std::vector<std::string> flag_overrides(const RunFlags& f) {
  std::vector<std::string> out = f.config.overrides;
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

int launch(const RunFlags& f, const RunConfig& config) {
  if (f.nproc < 1) fail("--nproc {}: need at least 1 worker", f.nproc);
  LaunchOptions lo;
  lo.nproc = f.nproc;
  lo.nnodes = f.nnodes;
  lo.node_rank = f.node_rank;
  lo.master_addr = f.master_addr;
  lo.master_port = f.master_port;
  lo.timeout_s = config.runtime.timeout_s;
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

int work(const RunConfig& config, const std::vector<std::string>& plugin_dirs) {
  const DistEnv env = detect_dist_env(process_env());
  // First: threads started from here on inherit the CPU affinity.
  const ThreadPlan threads = configure_threads(
      {config.runtime.threads, env.local_rank, env.local_world_size, config.runtime.pin_threads});
  if (env.rank == 0 && threads.warning) std::fprintf(stderr, "%s\n", threads.warning->c_str());
  std::vector<std::filesystem::path> dirs(plugin_dirs.begin(), plugin_dirs.end());
  PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(dirs));
  auto strategy = host.create(config.strategy.name);
  RunInputs inputs = config.task == RunConfig::Task::kMaskedLm ? prepare_pretrain_inputs(config) : prepare_inputs(config);
  CommOptions co;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.runtime.timeout_s * 1000));
  // torch's variable for the interface Gloo binds (multi-host jobs).
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) co.network_interface = ifname;
  auto comm = Comm::create(env, co);
  EventLog events(env.rank == 0, config.runtime.metrics_out, config.runtime.progress, config.runtime.tensorboard_dir);
  if (inputs.skipped_rows > 0) events.info(fmt::format("skipped {} bad row(s) (data.bad_rows=skip)", inputs.skipped_rows));
  for (const auto& note : inputs.notes) events.info(note);
  events.info(fmt::format("{} train / {} dev rows, {} labels, {}", inputs.train->size(),
                          inputs.dev ? inputs.dev->size() : 0, inputs.label_names.size(), threads.describe()));
  Trainer trainer(config, std::move(inputs), strategy, config.strategy.name, *comm, events);
  trainer.fit();
  strategy->teardown();
  return 0;
}

}  // namespace

void add_config_flags(CLI::App& cmd, ConfigFlags& flags) {
  cmd.add_option("-c,--config", flags.config_path, "run config YAML (default: the embedded configs/default.yaml)");
  cmd.add_option("--set", flags.overrides, "override a config key, e.g. --set train.lr=3e-5 (repeatable)");
  cmd.add_option("--plugin-dir", flags.plugin_dirs, "extra directory to load strategy plugins from (repeatable)");
  cmd.add_option("--deepspeed", flags.deepspeed, "import a DeepSpeed ds_config.json (below --config; docs/importing-configs.md)");
  cmd.add_option("--accelerate-config", flags.accelerate_config, "import an accelerate config YAML (below --config)");
  cmd.add_option("--training-args", flags.training_args, "import HF TrainingArguments as JSON (below --config)");
}

ConfigImports read_imports(const ConfigFlags& flags, bool quiet) {
  int world = flags.world_size;
  if (world <= 0) {
    const char* w = std::getenv("WORLD_SIZE");
    world = w != nullptr ? std::max(1, std::atoi(w)) : 1;
  }
  ConfigImports imports(world);
  // accelerate first: its num_processes sets the world size the others check against.
  if (!flags.accelerate_config.empty()) {
    imports.add_accelerate(flags.accelerate_config);
    if (flags.world_size > 0) imports.set_world_size(flags.world_size);
  }
  if (!flags.deepspeed.empty()) imports.add_deepspeed(flags.deepspeed);
  if (!flags.training_args.empty()) imports.add_training_args(flags.training_args);
  if (!quiet) {
    for (const auto& w : imports.warnings()) std::fprintf(stderr, "ft: warning: %s\n", w.c_str());
  }
  return imports;
}

RunConfig load_run_config(const ConfigFlags& flags, const ConfigImports& imports) {
  if (flags.config_path.empty()) {
    return config_from_layers(default_config_yaml(), "configs/default.yaml (embedded)", true, imports, flags.overrides);
  }
  return config_from_layers(read_config_file(flags.config_path), flags.config_path, false, imports, flags.overrides);
}

// One process speaks for the job: ft's own workers and torchrun's ranks > 0 stay quiet.
bool quiet_process() {
  const char* rank = std::getenv("RANK");
  return std::getenv("FT_LAUNCHED") != nullptr || (rank != nullptr && std::string(rank) != "0");
}

RunConfig load_run_config(const ConfigFlags& flags) { return load_run_config(flags, read_imports(flags, quiet_process())); }

namespace {

// `ft run` and `ft pretrain`: the same flags, launcher and Trainer; the task differs.
void add_training_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv, RunConfig::Task task) {
  const bool pretrain = task == RunConfig::Task::kMaskedLm;
  auto flags = std::make_shared<RunFlags>();
  flags->raw_args = argv;
  auto* cmd = pretrain ? app.add_subcommand("pretrain", "masked-language-model pretraining of the encoder (docs/fine-tuning.md)")
                       : app.add_subcommand("run", "train a classifier");
  add_config_flags(*cmd, flags->config);
  cmd->add_option("-s,--strategy", flags->strategy, "strategy name (see `ft strategies`)");
  cmd->add_option("--precision", flags->precision, "fp32 | bf16 | fp16 | auto");
  cmd->add_option("--nproc", flags->nproc, "worker processes on this host");
  cmd->add_option("--nnodes", flags->nnodes, "hosts in the job");
  cmd->add_option("--node-rank", flags->node_rank, "this host's index");
  cmd->add_option("--master-addr", flags->master_addr, "rendezvous address (rank 0's host)");
  cmd->add_option("--master-port", flags->master_port, "rendezvous port (0: pick a free one)");
  cmd->add_option("--metrics-out", flags->metrics_out, "write JSON Lines metrics here (rank 0)");
  cmd->add_option("--output-dir", flags->output_dir, "checkpoint directory");
  cmd->add_option("--resume", flags->resume, "resume from this checkpoint directory");
  cmd->add_option("--threads", flags->threads, "intra-op threads per rank (default: cores / ranks)");
  cmd->add_flag("--no-pin", flags->no_pin, "do not pin each local rank to its own CPUs");
  cmd->add_option("--max-steps", flags->max_steps, "stop after this many optimizer steps");
  cmd->add_option("--timeout", flags->timeout_s, "seconds before a stuck collective or dead rank stops the job");
  cmd->add_option("--max-restarts", flags->max_restarts,
                  "restart the workers up to N times after a failure, resuming from the newest complete checkpoint");
  cmd->add_option("--profile-steps", flags->profile_steps, "A:B: trace optimizer steps A..B per rank (docs/observability.md)");
  auto* nproc_opt = cmd->get_option("--nproc");
  auto* nnodes_opt = cmd->get_option("--nnodes");
  auto* node_rank_opt = cmd->get_option("--node-rank");
  auto* addr_opt = cmd->get_option("--master-addr");
  auto* port_opt = cmd->get_option("--master-port");
  cmd->callback([=, &exit_code] {
    ConfigFlags cf = flags->config;
    cf.overrides = flag_overrides(*flags);
    // The embedded default run writes runs/default; pretraining on its data must not overwrite it.
    if (pretrain && cf.config_path.empty()) cf.overrides.insert(cf.overrides.begin(), "train.output_dir=runs/pretrain");
    const bool is_worker = std::getenv("FT_LAUNCHED") != nullptr;
    if (!is_worker && nproc_opt->count() > 0) cf.world_size = flags->nproc * flags->nnodes;
    const ConfigImports imports = read_imports(cf, quiet_process());
    // An accelerate config's launch settings, where the command line is silent.
    const ImportedLaunch l = imports.launch();
    if (l.nproc && nproc_opt->count() == 0) flags->nproc = *l.nproc;
    if (l.nnodes && nnodes_opt->count() == 0) flags->nnodes = *l.nnodes;
    if (l.node_rank && node_rank_opt->count() == 0) flags->node_rank = *l.node_rank;
    if (l.master_addr && addr_opt->count() == 0) flags->master_addr = *l.master_addr;
    if (l.master_port && port_opt->count() == 0) flags->master_port = *l.master_port;
    RunConfig config = load_run_config(cf, imports);
    config.task = task;
    // A group the launcher restarted resumes from the newest complete checkpoint ("auto"
    // finds and verifies it). Only an explicit --resume needs the look-ahead: it stays the
    // start point until the output directory holds a checkpoint of this run.
    const char* restart = std::getenv("FT_RESTART");
    if (is_worker && restart != nullptr && std::atoi(restart) > 0 && !config.train.output_dir.empty() &&
        (config.train.resume_from.empty() || latest_checkpoint(config.train.output_dir))) {
      config.train.resume_from = "auto";
    }
    if (!is_worker && (flags->nproc != 1 || flags->nnodes != 1 || flags->max_restarts > 0)) {
      // Workers get the same command line; FT_LAUNCHED keeps them from launching again.
      exit_code = launch(*flags, config);
      return;
    }
    exit_code = work(config, flags->config.plugin_dirs);
  });
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv) {
  add_training_command(app, exit_code, argv, RunConfig::Task::kClassify);
  add_training_command(app, exit_code, argv, RunConfig::Task::kMaskedLm);
}

}  // namespace ft::app
