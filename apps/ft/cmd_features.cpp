// `ft features extract` runs a trained encoder once over a data set and
// writes the pooled features (safetensors); `ft features train` trains a new
// classifier on them through the Trainer — the seeds' "features extracted by
// the big model and a small model trained on them" — and writes full
// checkpoints (the source encoder + that classifier) that ft eval / ft
// predict load.
#include <chrono>
#include <iostream>
#include <map>
#include <memory>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "commands.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/config/config.h"
#include "ft/base/error.h"
#include "ft/data/data.h"
#include "ft/model/model.h"
#include "ft/tasks/predictions.h"
#include "ft/tasks/run_inputs.h"
#include "ft/train/runtime.h"
#include "ft/io/safetensors.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft/train/tuning_method.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The checkpoint's model with its LoRA, adapters or virtual tokens, in eval mode.
std::shared_ptr<EncoderModel> load_model(const std::string& checkpoint, LoadedCheckpoint& ckpt) {
  ckpt = load_checkpoint(checkpoint, false);
  auto model = std::make_shared<EncoderModel>(ckpt.config);
  apply_checkpoint_method(*model, ckpt);
  model->load_weights(ckpt.model, checkpoint + "/model.safetensors");
  model->eval();
  return model;
}

// Pooled features and labels of every row of `data`, in batches of `batch`.
std::pair<at::Tensor, at::Tensor> extract(EncoderModel& model, const Dataset& data, int64_t batch) {
  std::vector<at::Tensor> feats;
  std::vector<int64_t> all;
  torch::NoGradGuard no_grad;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    std::vector<int64_t> rows;
    for (int64_t r = begin; r < std::min(begin + batch, data.size()); ++r) rows.push_back(r);
    const Batch b = data.collate(rows);
    feats.push_back(model.pooled_output(b));
    for (int64_t i = 0; i < b.labels.size(0); ++i) all.push_back(b.labels[i].item<int64_t>());
  }
  return {at::cat(feats), at::tensor(all, at::kLong)};
}

int extract_features(const ConfigFlags& flags, const std::string& checkpoint, const std::string& out) {
  if (!fsys::is_directory(checkpoint)) fail("checkpoint {}: not a directory", checkpoint);
  ConfigFlags f = flags;
  if (auto len = read_model_max_length(checkpoint)) f.overrides.insert(f.overrides.begin(), fmt::format("data.max_seq_len={}", *len));
  f.overrides.push_back("model.config=" + checkpoint);
  f.overrides.push_back("model.weights=" + checkpoint);
  f.overrides.push_back("strategy.name=single");
  RunConfig config = load_run_config(f);
  if (config.data.vocab.empty() && fsys::exists(fsys::path(checkpoint) / "vocab.txt")) {
    config.data.vocab = (fsys::path(checkpoint) / "vocab.txt").string();
  }
  configure_threads({config.runtime.threads});
  LoadedCheckpoint ckpt;
  auto model = load_model(checkpoint, ckpt);
  RunInputs inputs = prepare_inputs(config);
  const int64_t batch = config.train.eval_batch_size > 0 ? config.train.eval_batch_size : config.train.batch_size;
  const auto t0 = Clock::now();
  auto [train_x, train_y] = extract(*model, *inputs.train, batch);
  TensorList tensors{{"train_features", train_x}, {"train_labels", train_y}};
  int64_t dev_rows = 0;
  for (const auto& dev : inputs.dev) {  // named dev sets: dev_<name>_features, ...
    auto [dev_x, dev_y] = extract(*model, *dev.data, batch);
    const std::string prefix = dev.name.empty() ? "dev" : "dev_" + dev.name;
    dev_rows += dev_x.size(0);
    tensors.emplace_back(prefix + "_features", dev_x);
    tensors.emplace_back(prefix + "_labels", dev_y);
  }
  const double seconds = since(t0);
  const nlohmann::json labels = inputs.label_names;
  safetensors::save(out, tensors,
                    {{"format", "pt"},
                     {"source", checkpoint},
                     {"pooling", head_names(model->config(), BertHead::kSequenceClassification).features},
                     {"labels", labels.dump()},
                     {"extract_seconds", fmt::format("{:.3f}", seconds)}});
  std::cout << fmt::format("wrote {}: {} train / {} dev rows x {} features from {} in {:.2f} s\n", out, train_x.size(0),
                           dev_rows, train_x.size(1), checkpoint, seconds);
  return 0;
}

// The extracted rows of `file` under `prefix` ("train", "dev", "dev_<name>"),
// or null when the file has none.
std::unique_ptr<Dataset> feature_rows(const std::map<std::string, at::Tensor>& tensors, const std::string& file,
                                      const std::string& prefix, int64_t labels) {
  auto x = tensors.find(prefix + "_features"), y = tensors.find(prefix + "_labels");
  if (x == tensors.end() && y == tensors.end()) return nullptr;
  if (x == tensors.end() || y == tensors.end()) {
    fail("{}: {}_features and {}_labels come together; write the file with `ft features extract`", file, prefix, prefix);
  }
  return make_feature_dataset(x->second, y->second, labels, fmt::format("{} ({} rows)", file, prefix));
}

