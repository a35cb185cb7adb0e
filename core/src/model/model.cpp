// BertForSequenceClassification: building, unit structure, forward, prompt
// learning and initialisation over the modules of bert_modules.h.
#include "ft/model.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/init.h>

#include <fmt/ranges.h>

#include "bert_modules.h"
#include "ft/activation_checkpoint.h"
#include "ft/error.h"
#include "text_affix.h"

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
  if (batch.mlm_positions.defined()) {  // each row's columns moved right by P
    out.mlm_positions = batch.mlm_positions + (at::floor_divide(batch.mlm_positions, seq) + 1) * prompt;
  }
  return out;
}

// Normal(0, std) truncated at +-cutoff std, by the inverse CDF of a uniform
// draw (as torch.nn.init.trunc_normal_ samples it).
void truncated_normal(at::Tensor& t, double std, double cutoff) {
  const double edge = std::erf(cutoff / std::sqrt(2.0));  // 2 Phi(cutoff) - 1
  t.uniform_(-edge, edge).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-cutoff * std, cutoff * std);
}

// ModernBERT's initialisation, over the generic one: every weight matrix
// truncated normal, the layers' output projections scaled down by
// sqrt(2 layers), the classifier by sqrt(hidden). transformers overwrites the
// whole word table here, padding row included, and so does ft.
void init_modern(const torch::OrderedDict<std::string, at::Tensor>& params, const BertConfig& c) {
  const double in = c.initializer_range, out = in / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  for (const auto& item : params) {
    const std::string& name = item.key();
    at::Tensor p = item.value();
    if (p.dim() != 2) continue;  // norms and biases keep the generic start
    double std = in;
    if (ends_with(name, ".Wo.weight") || name == "head.dense.weight") std = out;
    if (name == "classifier.weight") std = 1.0 / std::sqrt(static_cast<double>(c.hidden_size));
    truncated_normal(p, std, c.modern.cutoff_factor);
  }
}

}  // namespace

using namespace model_detail;

BertForSequenceClassification::BertForSequenceClassification(const BertConfig& config)
    : config_(config), parts_(std::make_unique<Parts>()) {
  config_.validate("model config");
  const EncoderFamily& family = config_.family();
  parts_->bert = register_module(family.base, std::make_shared<BertModelImpl>(config_));
  if (config_.head == BertHead::kMaskedLM && !family.has_masked_lm()) {
    fail("model config: ft builds no masked-LM head for {} ({}); fine-tune it as a classifier, or pretrain a bert, "
         "roberta, distilbert, deberta-v2 or modernbert model",
         config_.model_type, family.architecture(true));
  }
  if (config_.head == BertHead::kMaskedLM) {
    auto mlm = std::make_shared<MaskedLmHeadImpl>(config_, parts_->bert->embeddings);
    if (family.modern_layer) {  // ModernBertForMaskedLM's order: head, then decoder
      register_at(*this, "head.dense", mlm->dense.ptr());
      register_at(*this, "head.norm", mlm->norm.ptr());
      mlm->final_norm = parts_->bert->final_norm;
    } else if (family.mlm_top_level()) {  // DistilBERT, in DistilBertForMaskedLM's order
      register_module("vocab_transform", mlm->dense);
      register_module("vocab_layer_norm", mlm->norm);
    }
    parts_->mlm = register_at(*this, family.mlm_head, mlm);  // "cls.predictions": a holder, then the head
    parts_->head_unit = parts_->mlm;
    if (family.modern_layer) {  // the unit also owns the base model's final norm, which the head applies
      parts_->head_unit = std::make_shared<torch::nn::Module>();
      parts_->head_unit->register_module("final_norm", mlm->final_norm);
      parts_->head_unit->register_module("mlm", parts_->mlm);
    }
  } else if (family.classifier == ClassifierStyle::kPredictionHead) {
    auto dense = register_at(*this, "head.dense", Linear(config_.hidden_size, config_.hidden_size, config_.modern.classifier_bias).ptr());
    auto norm = register_at(*this, "head.norm", make_layer_norm(config_, config_.hidden_size, config_.modern.norm_bias).ptr());
    auto dropout = register_module("drop", Dropout(config_.head_dropout()));
    auto classifier = register_module("classifier", Linear(config_.hidden_size, config_.num_labels));
    parts_->head = std::make_shared<PredictionHead>(parts_->bert->final_norm, Linear(dense), Norm(norm), dropout, classifier);
  } else if (family.classifier == ClassifierStyle::kPooler) {
    auto dropout = register_module("dropout", Dropout(config_.head_dropout()));
    auto classifier = register_module("classifier", Linear(config_.hidden_size, config_.num_labels));
    parts_->head = std::make_shared<HeadUnit>(parts_->bert->pooler, dropout, classifier);
  } else if (family.classifier == ClassifierStyle::kContextPooler) {
    auto pooler = register_module("pooler", std::make_shared<torch::nn::Module>());
    auto dense = pooler->register_module("dense", Linear(config_.hidden_size, config_.hidden_size));
    auto pooler_dropout = pooler->register_module("dropout", Dropout(config_.deberta.pooler_dropout));
    auto dropout = register_module("dropout", Dropout(config_.head_dropout()));
    auto classifier = register_module("classifier", Linear(config_.hidden_size, config_.num_labels));
    parts_->head = std::make_shared<ContextPoolerHead>(dense, pooler_dropout, dropout, classifier);
  } else if (family.classifier == ClassifierStyle::kPreClassifier) {
    auto pre = register_module("pre_classifier", Linear(config_.hidden_size, config_.hidden_size));
    auto dropout = register_module("dropout", Dropout(config_.head_dropout()));
    auto classifier = register_module("classifier", Linear(config_.hidden_size, config_.num_labels));
    parts_->head = std::make_shared<PreClassifierHead>(pre, dropout, classifier);
  } else {
    parts_->head = register_module("classifier", std::make_shared<DenseHeadImpl>(config_));
  }
  if (!parts_->head_unit) parts_->head_unit = parts_->head;
  init_weights();
}

