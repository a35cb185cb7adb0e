// `ft strategies`, `ft eval`, `ft predict`, `ft vocab build`.
#include <iostream>
#include <memory>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "commands.h"
#include "ft/checkpoint.h"
#include "ft/comm.h"
#include "ft/config.h"
#include "ft/config_import.h"
#include "ft/data.h"
#include "ft/error.h"
#include "ft/events.h"
#include "ft/fs.h"
#include "ft/plugin_host.h"
#include "ft/run_inputs.h"
#include "ft/runtime.h"
#include "ft/tuning_method.h"
#include "ft/tokenizer.h"
#include "ft/trainer.h"
#include "ft/vocab_builder.h"

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

// Evaluation reuses the Trainer with a one-process `single` strategy, so
// `ft eval` and the in-training evaluation are the same code.
int evaluate_checkpoint(const ConfigFlags& flags, const std::string& checkpoint, const std::string& data, int max_length) {
  // Else model.config would read it as a config.json and blame its JSON.
  if (!std::filesystem::is_directory(checkpoint)) fail("checkpoint {}: not a directory", checkpoint);
  // Loading the weights verifies a checkpoint that has a manifest; one
  // without is said after it loaded, so a bad one still gets one line.
  const bool unverified = !std::filesystem::exists(std::filesystem::path(checkpoint) / kManifestFile) &&
                          verify_checkpoint(checkpoint) == CheckpointCheck::kUnverified;
  ConfigFlags f = flags;
  // Tokenise as training did: the checkpoint's model_max_length unless
  // --max-length says otherwise; --set data.max_seq_len still wins.
  if (max_length <= 0) max_length = static_cast<int>(read_model_max_length(checkpoint).value_or(0));
  if (max_length > 0) f.overrides.insert(f.overrides.begin(), "data.max_seq_len=" + std::to_string(max_length));
  // Evaluate in fp32 whatever the embedded default trains in; --set strategy.precision still wins.
  f.overrides.insert(f.overrides.begin(), "strategy.precision=fp32");
  f.overrides.push_back("model.config=" + checkpoint);
  f.overrides.push_back("model.weights=");
  f.overrides.push_back("strategy.name=single");
  f.overrides.push_back("train.resume_from=");
  f.overrides.push_back("train.output_dir=");
  if (!data.empty()) {
    f.overrides.push_back("data.train=" + data);
    f.overrides.push_back("data.dev=" + data);
    f.overrides.push_back("data.max_rows=0");
  }
  RunConfig config = load_run_config(f);
  // The checkpoint's LoRA, adapters or virtual tokens (the Trainer applies them); others none.
  use_checkpoint_method(config, checkpoint);
  if (config.data.vocab.empty() && std::filesystem::exists(std::filesystem::path(checkpoint) / "vocab.txt")) {
    config.data.vocab = (std::filesystem::path(checkpoint) / "vocab.txt").string();
  }
  configure_threads({config.runtime.threads});
  PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(to_paths(flags.plugin_dirs)));
  auto strategy = host.create("single");
  RunInputs inputs = prepare_inputs(config);
  if (!inputs.dev) fail("ft eval: no dev data; pass --data FILE or set data.dev / data.dev_fraction");
  auto labels = inputs.label_names;
  auto comm = Comm::create(DistEnv{});
  EventLog events(true, config.runtime.metrics_out, false);
  Trainer trainer(config, std::move(inputs), strategy, "single", *comm, events);
  if (unverified) note_unverified(checkpoint);
  auto report = trainer.evaluate();
  events.eval(0, 0, report, labels);
  return 0;
}

