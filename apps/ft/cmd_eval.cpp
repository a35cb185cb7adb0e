// `ft eval` and `ft predict`: a checkpoint describes itself. Its labels
// (config.json's id2label), tokenizer (vocab.txt), max length
// (tokenizer_config.json) and the run that made it (training_state/run.yaml)
// come from the checkpoint directory, so both work from any directory.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "commands.h"
#include "ft/tasks/batched_inference.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/comm/comm.h"
#include "ft/config/config.h"
#include "ft/base/error.h"
#include "ft/tasks/run_inputs.h"
#include "ft/observe/events.h"
#include "ft/base/fs.h"
#include "ft/plugin/plugin_host.h"
#include "ft/tasks/predictions.h"
#include "ft/train/runtime.h"
#include "ft/tasks/sentence_transformers.h"
#include "ft/tasks/token_classification.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft/train/trainer.h"
#include "ft/train/tuning_method.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;

std::optional<int64_t> saved_step(const fsys::path& checkpoint) {
  const fsys::path state = checkpoint / "training_state" / "trainer_state.json";
  if (!fsys::exists(state)) return std::nullopt;
  const auto j = nlohmann::json::parse(fs::read_file(state), nullptr, false);
  if (j.is_discarded() || !j.contains("global_step") || !j.at("global_step").is_number_integer()) return std::nullopt;
  return j.at("global_step").get<int64_t>();
}

// What the checkpoint says about its inputs, as --set overrides placed below
// the user's own --set.
std::vector<std::string> checkpoint_overrides(const fsys::path& dir, const std::optional<BertConfig>& saved,
                                              const std::string& data, int max_length) {
  std::vector<std::string> out;
  // Tokenise as training did: the checkpoint's model_max_length unless
  // --max-length says otherwise; --set data.max_seq_len still wins.
  if (max_length <= 0) max_length = static_cast<int>(read_model_max_length(dir).value_or(0));
  if (max_length > 0) out.push_back("data.max_seq_len=" + std::to_string(max_length));
  // The checkpoint's own tokenizer (model.config is the checkpoint: tokenizer.json, else vocab.txt).
  if (fsys::exists(dir / "tokenizer.json") || fsys::exists(dir / "vocab.txt")) out.push_back("data.vocab=");
  // fp32 whatever the run trained in (the default trains under bf16 autocast); --set still wins.
  out.push_back("strategy.precision=fp32");
  // Labels by name, in the model's order: a file whose labels the training
  // run never saw fails naming the label and the model's names.
  if (saved && !saved->id2label.empty()) out.push_back("data.labels=" + nlohmann::json(saved->id2label).dump());
  if (saved && saved->head == BertHead::kTokenClassification) out.push_back("task=token-classification");
  if (has_sentence_modules(dir)) out.push_back("task=sentence-embedding");
  // The run's side outputs are its own, not this evaluation's.
  for (const char* key : {"runtime.metrics_out=", "runtime.tensorboard_dir=", "runtime.profile_steps=",
                          "strategy.options={}", "train.resume_from=", "train.output_dir=", "train.save_every=0",
                          "train.save_each_epoch=false", "train.save_sharded=false"}) {
    out.emplace_back(key);
  }
  if (!data.empty()) {
    out.insert(out.end(), {"data.train=" + data, "data.dev=" + data, "data.max_rows=0", "data.take=first"});
  }
  return out;
}