BertForSequenceClassification::~BertForSequenceClassification() = default;

int BertForSequenceClassification::num_units() const {
  return static_cast<int>(config_.num_hidden_layers) + 2;
}

std::shared_ptr<torch::nn::Module> BertForSequenceClassification::unit(int index) const {
  if (index == 0) return parts_->bert->embeddings;
  if (index == num_units() - 1) return parts_->head_unit;
  return parts_->bert->layers.at(index - 1);
}

void BertForSequenceClassification::set_word_lookup(std::function<at::Tensor(const at::Tensor&)> lookup) {
  parts_->bert->embeddings->sharded_lookup = std::move(lookup);
}

std::vector<int> BertForSequenceClassification::units_read_by(int index) const {
  if (parts_->mlm && index == num_units() - 1) return {0};
  return {};
}

std::string BertForSequenceClassification::unit_prefix(int index) const {
  const EncoderFamily& family = config_.family();
  if (index == 0) return family.prefix() + "embeddings.";
  if (index == num_units() - 1) return "";  // bert.pooler.* and classifier.*, cls.predictions.*, lm_head.*
  return family.layer_prefix(index - 1);
}

int BertForSequenceClassification::unit_of(const std::string& name) const {
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

std::shared_ptr<const TokenLayout> BertForSequenceClassification::layout_of(const Batch& batch) const {
  auto layout = std::make_shared<TokenLayout>(padding_free_ ? TokenLayout::packed(batch.attention_mask)
                                                            : TokenLayout::padded(batch.attention_mask));
  layout->attention = attention_;
  return layout;
}

at::Tensor BertForSequenceClassification::pooled_tokens(const at::Tensor& tokens, const Batch& batch,
                                                        const TokenLayout& layout) const {
  const auto& final_norm = parts_->bert->final_norm;
  if (!final_norm) return layout.first_tokens(tokens);
  const at::Tensor h = final_norm->forward(tokens);
  if (!config_.modern.mean_pooling) return layout.first_tokens(h);
  // The mean over each row's attended tokens, as transformers weights the
  // padded states by the mask; column 0 is kept even when unattended, and
  // counts only if attended.
  const at::Tensor mask = batch.attention_mask;
  const at::Tensor row_of = at::arange(layout.rows, mask.options().dtype(at::kLong)).unsqueeze(1).expand(mask.sizes());
  const at::Tensor weight = layout.gather_tokens(mask).to(h.scalar_type()).unsqueeze(1);
  const at::Tensor sums = at::zeros({layout.rows, h.size(1)}, h.options()).index_add(0, layout.gather_tokens(row_of), h * weight);
  return sums / mask.sum(1, /*keepdim=*/true).to(h.scalar_type());
}

at::Tensor BertForSequenceClassification::pooled_output(const Batch& input) {
  if (!parts_->head) fail("a masked-LM model has no classification head; fine-tune it first (ft run --set model.weights=DIR)");
  const Batch batch = encoder_input(input, config_, prompt_length(), prefix_length());
  const auto layout = layout_of(batch);
  auto& bert = *parts_->bert;
  at::Tensor x = bert.embeddings->forward(layout->gather_tokens(batch.input_ids),
                                          layout->gather_tokens(batch.token_type_ids), *layout);
  for (auto& layer : bert.layers) x = layer->forward(x, *layout);
  return parts_->head->features(pooled_tokens(x.narrow(0, 0, layout->tokens), batch, *layout)).to(at::kFloat);
}

at::Tensor BertForSequenceClassification::forward(const Batch& input) {
  const Batch batch = encoder_input(input, config_, prompt_length(), prefix_length());
  UnitRunner& run = runner_ ? *runner_ : parts_->direct;
  // Shared: with checkpointing, layers run again in backward and need it then.
  auto layout = layout_of(batch);
  auto& bert = *parts_->bert;
  auto x = run.run(0, RunPass::kPlain, layout->gather_tokens(batch.input_ids), [&](const at::Tensor& ids) {
    return bert.embeddings->forward(ids, layout->gather_tokens(batch.token_type_ids), *layout);
  });
  for (int i = 0; i < static_cast<int>(bert.layers.size()); ++i) {
    auto layer_unit = [runner = &run, layer = bert.layers[i], layout, i](const at::Tensor& h, RunPass pass) {
      return runner->run(i + 1, pass, h, [&](const at::Tensor& in) { return layer->forward(in, *layout); });
    };
    x = checkpointing_ && run.computes(i + 1) ? checkpoint(x, bert.layers[i]->parameters(), layer_unit)
                                              : layer_unit(x, RunPass::kPlain);
  }
  at::Tensor logits;
  if (parts_->mlm) {
    if (!batch.mlm_positions.defined()) {
      fail("this is a masked-LM model (config.json: BertForMaskedLM); fine-tune it with `ft run --set model.weights=DIR`, "
           "or continue pretraining with `ft pretrain`");
    }
    const auto masked = layout->token_index(batch.mlm_positions);
    logits = run.run(num_units() - 1, RunPass::kPlain, x,
                     [&](const at::Tensor& h) { return parts_->mlm->forward(h.index_select(0, masked)); });
  } else {
    logits = run.run(num_units() - 1, RunPass::kPlain, x, [&](const at::Tensor& h) {
      return parts_->head->forward(pooled_tokens(h.narrow(0, 0, layout->tokens), batch, *layout));  // without carried rows
    });
  }
  return logits.to(at::kFloat);
}

void BertForSequenceClassification::add_prompt_embeddings(const at::Tensor& prompt) {
  auto& e = *parts_->bert->embeddings;
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

void BertForSequenceClassification::add_attention_prefix(const std::vector<at::Tensor>& keys,
                                                         const std::vector<at::Tensor>& values) {
  auto& bert = *parts_->bert;
  if (prompt_length() > 0 || prefix_length() > 0) fail("model: prompt learning is applied already (applied twice?)");
  if (!config_.family().layer_names.empty() || config_.family().modern_layer) {
    // The prefix lives in BERT's attention module, which this family's names do not reach.
    fail("prefix tuning: {} takes no past key values in transformers, so PEFT cannot prefix-tune it, and ft does not "
         "either (prompt tuning and LoRA work)",
         config_.model_type);
  }
  if (keys.size() != bert.layers.size() || values.size() != bert.layers.size()) {
    fail("model: a prefix needs keys and values for each of the {} layers, got {} and {}", bert.layers.size(),
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
    auto& self = *std::dynamic_pointer_cast<LayerImpl>(bert.layers[i])->attention->self;  // BERT's layer, checked above
    const auto opts = self.key->weight.options();
    self.prefix_key = self.register_parameter("prefix_key", keys[i].detach().to(opts, false, /*copy=*/true));
    self.prefix_value = self.register_parameter("prefix_value", values[i].detach().to(opts, false, /*copy=*/true));
  }
  bert.embeddings->position_offset = length;
}

int64_t BertForSequenceClassification::prompt_length() const {
  const at::Tensor& p = parts_->bert->embeddings->prompt;
  return p.defined() ? p.size(0) : 0;
}

int64_t BertForSequenceClassification::prefix_length() const { return parts_->bert->embeddings->position_offset; }

void BertForSequenceClassification::init_weights() {
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
  for (const auto* table : {&parts_->bert->embeddings->word_embeddings, &parts_->bert->embeddings->position_embeddings}) {
    if (!*table) continue;  // DeBERTa-v3 has no absolute positions
    const auto& pad = (*table)->options.padding_idx();
    if (pad && *pad >= 0 && *pad < (*table)->weight.size(0)) (*table)->weight[*pad].zero_();
  }
  if (config_.family().modern_layer) init_modern(named_parameters(), config_);
}

std::vector<TensorList> BertForSequenceClassification::unit_parameters() const {
  std::vector<TensorList> units(num_units());
  for (const auto& item : named_parameters()) units[unit_of(item.key())].emplace_back(item.key(), item.value());
  return units;
}

TensorList BertForSequenceClassification::weights() const {
  TensorList out;
  for (const auto& item : named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace ft
