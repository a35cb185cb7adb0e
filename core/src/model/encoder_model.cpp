// EncoderModel (ft/model/model.h): the pair of a backbone (backbone.h) and a head (heads/head.h),
// its unit structure, forward, prompt learning and initialisation.
#include "ft/model/model.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/init.h>

#include <fmt/ranges.h>

#include "ft/model/activation_checkpoint.h"
#include "ft/base/error.h"
#include "model/encoder_parts.h"

namespace ft {
namespace {

// The batch as the encoder reads it. Under prompt tuning, P virtual-token
// columns come first, as PEFT prepends the prompt to inputs_embeds: ids
// vocab_size + p (the embeddings substitute the prompt's rows), attended,
// token type 0. Either method moves the real tokens' positions up by P.
Batch encoder_input(const Batch& batch, const BertConfig& config, int64_t prompt, int64_t prefix) {
  const int64_t virtual_tokens = prompt + prefix, seq = batch.input_ids.size(1);
  if (virtual_tokens > 0 && seq + virtual_tokens > config.max_tokens()) {
    fail("model: {} tokens after {} virtual tokens (prompt or prefix tuning) need {} positions, but "
         "the model has {}; cut the input to {} tokens (data.max_seq_len, ft predict --max-length)",
         seq, virtual_tokens, seq + virtual_tokens, config.max_tokens(), config.max_tokens() - virtual_tokens);
  }
  if (prompt == 0) return batch;
  const int64_t rows = batch.input_ids.size(0);
  auto columns = [&](const at::Tensor& like, const at::Tensor& values) {
    return at::cat({values.to(like.options()).expand({rows, prompt}), like}, 1);
  };
  Batch out = batch;
  out.input_ids = columns(batch.input_ids, at::arange(config.vocab_size, config.vocab_size + prompt).view({1, prompt}));
  out.attention_mask = columns(batch.attention_mask, at::ones({1, prompt}));
  out.token_type_ids = columns(batch.token_type_ids, at::zeros({1, prompt}));
  if (batch.positions.defined()) {  // each row's columns moved right by P
    out.positions = batch.positions + (at::floor_divide(batch.positions, seq) + 1) * prompt;
  }
  return out;
}

}  // namespace

using namespace model_detail;

EncoderModel::EncoderModel(const BertConfig& config) : config_(config), parts_(std::make_unique<Parts>()) {
  config_.validate("model config");
  parts_->backbone = &backbone_of(config_.model_type, "model config");
  parts_->base = register_module(parts_->backbone->family().base, parts_->backbone->build(config_));
  parts_->head = make_head(config_.head, *this, *parts_->base, config_);
  init_weights();
}

EncoderModel::~EncoderModel() = default;

int EncoderModel::num_units() const {
  return static_cast<int>(config_.num_hidden_layers) + 2;
}

std::shared_ptr<torch::nn::Module> EncoderModel::unit(int index) const {
  if (index == 0) return parts_->base->embeddings;
  if (index == num_units() - 1) return parts_->head->unit();
  return parts_->base->layers.at(index - 1);
}

void EncoderModel::set_word_lookup(std::function<at::Tensor(const at::Tensor&)> lookup) {
  parts_->base->embeddings->sharded_lookup = std::move(lookup);
}

std::vector<int> EncoderModel::units_read_by(int index) const {
  if (parts_->head->reads_word_embeddings() && index == num_units() - 1) return {0};
  return {};
}

std::string EncoderModel::unit_prefix(int index) const {
  const EncoderFamily& family = config_.family();
  if (index == 0) return family.prefix() + "embeddings.";
  if (index == num_units() - 1) return "";  // bert.pooler.* and classifier.*, cls.predictions.*, lm_head.*
  return family.layer_prefix(index - 1);
}

int EncoderModel::unit_of(const std::string& name) const {
  const std::string base = config_.family().prefix();
  if (name.rfind(base + "embeddings.", 0) == 0) return 0;
  for (const auto& module : config_.family().embedding_unit_modules)
    if (name.rfind(base + module, 0) == 0) return 0;
  const std::string layer_prefix = base + config_.family().layers + ".";
  if (name.rfind(layer_prefix, 0) == 0) {
    return 1 + std::stoi(name.substr(layer_prefix.size()));
  }
  return num_units() - 1;
}

std::shared_ptr<const TokenLayout> EncoderModel::layout_of(const Batch& batch) const {
  auto layout = std::make_shared<TokenLayout>(padding_free_ ? TokenLayout::packed(batch.attention_mask)
                                                            : TokenLayout::padded(batch.attention_mask));
  layout->attention = attention_;
  return layout;
}

at::Tensor EncoderModel::pooled_output(const Batch& input) {
  parts_->head->check_features();
  const Batch batch = encoder_input(input, config_, prompt_length(), prefix_length());
  const auto layout = layout_of(batch);
  auto& base = *parts_->base;
  at::Tensor x = base.embeddings->forward(layout->gather_tokens(batch.input_ids),
                                          layout->gather_tokens(batch.token_type_ids), *layout);
  for (auto& layer : base.layers) x = layer->forward(x, *layout);
  return parts_->head->features(x, batch, *layout).to(at::kFloat);
}

at::Tensor EncoderModel::last_hidden_state(const Batch& input) {
  const Batch batch = encoder_input(input, config_, prompt_length(), prefix_length());
  auto layout = std::make_shared<TokenLayout>(TokenLayout::padded(batch.attention_mask));
  layout->attention = attention_;
  auto& base = *parts_->base;
  at::Tensor x = base.embeddings->forward(layout->gather_tokens(batch.input_ids),
                                          layout->gather_tokens(batch.token_type_ids), *layout);
  for (auto& layer : base.layers) x = layer->forward(x, *layout);
  x = x.narrow(0, 0, layout->tokens);  // without DeBERTa's carried table rows
  if (base.final_norm) x = base.final_norm(x);
  return x.to(at::kFloat).view({layout->rows, layout->seq, -1});
}

std::vector<int64_t> EncoderModel::logits_shape(const Batch& batch) const {
  return parts_->head->logits_shape(batch, config_);
}

at::Tensor EncoderModel::forward(const Batch& input) {
  UnitRunner& run = runner_ ? *runner_ : parts_->direct;
  if (input.features.defined()) {  // extracted features: the encoder ran when they were written
    Head& head = *parts_->head;
    return run
        .run(num_units() - 1, RunPass::kPlain, input.features, [&](const at::Tensor& f) { return head.from_features(f); })
        .to(at::kFloat);
  }
  const Batch batch = encoder_input(input, config_, prompt_length(), prefix_length());
  // Shared: with checkpointing, layers run again in backward and need it then.
  auto layout = layout_of(batch);
  auto& base = *parts_->base;
  auto x = run.run(0, RunPass::kPlain, layout->gather_tokens(batch.input_ids), [&](const at::Tensor& ids) {
    return base.embeddings->forward(ids, layout->gather_tokens(batch.token_type_ids), *layout);
  });
  Head& head = *parts_->head;
  const int layers = static_cast<int>(base.layers.size());
  // Inference (ft predict, ft eval, evaluation) with a [CLS] head, in one
  // process: the last layer gives the first tokens alone. Training keeps
  // every row, so that dropout draws the same masks as ever.
  const bool firsts = !at::GradMode::is_enabled() && runner_ == nullptr && layers > 0 && head.reads_first_tokens_only();
  for (int i = 0; i < layers; ++i) {
    if (firsts && i == layers - 1) {
      x = base.layers[i]->forward_first_tokens(x, *layout);
      break;
    }
    auto layer_unit = [runner = &run, layer = base.layers[i], layout, i](const at::Tensor& h, RunPass pass) {
      return runner->run(i + 1, pass, h, [&](const at::Tensor& in) { return layer->forward(in, *layout); });
    };
    x = checkpointing_ && run.computes(i + 1) ? checkpoint(x, base.layers[i]->parameters(), layer_unit)
                                              : layer_unit(x, RunPass::kPlain);
  }
  head.check(batch);
  const TokenLayout head_layout = firsts ? layout->first_tokens_only() : *layout;
  const at::Tensor logits = run.run(num_units() - 1, RunPass::kPlain, x,
                                    [&](const at::Tensor& h) { return head.forward(h, batch, head_layout); });
  return logits.to(at::kFloat);
}

void EncoderModel::add_prompt_embeddings(const at::Tensor& prompt) {
  auto& e = *parts_->base->embeddings;
  if (prompt_length() > 0 || prefix_length() > 0) fail("model: prompt learning is applied already (applied twice?)");
  if (config_.embedding_width() != config_.hidden_size) {
    // PEFT sizes the prompt by hidden_size and adds it to the word embeddings: it cannot run on such a model either.
    fail("prompt tuning: this {} model's embeddings are {} wide and its layers {}; prompt tuning needs them equal "
         "(prefix tuning and LoRA work)",
         config_.model_type, config_.embedding_width(), config_.hidden_size);
  }
  if (prompt.dim() != 2 || prompt.size(0) < 1 || prompt.size(1) != config_.hidden_size) {
    fail("model: prompt embeddings must be [P, {}], got {}", config_.hidden_size, fmt::join(prompt.sizes(), "x"));
  }
  const auto opts = e.word_embeddings->weight.options();
  e.prompt = e.register_parameter("prompt_embeddings", prompt.detach().to(opts, /*non_blocking=*/false, /*copy=*/true));
}

void EncoderModel::add_attention_prefix(const std::vector<at::Tensor>& keys,
                                                         const std::vector<at::Tensor>& values) {
  auto& base = *parts_->base;
  if (prompt_length() > 0 || prefix_length() > 0) fail("model: prompt learning is applied already (applied twice?)");
  if (!config_.family().prefix_tuning) {
    fail("prefix tuning: {} takes no past key values in transformers, so PEFT cannot prefix-tune it, and ft does not "
         "either (prompt tuning and LoRA work)",
         config_.model_type);
  }
  if (keys.size() != base.layers.size() || values.size() != base.layers.size()) {
    fail("model: a prefix needs keys and values for each of the {} layers, got {} and {}", base.layers.size(),
         keys.size(), values.size());
  }
  const int64_t length = keys.empty() ? 0 : keys[0].size(0);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (const at::Tensor* t : {&keys[i], &values[i]}) {
      if (t->dim() != 2 || t->size(0) != length || length < 1 || t->size(1) != config_.hidden_size) {
        fail("model: layer {}'s prefix must be [P, {}] like layer 0's, got {}", i, config_.hidden_size,
             fmt::join(t->sizes(), "x"));
      }
    }
    base.layers[i]->add_prefix(keys[i], values[i]);
  }
  base.embeddings->position_offset = length;
}