// Evaluation reuses the Trainer with a one-process `single` strategy, so
// `ft eval` and the in-training evaluation are the same code.
int evaluate_checkpoint(const ConfigFlags& flags, const std::string& checkpoint, const std::string& data, int max_length) {
  // Else model.config would read it as a config.json and blame its JSON.
  if (!fsys::is_directory(checkpoint)) fail("checkpoint {}: not a directory", checkpoint);
  const fsys::path dir(checkpoint);
  std::optional<BertConfig> saved;
  if (fsys::exists(dir / "config.json")) saved = BertConfig::from_json_file((dir / "config.json").string());
  if (saved) refuse_unbuilt_head(checkpoint, *saved);
  // Loading the weights verifies a checkpoint that has a manifest; one
  // without is said after it loaded, so a bad one still gets one line.
  const bool unverified = !fsys::exists(dir / kManifestFile) && verify_checkpoint(checkpoint) == CheckpointCheck::kUnverified;
  ConfigFlags f = flags;
  // The run that made the checkpoint: its text and label fields, its dev split.
  const fsys::path run_yaml = dir / "training_state" / "run.yaml";
  const bool own_run = f.config_path.empty() && fsys::exists(run_yaml);
  if (own_run) f.config_path = run_yaml.string();
  std::vector<std::string> overrides = checkpoint_overrides(dir, saved, data, max_length);
  overrides.insert(overrides.end(), flags.overrides.begin(), flags.overrides.end());
  for (const char* fixed : {"model.weights=", "strategy.name=single"}) overrides.emplace_back(fixed);
  overrides.push_back("model.config=" + checkpoint);
  f.overrides = overrides;
  RunConfig config = load_run_config(f);
  // The checkpoint's LoRA, adapters or virtual tokens (the Trainer applies them); others none.
  use_checkpoint_method(config, checkpoint);
  if (data.empty() && !fsys::exists(config.data.train)) {
    fail("checkpoint {}: its run's data {} is not found from {}; pass --data FILE to evaluate a file", checkpoint,
         config.data.train, fsys::current_path().string());
  }
  configure_threads({config.runtime.threads});
  PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment({f.plugin_dirs.begin(), f.plugin_dirs.end()}));
  auto strategy = host.create(kDefaultStrategy);  // evaluation runs in this one process
  RunInputs inputs = prepare_inputs(config);
  if (!inputs.first_dev()) fail("ft eval: no dev data; pass --data FILE or set data.dev / data.dev_fraction");
  const auto labels = inputs.label_names;
  std::vector<std::string> sets;  // "872 rows" or, for named dev sets, "sst2: 872 rows"
  for (const auto& d : inputs.dev) {
    sets.push_back(fmt::format("{}{} rows", d.name.empty() ? "" : d.name + ": ", d.data->size()));
  }
  const int64_t step = saved_step(dir).value_or(0);
  auto comm = Comm::create(DistEnv{});
  EventLog events(true, config.runtime.metrics_out, false);
  std::string source = data;
  if (source.empty()) {
    source = config.data.dev.empty() ? config.data.train + ", the run's dev split" : config.data.dev.files.front().path;
    if (config.data.dev.files.size() > 1) source = fmt::format("the run's {} dev sets", config.data.dev.files.size());
  }
  events.info(fmt::format("evaluating checkpoint {} (step {}) on {} ({}{}), labels {}", checkpoint, step, source,
                          fmt::join(sets, ", "),
                          inputs.skipped_rows > 0 ? fmt::format(", {} skipped", inputs.skipped_rows) : "",
                          fmt::join(labels, ", ")));
  Trainer trainer(config, std::move(inputs), strategy, kDefaultStrategy, *comm, events);
  if (unverified) note_unverified(checkpoint);
  for (const auto& [name, report] : trainer.evaluate()) {
    events.dev_set(name);
    events.eval(step, 0, report, labels);
    events.report(report, labels);
  }
  events.dev_set("");
  return 0;
}

// The inputs a window at a time: the texts given on the command line, else
// stdin's lines, read as they come (a stream is never held whole).
class InputWindows {
 public:
  explicit InputWindows(std::vector<std::string> texts) : texts_(std::move(texts)), from_stdin_(texts_.empty()) {}