// The source checkpoint with its method and weights, and a new output
// projection drawn as the model draws a fresh classifier (seeded).
std::shared_ptr<EncoderModel> source_model(const LoadedCheckpoint& ckpt, const std::string& source, int64_t seed) {
  auto model = std::make_shared<EncoderModel>(ckpt.config);
  apply_checkpoint_method(*model, ckpt);
  model->load_weights(ckpt.model, source + "/model.safetensors");
  const HeadNames head = head_names(ckpt.config, BertHead::kSequenceClassification);
  at::manual_seed(static_cast<uint64_t>(seed));
  torch::NoGradGuard no_grad;
  int found = 0;
  for (auto& p : model->named_parameters()) {
    if (p.key() == head.output_weight) p.value().normal_(0.0, ckpt.config.initializer_range), ++found;
    if (p.key() == head.output_bias) p.value().zero_(), ++found;
  }
  if (found != 2) fail("{}: no {} / {} to train", source, head.output_weight, head.output_bias);
  return model;
}

// A new classifier on extracted features, trained by the Trainer like any
// run (strategies, schedule, clipping, evaluation, early stopping, metrics,
// report, checkpoints): the model is the source checkpoint whose output
// projection alone trains, on batches of features instead of tokens.
int train_head(const ConfigFlags& flags, const std::string& features, const std::string& output_dir) {
  const auto meta = safetensors::metadata(features);
  if (meta.find("source") == meta.end()) fail("{}: metadata 'source' (the encoder's checkpoint) is missing", features);
  const std::string source = meta.at("source");
  if (!fsys::is_directory(source)) fail("{}: its source checkpoint {} is not a directory", features, source);
  ConfigFlags f = flags;
  if (auto len = read_model_max_length(source)) f.overrides.insert(f.overrides.begin(), fmt::format("data.max_seq_len={}", *len));
  f.overrides.push_back("model.config=" + source);
  f.overrides.push_back("model.weights=" + source);
  f.overrides.push_back("train.output_dir=" + output_dir);
  RunConfig config = load_run_config(f);
  use_checkpoint_method(config, source);  // the new checkpoint records the source's LoRA, adapters or prompts
  const PrepareInputs prepare = [&](const RunConfig& c) {
    std::map<std::string, at::Tensor> tensors;
    for (auto& [name, t] : safetensors::load(features)) tensors[name] = t;
    const LoadedCheckpoint ckpt = load_checkpoint(source, false);
    RunInputs in;
    in.model_config = ckpt.config;
    in.weights_source = source;
    in.model = source_model(ckpt, source, c.train.seed);
    const HeadNames head = head_names(ckpt.config, BertHead::kSequenceClassification);
    in.trainable = [head](const std::string& name) { return name == head.output_weight || name == head.output_bias; };
    in.tokenizer = load_model_dir_tokenizer(source);
    const int64_t labels = ckpt.config.num_labels;
    in.train = feature_rows(tensors, features, "train", labels);
    if (!in.train) fail("{}: no train_features / train_labels (write it with `ft features extract`)", features);
    if (auto dev = feature_rows(tensors, features, "dev", labels)) in.dev.push_back({"", std::move(dev)});
    for (const auto& [name, t] : tensors) {  // named sets: dev_<name>_features
      const std::string suffix = "_features";
      if (name.rfind("dev_", 0) != 0 || name.size() <= 4 + suffix.size() || name.substr(name.size() - suffix.size()) != suffix) continue;
      const std::string set = name.substr(4, name.size() - 4 - suffix.size());
      in.dev.push_back({set, feature_rows(tensors, features, "dev_" + set, labels)});
    }
    for (int64_t i = 0; i < labels; ++i) in.label_names.push_back(label_name(ckpt.config, i));
    in.notes.push_back(fmt::format("features of {} ({} x {}, pooled by {}): only {} and {} train", source,
                                   in.train->size(), tensors.at("train_features").size(1),
                                   meta.count("pooling") ? meta.at("pooling") : std::string("the head"),
                                   head.output_weight, head.output_bias));
    return in;
  };
  return run_training(config, flags.plugin_dirs, {}, fmt::format("ft features train --features {} --output-dir {}", features, output_dir),
                      prepare);
}

}  // namespace

void add_features_command(CLI::App& app, int& exit_code) {
  struct Flags {
    ConfigFlags config;
    std::string checkpoint, out, features, output_dir;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("features", "feature extraction: pooled encoder features, and a classifier trained on them");
  cmd->require_subcommand(1);
  auto* ex = cmd->add_subcommand("extract", "run a checkpoint's encoder over the config's train/dev data; write pooled features");
  add_config_flags(*ex, f->config);
  ex->add_option("--checkpoint", f->checkpoint, "the encoder (a checkpoint directory)")->required();
  ex->add_option("--out", f->out, "features file (.safetensors)")->required();
  ex->callback([f, &exit_code] { exit_code = extract_features(f->config, f->checkpoint, f->out); });
  auto* tr = cmd->add_subcommand("train", "train a classifier on extracted features (train.* keys of the config)");
  add_config_flags(*tr, f->config);
  tr->add_option("--features", f->features, "a file from `ft features extract`")->required();
  tr->add_option("--output-dir", f->output_dir, "where <dir>/final (encoder + new classifier) goes")->required();
  tr->callback([f, &exit_code] { exit_code = train_head(f->config, f->features, f->output_dir); });
}

}  // namespace ft::app
