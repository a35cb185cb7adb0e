// The `ft` subcommands. Each returns the process exit code; ft::Error
// escapes to main(), which prints it as one line.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ft::app {

// Flags shared by every command that reads a run config.
struct ConfigFlags {
  std::string config_path;            // --config (empty: the embedded default)
  std::vector<std::string> overrides; // --set key=value
  std::vector<std::string> plugin_dirs;
};

// argv: our arguments after the program name, re-used to start workers.
void add_run_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv);
void add_strategies_command(CLI::App& app, int& exit_code);
void add_eval_predict_commands(CLI::App& app, int& exit_code);
void add_vocab_command(CLI::App& app, int& exit_code);
void add_consolidate_command(CLI::App& app, int& exit_code);
void add_export_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv);
void add_trace_command(CLI::App& app, int& exit_code);

}  // namespace ft::app

namespace ft {
struct RunConfig;
}

namespace ft::app {
// Loads --config (or the embedded default) with --set overrides applied.
RunConfig load_run_config(const ConfigFlags& flags);
// Adds --config/--set/--plugin-dir to a subcommand.
void add_config_flags(CLI::App& cmd, ConfigFlags& flags);
}  // namespace ft::app