  // Up to `n` more inputs (empty lines skipped) and where each came from.
  bool next(size_t n, std::vector<std::string>& lines, std::vector<std::string>& where) {
    lines.clear();
    where.clear();
    while (lines.size() < n) {
      std::string line;
      if (from_stdin_) {
        if (!std::getline(std::cin, line)) break;
        ++read_;
        if (line.empty()) continue;
        where.push_back(fmt::format("stdin line {}", read_));
      } else {
        if (read_ >= texts_.size()) break;
        line = texts_[read_++];
        where.push_back(fmt::format("input {}", read_));
      }
      lines.push_back(std::move(line));
    }
    return !lines.empty();
  }

 private:
  std::vector<std::string> texts_;
  bool from_stdin_;
  size_t read_ = 0;
};

std::vector<std::vector<double>> rows_of(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kDouble).contiguous();
  std::vector<std::vector<double>> rows;
  for (int64_t r = 0; r < d.size(0); ++r) rows.emplace_back(d[r].data_ptr<double>(), d[r].data_ptr<double>() + d.size(1));
  return rows;
}

std::vector<double> values_of(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kDouble).contiguous();
  return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
}

// A token classifier's answer for raw text: its tokens' scores (`logits`
// [tokens, labels]) grouped into entities as the pipeline groups them.
nlohmann::ordered_json entities_of(const std::string& text, const TextWords& words, const WordsEncoding& enc,
                                   const at::Tensor& logits, const Tokenizer& tok, const BertConfig& config) {
  const at::Tensor probs = logits.softmax(1).contiguous();
  TokenPredictions tp;
  tp.word_ids = enc.word_ids;
  tp.offsets = token_offsets(enc, words, tok.tokens());
  const at::Tensor best = probs.argmax(1);
  for (int64_t t = 0; t < probs.size(0); ++t) {
    tp.labels.push_back(best[t].item<int64_t>());
    const float* row = probs[t].data_ptr<float>();
    tp.scores.emplace_back(row, row + probs.size(1));
  }
  return entity_record(text, group_entities(text, tp, config.id2label));
}

struct PredictOptions {
  int max_length = 0;  // 0: the checkpoint's tokenizer_config.json, else 128
  bool logits = false;
  double threshold = 0.5;
  std::string task;  // "feature-extraction"; empty: the checkpoint's own
  int64_t batch_size = 32;
  int64_t threads = 0;  // 0: this machine's CPUs
};