int64_t EncoderModel::prompt_length() const {
  const at::Tensor& p = parts_->base->embeddings->prompt;
  return p.defined() ? p.size(0) : 0;
}

int64_t EncoderModel::prefix_length() const { return parts_->base->embeddings->position_offset; }

void EncoderModel::init_weights() {
  torch::NoGradGuard no_grad;
  const double std = config_.initializer_range;
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    const bool is_norm = is_layer_norm_parameter(name);
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm) {
      is_bias ? p.zero_() : p.fill_(1.0);
    } else if (is_bias) {
      p.zero_();
    } else {
      p.normal_(0.0, std);
    }
  }
  // Every embedding with a padding row starts it at zero, as transformers does.
  for (const auto* table : {&parts_->base->embeddings->word_embeddings, &parts_->base->embeddings->position_embeddings}) {
    if (!*table) continue;  // DeBERTa-v3 has no absolute positions
    const auto& pad = (*table)->options.padding_idx();
    if (pad && *pad >= 0 && *pad < (*table)->weight.size(0)) (*table)->weight[*pad].zero_();
  }
  parts_->backbone->init(named_parameters(), config_);
}

std::vector<TensorList> EncoderModel::unit_parameters() const {
  std::vector<TensorList> units(num_units());
  for (const auto& item : named_parameters()) units[unit_of(item.key())].emplace_back(item.key(), item.value());
  return units;
}

TensorList EncoderModel::weights() const {
  TensorList out;
  for (const auto& item : named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace ft
