// The `ft` subcommands. Each returns the process exit code; ft::Error
// escapes to main(), which prints it as one line.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ft/config/config_import.h"
#include "ft/tasks/run_inputs.h"

namespace ft {
struct BertConfig;
}

namespace ft::app {

// Flags shared by every command that reads a run config: where the config
// comes from (--config, --set, the imports; loaded by core's
// load_run_config, ft/config/config_import.h) and --plugin-dir.
struct ConfigFlags : ConfigSources {
  std::vector<std::string> plugin_dirs;
};

// argv: our arguments after the program name, re-used to start workers.
// `ft run` and `ft pretrain`.
void add_run_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv);
void add_strategies_command(CLI::App& app, int& exit_code);
void add_eval_predict_commands(CLI::App& app, int& exit_code);
void add_vocab_command(CLI::App& app, int& exit_code);
void add_consolidate_command(CLI::App& app, int& exit_code);
void add_export_command(CLI::App& app, int& exit_code);
void add_import_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv);
void add_trace_command(CLI::App& app, int& exit_code);
void add_config_command(CLI::App& app, int& exit_code);
void add_checkpoint_command(CLI::App& app, int& exit_code);
void add_features_command(CLI::App& app, int& exit_code);
void add_tokenize_command(CLI::App& app, int& exit_code);
void add_report_command(CLI::App& app, int& exit_code);
void add_sweep_command(CLI::App& app, int& exit_code);

// A base model directory (config.json's architectures names BertModel, ...):
// no head to answer with, so ft predict and ft export --onnx give its hidden
// states (transformers' feature-extraction).
bool is_base_model(const std::filesystem::path& dir);

// A checkpoint of a task ft has no head for (config.json's architectures
// names BertForQuestionAnswering, ...) would load as something else: one line.
void refuse_unbuilt_head(const std::string& checkpoint, const ft::BertConfig& c);

}  // namespace ft::app

namespace ft::app {
// Whether `strategy` (from the plugins) runs all its ranks in the one process
// `ft run` starts (its OneProcess ability: single, dp), and then the
// strategy.options key that sets how many (empty: one); nullopt for a
// strategy of one rank per process.
std::optional<std::string> one_process_ranks(const std::string& strategy, const std::vector<std::string>& plugin_dirs);
// What one rank of a run trains on, when not what config's data.* says.
using PrepareInputs = std::function<RunInputs(const RunConfig&)>;
// One rank's run of the Trainer (`ft run`, `ft pretrain`, `ft features
// train`): the strategy from the plugins, the Comm from the environment,
// events, metrics, report and trackers. `prepare` defaults to the config's data.
int run_training(RunConfig config, const std::vector<std::string>& plugin_dirs, const std::vector<std::string>& notes,
                 const std::string& command, const PrepareInputs& prepare = {});
// load_run_config quiet on ranks other than 0 (ft/config/config_import.h).
RunConfig load_run_config(const ConfigFlags& flags);
// One stderr line: `dir` has no manifest.json, so it loads unverified.
void note_unverified(const std::string& dir);
// Adds --config/--set/--plugin-dir to a subcommand, and with `imports` the
// foreign-config flags (--deepspeed, --accelerate-config, --training-args).
void add_config_flags(CLI::App& cmd, ConfigFlags& flags, bool imports = true);
}  // namespace ft::app