int predict(const std::string& checkpoint, std::vector<std::string> texts, PredictOptions opt) {
  configure_threads({opt.threads});
  // Before loading: the head's name is the cause, whatever else the files say.
  const fsys::path config_json = fsys::path(checkpoint) / "config.json";
  if (fsys::exists(config_json)) refuse_unbuilt_head(checkpoint, BertConfig::from_json_file(config_json.string()));
  auto ckpt = load_checkpoint(checkpoint, false);
  const auto tokenizer = load_model_dir_tokenizer(checkpoint);
  if (!tokenizer) fail("checkpoint {}: neither tokenizer.json nor vocab.txt; predict needs the tokenizer", checkpoint);
  const Tokenizer& tok = *tokenizer;
  const BertConfig& config = ckpt.config;
  // Tokenise as training did: the checkpoint's model_max_length unless --max-length says otherwise.
  int max_length = opt.max_length;
  if (max_length <= 0) max_length = static_cast<int>(read_model_max_length(checkpoint).value_or(128));
  if (!opt.task.empty() && opt.task != "feature-extraction") {
    fail("ft predict --task {}: the task comes with the checkpoint; --task takes only feature-extraction (its hidden "
         "states)",
         opt.task);
  }
  // A sentence-transformers directory names BertModel too: its answer is its embedding.
  const bool features =
      !opt.task.empty() || (config.head == BertHead::kSequenceClassification && is_base_model(checkpoint));
  // As SentenceTransformer.encode: each text cut at max_seq_length.
  if (!features && config.head == BertHead::kSentenceEmbedding && config.sentence.max_seq_length > 0 &&
      opt.max_length <= 0) {
    max_length = static_cast<int>(config.sentence.max_seq_length);
  }
  EncoderModel model(config);
  apply_checkpoint_method(model, ckpt);  // its weights come with ckpt.model
  EncoderModel::LoadOptions load;
  load.head_optional = features;  // the hidden states need no head
  model.load_weights(ckpt.model, checkpoint + "/model.safetensors", load);
  if (ckpt.check == CheckpointCheck::kUnverified) note_unverified(checkpoint);  // said once it loaded
  model.eval();
  torch::NoGradGuard no_grad;
  const InferenceOutput what = features                                           ? InferenceOutput::kHiddenStates
                               : config.head == BertHead::kTokenClassification ? InferenceOutput::kPerToken
                                                                                 : InferenceOutput::kPerText;
  // Sorting by length pays within a window; a window of many batches keeps stdin streaming.
  const size_t window = static_cast<size_t>(opt.batch_size) * 16;
  InputWindows source(std::move(texts));
  std::vector<std::string> lines, where;
  bool warned = false;
  while (source.next(window, lines, where)) {
    std::vector<Encoding> enc(lines.size());
    std::vector<PredictInput> parsed(lines.size());
    std::vector<TextWords> words(lines.size());
    std::vector<WordsEncoding> word_enc(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      if (features || config.head == BertHead::kSentenceEmbedding) {
        enc[i] = tok.encode(lines[i], std::nullopt, max_length, false);
      } else if (config.head == BertHead::kTokenClassification) {
        words[i] = split_text_words(lines[i]);
        word_enc[i] = tok.encode_words(words[i].words, max_length, false);
        enc[i] = word_enc[i].encoding;
      } else {
        parsed[i] = parse_predict_input(lines[i], config, where[i]);
        if (parsed[i].text_pair && !config.text_pair && !warned) {
          warned = true;
          std::fprintf(stderr, "ft: note: %s is read as a sentence pair, but %s was trained on single texts\n",
                       where[i].c_str(), checkpoint.c_str());
        }
        std::optional<std::string_view> pair;
        if (parsed[i].text_pair) pair = *parsed[i].text_pair;
        enc[i] = tok.encode(parsed[i].text, pair, max_length, false);
      }
    }
    const auto out = infer_batched(model, enc, tok.pad_id(), opt.batch_size, what);
    for (size_t i = 0; i < lines.size(); ++i) {
      nlohmann::ordered_json line;
      if (what == InferenceOutput::kHiddenStates) {
        line["text"] = lines[i];
        line["last_hidden_state"] = rows_of(out[i]);
      } else if (what == InferenceOutput::kPerToken) {
        line = entities_of(lines[i], words[i], word_enc[i], out[i], tok, config);
      } else if (config.head == BertHead::kSentenceEmbedding) {
        line["text"] = lines[i];
        line["embedding"] = values_of(out[i]);
      } else {
        line = prediction_record(parsed[i], out[i], config, opt.threshold, opt.logits);
      }
      std::cout << line.dump() << "\n";
    }
    std::cout.flush();  // a window's answers reach a pipe before the next window is read
  }
  return 0;
}

}  // namespace

// A checkpoint of a task ft has no head for would load as something else.
void refuse_unbuilt_head(const std::string& checkpoint, const BertConfig& c) {
  if (c.unbuilt_head.empty()) return;
  fail("checkpoint {}: its architecture {} is a head ft does not build; ft runs {} and {} (fine-tune its encoder "
       "with ft run --set model.config={})",
       checkpoint, c.unbuilt_head, head_names(c, BertHead::kSequenceClassification).architecture,
       head_names(c, BertHead::kTokenClassification).architecture, checkpoint);
}

