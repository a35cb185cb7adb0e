// `ft strategies`, `ft vocab build`, `ft config show`.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "run_flags.h"
#include "ft/config/config.h"
#include "ft/data/data.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/plugin/plugin_host.h"
#include "ft/tokenizer/vocab_builder.h"

namespace ft::app {
namespace {

std::vector<std::filesystem::path> to_paths(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

int list_strategies(const std::vector<std::string>& plugin_dirs, bool verbose) {
  PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(to_paths(plugin_dirs)));
  auto infos = host.list();
  size_t w_name = 4, w_version = 7;
  for (const auto& i : infos) {
    w_name = std::max(w_name, i.name.size());
    w_version = std::max(w_version, i.plugin_version.size());
  }
  std::cout << fmt::format("{:<{}}  {:<{}}  {}\n", "name", w_name, "version", w_version, "description");
  for (const auto& i : infos) {
    std::cout << fmt::format("{:<{}}  {:<{}}  {}\n", i.name, w_name, i.plugin_version, w_version, i.description);
    std::cout << fmt::format("{:<{}}  {:<{}}  file: {}{}\n", "", w_name, "", w_version, i.file.string(),
                             verbose ? " (" + i.origin + ")" : "");
  }
  if (verbose) {
    for (const auto& w : host.warnings()) std::cout << "refused: " << w << "\n";
  }
  return 0;
}

}  // namespace

void add_strategies_command(CLI::App& app, int& exit_code) {
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto verbose = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("strategies", "list the installed strategy plugins");
  cmd->add_option("--plugin-dir", *dirs, "extra plugin directory (repeatable)");
  cmd->add_flag("-v,--verbose", *verbose, "show where each plugin came from and refused files");
  cmd->callback([dirs, verbose, &exit_code] { exit_code = list_strategies(*dirs, *verbose); });
}

void add_vocab_command(CLI::App& app, int& exit_code) {
  struct VocabFlags {
    ConfigFlags config;
    std::string data, out;
    VocabBuildOptions options;
  };
  auto vf = std::make_shared<VocabFlags>();
  auto* vocab = app.add_subcommand("vocab", "vocabulary tools");
  vocab->require_subcommand(1);
  auto* build = vocab->add_subcommand("build", "build a WordPiece vocab.txt from training data");
  add_config_flags(*build, vf->config, false);
  build->add_option("--data", vf->data, "training file (default: the config's data.train)");
  build->add_option("--out", vf->out, "where to write vocab.txt")->required();
  build->add_option("--size", vf->options.vocab_size, "vocabulary size");
  build->add_option("--min-frequency", vf->options.min_frequency, "ignore pieces seen fewer times");
  build->callback([vf, &exit_code] {
    RunConfig config = load_run_config(vf->config);
    DataSource src;
    src.path = vf->data.empty() ? config.data.train : vf->data;
    src.format = parse_data_format(config.data.format);
    src.text_field = config.data.text_field;
    src.pair_field = config.data.pair_field;
    src.label_field = config.data.label_field;
    src.max_rows = config.data.max_rows;
    src.strip_spaces = config.data.strip_spaces;
    src.bad_rows = BadRows::Skip;
    src.label_names = config.data.labels;
    TextData data = read_text_data(src);
    std::vector<std::string> texts;
    for (const auto& r : data.rows) {
      texts.push_back(r.text);
      if (!r.pair.empty()) texts.push_back(r.pair);
    }
    vf->options.lowercase = config.data.lowercase != "false";
    auto tokens = build_wordpiece_vocab(texts, vf->options);
    std::string text;
    for (const auto& t : tokens) text += t + "\n";
    fs::write_file_atomic(vf->out, text);
    std::cout << fmt::format("wrote {} ({} tokens from {} rows of {})\n", vf->out, tokens.size(), data.rows.size(), src.path);
    exit_code = 0;
  });
}

void add_config_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<RunFlags>();
  auto* cmd = app.add_subcommand("config", "run-config tools");
  cmd->require_subcommand(1);
  auto* show = cmd->add_subcommand("show", "print what `ft run` with these flags would run: the launch and the config as YAML");
  add_run_flags(*show, *flags);
  show->callback([flags, &exit_code] {
    const ResolvedRun run = resolve_run(*flags, RunConfig::Task::kClassify, false);
    std::cout << "# effective config: " << run.config.source << "\n";
    // The launch as `ft run` would start it: flags, else the accelerate config's.
    std::string launch = fmt::format(" --nproc {}", flags->nproc);
    if (flags->nnodes != 1) launch += fmt::format(" --nnodes {} --node-rank {}", flags->nnodes, flags->node_rank);
    if (flags->nnodes != 1 || flags->addr_opt->count() > 0 || !flags->config.accelerate_config.empty())
      launch += " --master-addr " + flags->master_addr;
    if (flags->master_port != 0) launch += fmt::format(" --master-port {}", flags->master_port);
    std::cout << "# launch:" << launch << "\n";
    for (const auto& note : run.notes) std::cout << "# " << note << "\n";
    for (const auto& w : run.warnings) std::cout << "# warning: " << w << "\n";
    std::cout << to_yaml(run.config);
    exit_code = 0;
  });
}

}  // namespace ft::app