int predict(const std::string& checkpoint, std::vector<std::string> texts, int max_length, bool logits) {
  configure_threads({});
  auto ckpt = load_checkpoint(checkpoint, false);
  const auto tokenizer = load_model_dir_tokenizer(checkpoint);
  if (!tokenizer) fail("checkpoint {}: neither tokenizer.json nor vocab.txt; predict needs the tokenizer", checkpoint);
  const WordPieceTokenizer& tok = *tokenizer;
  // Tokenise as training did: the checkpoint's model_max_length unless --max-length says otherwise.
  if (max_length <= 0) max_length = static_cast<int>(read_model_max_length(checkpoint).value_or(128));
  BertForSequenceClassification model(ckpt.config);
  apply_checkpoint_method(model, ckpt);  // its weights come with ckpt.model
  model.load_weights(ckpt.model, checkpoint + "/model.safetensors");
  if (ckpt.check == CheckpointCheck::kUnverified) note_unverified(checkpoint);  // said once it loaded
  model.eval();
  if (texts.empty()) {
    for (std::string line; std::getline(std::cin, line);)
      if (!line.empty()) texts.push_back(line);
  }
  torch::NoGradGuard no_grad;
  const auto& names = ckpt.config.id2label;
  for (const auto& text : texts) {
    auto enc = tok.encode(text, std::nullopt, max_length, false);
    const auto n = static_cast<int64_t>(enc.input_ids.size());
    Batch b;
    b.input_ids = at::tensor(enc.input_ids, at::kLong).view({1, n});
    b.attention_mask = at::tensor(enc.attention_mask, at::kLong).view({1, n});
    b.token_type_ids = at::tensor(enc.token_type_ids, at::kLong).view({1, n});
    const at::Tensor scores = model.forward(b)[0];
    const at::Tensor probs = at::softmax(scores, -1);
    const int64_t best = probs.argmax().item<int64_t>();
    nlohmann::json out{{"text", text}, {"label", names.empty() ? std::to_string(best) : names[best]}};
    nlohmann::json p = nlohmann::json::object();
    for (int64_t k = 0; k < probs.size(0); ++k) {
      p[names.empty() ? std::to_string(k) : names[k]] = probs[k].item<double>();
    }
    out["probabilities"] = p;
    if (logits) {
      std::vector<double> raw(static_cast<size_t>(scores.size(0)));
      for (int64_t k = 0; k < scores.size(0); ++k) raw[static_cast<size_t>(k)] = scores[k].item<double>();
      out["logits"] = raw;
    }
    std::cout << out.dump() << "\n";
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

void add_eval_predict_commands(CLI::App& app, int& exit_code) {
  struct EvalFlags {
    ConfigFlags config;
    std::string checkpoint, data;
    int max_length = 0;  // 0: the checkpoint's tokenizer_config.json, else the config's data.max_seq_len
  };
  auto ef = std::make_shared<EvalFlags>();
  auto* eval = app.add_subcommand("eval", "evaluate a saved checkpoint on dev data");
  add_config_flags(*eval, ef->config);
  eval->add_option("--checkpoint", ef->checkpoint, "checkpoint directory")->required();
  eval->add_option("--data", ef->data, "evaluate every row of this file (default: the config's dev split)");
  eval->add_option("--max-length", ef->max_length,
                   "truncate inputs to this many tokens (default: the checkpoint's model_max_length)");
  eval->callback([ef, &exit_code] {
    exit_code = evaluate_checkpoint(ef->config, ef->checkpoint, ef->data, ef->max_length);
  });

  struct PredictFlags {
    std::string checkpoint;
    std::vector<std::string> texts;
    int max_length = 0;  // 0: the checkpoint's tokenizer_config.json, else 128
    bool logits = false;
  };
  auto pf = std::make_shared<PredictFlags>();
  auto* pred = app.add_subcommand("predict", "text in, label + probabilities out (JSON Lines)");
  pred->add_option("--checkpoint", pf->checkpoint, "checkpoint directory")->required();
  pred->add_option("--max-length", pf->max_length, "truncate inputs to this many tokens (default: the checkpoint's model_max_length, else 128)");
  pred->add_option("texts", pf->texts, "texts to classify (default: one per line on stdin)");
  pred->add_flag("--logits", pf->logits, "also print the raw logits (what transformers' model(...).logits gives)");
  pred->callback([pf, &exit_code] { exit_code = predict(pf->checkpoint, pf->texts, pf->max_length, pf->logits); });
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
  add_config_flags(*build, vf->config);
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
  struct ShowFlags {
    ConfigFlags config;
    int nproc = 1, nnodes = 1;
  };
  auto sf = std::make_shared<ShowFlags>();
  auto* cmd = app.add_subcommand("config", "run-config tools");
  cmd->require_subcommand(1);
  auto* show = cmd->add_subcommand("show", "print the effective run config (imports, --config, --set) as YAML");
  add_config_flags(*show, sf->config);
  show->add_option("--nproc", sf->nproc, "worker processes per host, for DeepSpeed's train_batch_size check");
  show->add_option("--nnodes", sf->nnodes, "hosts in the job");
  auto* nproc_opt = show->get_option("--nproc");
  show->callback([sf, nproc_opt, &exit_code] {
    ConfigFlags f = sf->config;
    if (nproc_opt->count() > 0) f.world_size = sf->nproc * sf->nnodes;
    const ConfigImports imports = read_imports(f, false);
    const RunConfig config = load_run_config(f, imports);
    std::cout << "# effective config: " << config.source << "\n";
    const ImportedLaunch l = imports.launch();
    std::string launch;
    if (l.nproc) launch += fmt::format(" --nproc {}", *l.nproc);
    if (l.nnodes) launch += fmt::format(" --nnodes {}", *l.nnodes);
    if (l.node_rank) launch += fmt::format(" --node-rank {}", *l.node_rank);
    if (l.master_addr) launch += " --master-addr " + *l.master_addr;
    if (l.master_port) launch += fmt::format(" --master-port {}", *l.master_port);
    if (!launch.empty()) std::cout << "# launch (from the accelerate config):" << launch << "\n";
    std::cout << to_yaml(config);
    exit_code = 0;
  });
}

}  // namespace ft::app