bool is_base_model(const fsys::path& dir) {
  if (!fsys::exists(dir / "config.json")) return false;
  const auto j = nlohmann::json::parse(fs::read_file(dir / "config.json"), nullptr, false);
  if (j.is_discarded() || !j.contains("architectures") || !j.at("architectures").is_array()) return false;
  for (const auto& a : j.at("architectures")) {
    const std::string name = a.is_string() ? a.get<std::string>() : "";
    if (name.size() > 5 && name.compare(name.size() - 5, 5, "Model") == 0 && name.find("For") == std::string::npos)
      return true;
  }
  return false;
}

void add_eval_predict_commands(CLI::App& app, int& exit_code) {
  struct EvalFlags {
    ConfigFlags config;
    std::string checkpoint, data;
    std::string text_field, label_field, pair_field;  // empty: the run's (data.*_field)
    int max_length = 0;  // 0: the checkpoint's tokenizer_config.json, else the config's data.max_seq_len
  };
  auto ef = std::make_shared<EvalFlags>();
  auto* eval = app.add_subcommand("eval", "evaluate a saved checkpoint (its labels, tokenizer and run come with it)");
  add_config_flags(*eval, ef->config, false);
  eval->get_option("--config")->description("run config YAML (default: the checkpoint's training_state/run.yaml)");
  eval->add_option("--checkpoint", ef->checkpoint, "checkpoint directory")->required();
  eval->add_option("--data", ef->data,
                   "evaluate every row of this file, labels mapped by name to the checkpoint's (default: the run's dev split)");
  eval->add_option("--max-length", ef->max_length,
                   "truncate inputs to this many tokens (default: the checkpoint's model_max_length)");
  eval->add_option("--text-field", ef->text_field, "the field or column holding the text (data.text_field; default: the run's)");
  eval->add_option("--label-field", ef->label_field, "the field or column holding the label (data.label_field)");
  eval->add_option("--pair-field", ef->pair_field, "the field or column holding a pair's second text (data.pair_field)");
  eval->callback([ef, &exit_code] {
    ConfigFlags flags = ef->config;
    // As their --set forms, which the checkpoint's own settings never override.
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"data.text_field", &ef->text_field},
                                     {"data.label_field", &ef->label_field},
                                     {"data.pair_field", &ef->pair_field}}) {
      if (!value->empty()) flags.overrides.push_back(std::string(key) + "=" + *value);
    }
    exit_code = evaluate_checkpoint(flags, ef->checkpoint, ef->data, ef->max_length);
  });

  struct PredictFlags {
    std::string checkpoint;
    std::vector<std::string> texts;
    PredictOptions options;
  };
  auto pf = std::make_shared<PredictFlags>();
  auto* pred = app.add_subcommand(
      "predict", "text in (a line, text<TAB>text_pair or {\"text\", \"text_pair\"}), the model's answer out (JSON Lines)");
  pred->add_option("--checkpoint", pf->checkpoint, "checkpoint directory")->required();
  pred->add_option("--max-length", pf->options.max_length, "truncate inputs to this many tokens (default: the checkpoint's model_max_length, else 128)");
  pred->add_option("texts", pf->texts, "inputs, each as a stdin line would be (default: one per line on stdin)");
  pred->add_flag("--logits", pf->options.logits, "also print the raw logits (what transformers' model(...).logits gives)");
  pred->add_option("--threshold", pf->options.threshold, "multi-label: a label is predicted when its sigmoid reaches this")
      ->check(CLI::Range(0.0, 1.0));
  pred->add_option("--task", pf->options.task,
                   "feature-extraction: the encoder's last_hidden_state per token, whatever head the checkpoint has "
                   "(the default for a base model, BertModel ...)");
  pred->add_option("--batch-size", pf->options.batch_size,
                   "inputs per forward pass: sorted by length, padded to their batch's longest (default 32)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  pred->add_option("--threads", pf->options.threads, "intra-op threads (default: this machine's CPUs)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  pred->callback([pf, &exit_code] {
    exit_code = predict(pf->checkpoint, pf->texts, pf->options);
  });
}

}  // namespace ft::app
