// `ft features extract` runs a trained encoder once over a data set and
// writes the pooled features (safetensors); `ft features train` trains a new
// classifier on them — the seeds' "features extracted by the big model and a
// small model trained on them" — and writes a full checkpoint (the source
// encoder + that classifier) that ft eval / ft predict load.
#include <chrono>
#include <iostream>
#include <memory>
#include <random>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "commands.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/config/config.h"
#include "ft/base/error.h"
#include "ft/observe/metrics.h"
#include "ft/model/model.h"
#include "ft/optim/optim.h"
#include "ft/optim/param_plan.h"
#include "ft/tasks/run_inputs.h"
#include "ft/train/runtime.h"
#include "ft/io/safetensors.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft/train/trainer.h"
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

// The classifier: logits of features `x` through weight [labels, d] and bias.
ClassificationReport evaluate_head(const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& x,
                                   const at::Tensor& y, int64_t labels) {
  torch::NoGradGuard no_grad;
  const at::Tensor logits = at::linear(x, weight, bias);
  const double loss = at::cross_entropy_loss(logits, y).item<double>();
  const at::Tensor pred = logits.argmax(1);
  std::vector<int64_t> p(pred.data_ptr<int64_t>(), pred.data_ptr<int64_t>() + pred.numel());
  std::vector<int64_t> t(y.data_ptr<int64_t>(), y.data_ptr<int64_t>() + y.numel());
  return report_from_confusion(confusion_matrix(p, t, labels), loss);
}

int train_head(const ConfigFlags& flags, const std::string& features, const std::string& output_dir) {
  const TensorList tensors = safetensors::load(features);
  const auto meta = safetensors::metadata(features);
  auto get = [&](const std::string& name) {
    for (const auto& [n, t] : tensors)
      if (n == name) return t;
    return at::Tensor();
  };
  const at::Tensor x = get("train_features"), y = get("train_labels"), dev_x = get("dev_features"), dev_y = get("dev_labels");
  if (!x.defined() || !y.defined()) fail("{}: no train_features / train_labels (write it with `ft features extract`)", features);
  if (meta.find("source") == meta.end()) fail("{}: metadata 'source' (the encoder's checkpoint) is missing", features);
  const std::string source = meta.at("source");
  RunConfig config = load_run_config(flags);
  const TrainConfig& t = config.train;
  configure_threads({config.runtime.threads});
  // Only the checkpoint's tensors and config are needed here: no model is built.
  LoadedCheckpoint ckpt = load_checkpoint(source, false);
  const int64_t labels = ckpt.config.num_labels, d = x.size(1);
  at::manual_seed(static_cast<uint64_t>(t.seed));
  // The new classifier under the checkpoint's own names, updated by ft's
  // optimizer with the run's settings and HF's decay rule, as the Trainer
  // updates a model.
  const HeadNames classifier = head_names(ckpt.config, BertHead::kSequenceClassification);
  at::Tensor weight = at::empty({labels, d}).normal_(0.0, ckpt.config.initializer_range).requires_grad_(true);
  at::Tensor bias = at::zeros({labels}).requires_grad_(true);
  const TensorList params{{classifier.output_weight, weight}, {classifier.output_bias, bias}};
  TensorOptimizer opt(optimizer_spec(t),
                      slots_from_plan(params, default_param_plan(params, t.weight_decay, t.decay_bias_and_norm)));
  const int64_t n = x.size(0), steps_per_epoch = (n + t.batch_size - 1) / t.batch_size;
  const int64_t total = t.max_steps > 0 ? t.max_steps : t.epochs * steps_per_epoch;
  const int64_t warmup = t.warmup_steps > 0 ? t.warmup_steps : static_cast<int64_t>(std::ceil(t.warmup_ratio * total));
  const double dropout = ckpt.config.hidden_dropout_prob;
  std::mt19937_64 rng(static_cast<uint64_t>(t.seed));
  const auto t0 = Clock::now();
  int64_t step = 0;
  for (int64_t epoch = 0; step < total; ++epoch) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    if (t.shuffle) std::shuffle(order.begin(), order.end(), rng);
    const at::Tensor perm = at::tensor(order, at::kLong);
    for (int64_t b = 0; b < n && step < total; b += t.batch_size, ++step) {
      const at::Tensor idx = perm.narrow(0, b, std::min(t.batch_size, n - b));
      // The classification head's dropout on the pooled features, as in fine-tuning.
      const at::Tensor in = at::dropout(x.index_select(0, idx), dropout, true);
      const at::Tensor loss = at::cross_entropy_loss(at::linear(in, weight, bias), y.index_select(0, idx));
      for (const auto& [name, p] : params) {
        if (p.grad().defined()) p.mutable_grad().zero_();
      }
      loss.backward();
      const std::vector<at::Tensor> grads{weight.grad(), bias.grad()};
      if (t.max_grad_norm > 0) clip_grads(grads, std::sqrt(grad_norm_squared(grads)), t.max_grad_norm);
      opt.step(scheduled_lr(t, step, total, warmup), grads);
    }
    if (dev_x.defined()) {
      const auto r = evaluate_head(weight, bias, dev_x, dev_y, labels);
      std::cout << fmt::format("epoch {} step {}: dev loss {:.4f} accuracy {:.4f} macro_f1 {:.4f}\n", epoch + 1, step,
                               r.loss, r.accuracy, r.macro_f1);
    }
  }
  const double seconds = since(t0);
  // The source model with the new classifier: a checkpoint like any other.
  CheckpointData data;
  data.config = ckpt.config;
  for (auto& [name, tensor] : ckpt.model) {
    if (name == classifier.output_weight) tensor = weight.detach().clone();
    if (name == classifier.output_bias) tensor = bias.detach().clone();
  }
  data.model = ckpt.model;
  if (ckpt.lora) data.lora = ckpt.lora, data.base_model = source;
  if (ckpt.adapter) data.adapter = ckpt.adapter;
  if (ckpt.prompt_learning) data.prompt_learning = ckpt.prompt_learning, data.base_model = source;
  // Whatever tokenizer the source ships (vocab.txt, tokenizer.json, a
  // SentencePiece model), so the new checkpoint reads text like the source.
  const std::shared_ptr<const Tokenizer> tok = load_model_dir_tokenizer(source);
  if (tok) {
    data.tokenizer = tok.get();
    data.model_max_length = read_model_max_length(source).value_or(0);
  }
  const fsys::path out = fsys::path(output_dir) / "final";
  save_checkpoint(out, data);
  const std::string extract_s = meta.count("extract_seconds") ? meta.at("extract_seconds") : "?";
  std::cout << fmt::format("trained the classifier ({} parameters) on {} rows x {} features: {} steps in {:.2f} s "
                           "(features extracted in {} s); saved {}\n",
                           weight.numel() + bias.numel(), n, d, step, seconds, extract_s, out.string());
  return 0;
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
