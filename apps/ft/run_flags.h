// The flags of `ft run` / `ft pretrain`, shared with `ft config show` so a
// run line can be previewed exactly as typed, and the one function that
// turns them into the run's config and launch settings.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "ft/config/config.h"

namespace ft::app {

struct RunFlags {
  ConfigFlags config;
  std::string strategy, precision, metrics_out, output_dir, resume, profile_steps;
  std::string task, data, text_field, pair_field, label_field;
  std::string lr, batch_size, epochs;  // as typed: validation names the key
  int nproc = 1, nnodes = 1, node_rank = 0, master_port = 0;
  std::string master_addr = "127.0.0.1";
  int64_t threads = 0, max_steps = 0;
  int max_restarts = 0;
  bool no_pin = false, overwrite_output_dir = false;
  double timeout_s = 0;
  // --learning_rate and the other Hugging Face names: "train.lr=3e-5".
  std::vector<std::string> hf_overrides;
  std::vector<std::string> hf_notes;  // one info line per HF name used
  std::vector<std::string> raw_args;  // to re-execute ourselves as workers
  // Set by add_run_flags: whether the launch flags were given.
  CLI::Option *nproc_opt = nullptr, *nnodes_opt = nullptr, *node_rank_opt = nullptr, *addr_opt = nullptr,
              *port_opt = nullptr;
};

// Adds every flag `ft run` takes to `cmd`.
void add_run_flags(CLI::App& cmd, RunFlags& flags);

// What the flags resolve to: the config, the launch (an accelerate config
// fills what the command line leaves out) and the info lines for the start.
struct ResolvedRun {
  RunConfig config;
  std::vector<std::string> notes;     // info lines, printed once by the speaking process
  std::vector<std::string> warnings;  // "ft: warning:" lines, likewise
  bool own_data = false;              // the embedded default with the user's data.train
};

// `flags` gets the accelerate config's launch settings where the command
// line is silent. `quiet`: import warnings are not printed (workers).
ResolvedRun resolve_run(RunFlags& flags, RunConfig::Task task, bool quiet);

// HF TrainingArguments names in --set (learning_rate=3e-5) become the ft
// key (train.lr=3e-5); each renamed one adds a note.
std::vector<std::string> map_hf_names(const std::vector<std::string>& overrides, std::vector<std::string>& notes);

// One process speaks for the job: ft's own workers and torchrun's ranks > 0 stay quiet.
bool quiet_process();

}  // namespace ft::app
