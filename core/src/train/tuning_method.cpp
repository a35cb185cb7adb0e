#include "ft/train/tuning_method.h"

#include <fmt/format.h>

#include "ft/model/adapter.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/model/lora.h"
#include "ft/model/model.h"
#include "ft/model/prompt_learning.h"
#include "ft/tokenizer/tokenizer.h"

namespace ft {

AppliedMethod apply_tuning_method(EncoderModel& model, const RunConfig& config,
                                  const Tokenizer* tokenizer) {
  const auto seed = static_cast<uint64_t>(config.train.seed);
  AppliedMethod m;
  if (config.lora.rank > 0) {
    const LoraConfig lora = with_family_targets(config.lora, model.config());
    apply_lora(model, lora, seed);
    if (!lora.adapter.empty()) load_adapter(model, lora.adapter, lora);
    m.trainable = [lora](const std::string& name) { return is_lora_trainable(name, lora); };
  }
  const AdapterConfig& adapter = config.adapter;
  if (adapter.size > 0) {
    apply_bottleneck_adapters(model, adapter, seed);
    if (!adapter.path.empty()) load_bottleneck_adapter(model, adapter.path);
    m.trainable = is_bottleneck_trainable;
    m.note = fmt::format("bottleneck adapters: size {} on {} layer(s), {} adapter parameters (+ the head) train",
                         adapter.size, adapter_layers(adapter, model.config().num_hidden_layers).size(),
                         bottleneck_parameter_count(model.config(), adapter));
  }
  if (const auto p = prompt_learning_of(config)) {
    // Text data is cut to data.max_seq_len; pre-tokenized rows are checked as they come.
    if (tokenizer) check_prompt_positions(model.config(), *p, config.data.max_seq_len);
    PromptTextEncoder encode;
    if (tokenizer) {
      encode = [tokenizer](const std::string& text) { return tokenizer->encode(text, std::nullopt, 0, false).input_ids; };
    }
    apply_prompt_learning(model, *p, seed, encode);
    m.trainable = [method = *p](const std::string& name) { return is_prompt_learning_trainable(name, method); };
    const bool prompt = p->method == PromptMethod::kPrompt;
    m.note = fmt::format("{} tuning: {} virtual tokens{}, {} {} parameters train{}", p->section(), p->length,
                         prompt ? "" : fmt::format(" in each of {} layers", model.config().num_hidden_layers),
                         prompt_learning_parameter_count(model.config(), *p), prompt ? "prompt" : "prefix",
                         p->train_head ? " (+ the classifier)" : "; the classifier stays frozen");
  }
  return m;
}

void describe_tuning_method(CheckpointData& data, const RunConfig& config, const std::string& base_model) {
  if (config.lora.rank > 0) {
    data.lora = with_family_targets(config.lora, data.config);
    data.base_model = base_model;
  }
  if (config.adapter.size > 0) data.adapter = config.adapter;
  if (auto p = prompt_learning_of(config)) {
    data.prompt_learning = std::move(p);
    data.base_model = base_model;
  }
}

void apply_checkpoint_method(EncoderModel& model, const LoadedCheckpoint& c) {
  if (c.lora) apply_lora(model, *c.lora, 0);
  if (c.adapter) apply_bottleneck_adapters(model, *c.adapter, 0);
  if (c.prompt_learning) {
    PromptLearning p = *c.prompt_learning;
    p.path.clear();      // the values come with c.model
    p.init = "random";   // so nothing needs a tokenizer
    apply_prompt_learning(model, p, 0);
  }
}

void use_checkpoint_method(RunConfig& config, const std::filesystem::path& dir) {
  config.lora = has_adapter(dir) ? read_adapter_config(dir) : LoraConfig{};
  config.adapter = has_bottleneck_adapter(dir) ? read_bottleneck_adapter_config(dir) : AdapterConfig{};
  config.prompt = PromptConfig{};
  config.prefix = PrefixConfig{};
  if (has_prompt_learning(dir)) set_prompt_learning(config, read_prompt_learning_config(dir));
}

}  // namespace ft
