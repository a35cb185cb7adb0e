#include "ft/model/prompt_learning.h"

#include <algorithm>
#include <map>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "model/peft/peft_files.h"
#include "text_affix.h"

namespace ft {
namespace fsys = std::filesystem;
using nlohmann::json;

namespace {

// Suffixes: the family's base prefix ("bert.", "roberta.") comes first.
const char kPromptSuffix[] = "embeddings.prompt_embeddings";
const char kPeftTable[] = "prompt_embeddings";
// PEFT keeps a prompt-learning model's transformers model as `base_model`
// (no LoRA-style ".model"), so modules_to_save land as base_model.<name>.
const char kPeftHeadPrefix[] = "base_model.";

std::string prompt_name(const BertConfig& config) { return config.family().prefix() + kPromptSuffix; }

std::string prefix_suffix(int64_t layer, const char* which) {
  return fmt::format("encoder.layer.{}.attention.self.prefix_{}", layer, which);
}
std::string prefix_name(const std::string& base, int64_t layer, const char* which) {
  return base + prefix_suffix(layer, which);
}


std::string shape(const at::Tensor& t) { return fmt::format("{}", fmt::join(t.sizes(), "x")); }

// PEFT's text init: the tokenizer's ids of init_text, special tokens
// included, repeated until there are P and cut to P.
at::Tensor text_ids(const PromptLearning& p, const PromptTextEncoder& encode, int64_t vocab_size) {
  if (!encode) {
    fail("prompt.init: text needs the run's tokenizer (data.vocab, or text data); pre-tokenized data has none, so "
         "use init random or vocab");
  }
  const std::vector<int64_t> ids = encode(p.init_text);
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < p.length) out.insert(out.end(), ids.begin(), ids.end());
  out.resize(static_cast<size_t>(p.length));
  for (int64_t id : out) {
    if (id >= vocab_size) fail("prompt.init_text: token id {} is outside the model's vocabulary ({})", id, vocab_size);
  }
  return at::tensor(out, at::kLong);
}

at::Tensor word_embeddings(const EncoderModel& model) {
  for (const auto& [name, t] : model.weights())
    if (name == model.config().family().word_embeddings()) return t;
  fail("prompt tuning: the model has no '{}'", model.config().family().word_embeddings());
}

at::Tensor initial_prompt(const EncoderModel& model, const PromptLearning& p,
                          at::Generator& gen, const PromptTextEncoder& encode) {
  const BertConfig& c = model.config();
  if (!p.path.empty()) return at::zeros({p.length, c.hidden_size});  // load_prompt_learning fills it
  if (p.init == "random") return at::empty({p.length, c.hidden_size}).normal_(0.0, c.initializer_range, gen);
  const at::Tensor ids = p.init == "vocab" ? at::randint(0, c.vocab_size, {p.length}, gen, at::kLong)
                                           : text_ids(p, encode, c.vocab_size);
  return word_embeddings(model).detach().to(at::kFloat).index_select(0, ids).clone();
}

json read_config_json(const fsys::path& dir) {
  const fsys::path file = dir / kPeftConfigFile;
  if (!fsys::exists(file)) fail("{}: no {} (not a prompt or prefix tuning adapter)", dir.string(), kPeftConfigFile);
  try {
    json j = json::parse(fs::read_file(file));
    if (!j.is_object()) fail("{}: expected a JSON object", file.string());
    return j;
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", file.string(), e.what());
  }
}

}  // namespace

std::optional<PromptLearning> prompt_learning_of(const RunConfig& config) {
  PromptLearning p;
  if (config.prompt.length > 0) {
    p.method = PromptMethod::kPrompt;
    p.length = config.prompt.length;
    p.init = config.prompt.init;
    p.init_text = config.prompt.init_text;
    p.train_head = config.prompt.train_head;
    p.path = config.prompt.path;
    return p;
  }
  if (config.prefix.length > 0) {
    p.method = PromptMethod::kPrefix;
    p.length = config.prefix.length;
    p.train_head = config.prefix.train_head;
    p.path = config.prefix.path;
    return p;
  }
  return std::nullopt;
}

void set_prompt_learning(RunConfig& config, const PromptLearning& p) {
  config.prompt = PromptConfig{};
  config.prefix = PrefixConfig{};
  if (p.method == PromptMethod::kPrompt) {
    config.prompt.length = p.length;
    config.prompt.init = p.init;
    config.prompt.init_text = p.init_text;
    config.prompt.train_head = p.train_head;
    config.prompt.path = p.path;
  } else {
    config.prefix.length = p.length;
    config.prefix.train_head = p.train_head;
    config.prefix.path = p.path;
  }
}

bool is_prompt_learning_param(const std::string& hf_name) {
  return ends_with(hf_name, std::string(".") + kPromptSuffix) || ends_with(hf_name, ".attention.self.prefix_key") ||
         ends_with(hf_name, ".attention.self.prefix_value");
}

bool is_prompt_learning_trainable(const std::string& hf_name, const PromptLearning& p) {
  return is_prompt_learning_param(hf_name) || (p.train_head && is_classifier_parameter(hf_name));
}

int64_t prompt_learning_parameter_count(const BertConfig& config, const PromptLearning& p) {
  const int64_t per_token = p.method == PromptMethod::kPrompt ? config.hidden_size
                                                              : config.num_hidden_layers * 2 * config.hidden_size;
  return p.length * per_token;
}

void check_prompt_positions(const BertConfig& config, const PromptLearning& p, int64_t max_seq_len) {
  if (max_seq_len + p.length <= config.max_tokens()) return;
  fail("{}.length: {} virtual tokens + data.max_seq_len {} need {} positions, but the model has "
       "{}; lower data.max_seq_len to {} or {}.length",
       p.section(), p.length, max_seq_len, max_seq_len + p.length, config.max_tokens(),
       config.max_tokens() - p.length, p.section());
}

void apply_prompt_learning(EncoderModel& model, const PromptLearning& p, uint64_t seed,
                           const PromptTextEncoder& encode) {
  if (p.length <= 0) fail("{}.length: must be > 0 to add virtual tokens, got {}", p.section(), p.length);
  const BertConfig& c = model.config();
  // One generator: the same seed gives the same tokens on every rank.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  if (p.method == PromptMethod::kPrompt) {
    model.add_prompt_embeddings(initial_prompt(model, p, gen, encode));
  } else {
    const int64_t layers = c.num_hidden_layers;
    at::Tensor table = at::zeros({p.length, layers * 2 * c.hidden_size});
    if (p.path.empty()) table.normal_(0.0, 1.0, gen);
    std::vector<at::Tensor> keys, values;
    for (const auto& [name, t] : prefix_from_peft(table, layers, "prefix init", c.family().prefix())) {
      (ends_with(name, "_key") ? keys : values).push_back(t);
    }
    model.add_attention_prefix(keys, values);
  }
  if (!p.path.empty()) load_prompt_learning(model, p.path, p);
}

void replicate_prompt_learning(const EncoderModel& from, EncoderModel& to) {
  if (from.prompt_length() == 0 && from.prefix_length() == 0) return;
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : from.weights()) w[name] = t.detach().clone();
  if (from.prompt_length() > 0) {
    to.add_prompt_embeddings(w.at(prompt_name(from.config())));
    return;
  }
  std::vector<at::Tensor> keys, values;
  for (int64_t i = 0; i < from.config().num_hidden_layers; ++i) {
    keys.push_back(w.at(prefix_name(from.config().family().prefix(), i, "key")));
    values.push_back(w.at(prefix_name(from.config().family().prefix(), i, "value")));
  }
  to.add_attention_prefix(keys, values);
}

TensorList without_prompt_learning(const TensorList& weights) {
  TensorList out;
  for (const auto& [name, t] : weights)
    if (!is_prompt_learning_param(name)) out.emplace_back(name, t);
  return out;
}

at::Tensor prefix_to_peft(const TensorList& weights, int64_t layers) {
  std::vector<at::Tensor> columns;
  for (int64_t i = 0; i < layers; ++i) {
    for (const char* which : {"key", "value"}) {
      // By suffix: whichever family's base prefix comes before it.
      const std::string suffix = "." + prefix_suffix(i, which);
      auto it = std::find_if(weights.begin(), weights.end(), [&](const auto& named) { return ends_with(named.first, suffix); });
      if (it == weights.end()) fail("prefix tuning: the model state has no '*{}'", suffix);
      columns.push_back(it->second.detach().to(at::kFloat));
    }
  }
  return at::cat(columns, 1).contiguous();
}

TensorList prefix_from_peft(const at::Tensor& table, int64_t layers, const std::string& source, const std::string& base) {
  if (table.dim() != 2 || layers < 1 || table.size(1) % (2 * layers) != 0) {
    fail("{}: the prefix table is {}; PEFT's is [num_virtual_tokens, num_layers x 2 x token_dim] with {} layers",
         source, shape(table), layers);
  }
  const int64_t hidden = table.size(1) / (2 * layers);
  TensorList out;
  for (int64_t i = 0; i < layers; ++i) {
    // PEFT views the row as [num_layers * 2, heads, head_dim]: entry 2i is
    // layer i's key, 2i + 1 its value.
    out.emplace_back(prefix_name(base, i, "key"), table.narrow(1, 2 * i * hidden, hidden).contiguous());
    out.emplace_back(prefix_name(base, i, "value"), table.narrow(1, (2 * i + 1) * hidden, hidden).contiguous());
  }
  return out;
}

// --------------------------------------------------------------- files

bool has_prompt_learning(const fsys::path& dir) {
  if (!fsys::exists(dir / kPeftConfigFile)) return false;
  const std::string type = read_config_json(dir).value("peft_type", std::string());
  return type == "PROMPT_TUNING" || type == "PREFIX_TUNING";
}

void save_prompt_learning(const fsys::path& dir, const TensorList& weights, const PromptLearning& p,
                          const BertConfig& config, const std::string& base_model) {
  TensorList picked;
  if (p.method == PromptMethod::kPrompt) {
    for (const auto& [name, t] : weights)
      if (name == prompt_name(config)) picked.emplace_back(kPeftTable, t.detach().to(at::kFloat).contiguous());
    if (picked.empty()) fail("prompt tuning: the model state has no '{}'", prompt_name(config));
  } else {
    picked.emplace_back(kPeftTable, prefix_to_peft(weights, config.num_hidden_layers));
  }
  if (p.train_head) {
    for (const auto& [name, t] : weights)
      if (is_classifier_parameter(name)) picked.emplace_back(kPeftHeadPrefix + name, t);
  }
  safetensors::save((dir / kPeftWeightsFile).string(), picked, {{"format", "pt"}});
  json j;
  j["peft_type"] = p.peft_type();
  j["task_type"] = "SEQ_CLS";
  j["num_virtual_tokens"] = p.length;
  j["token_dim"] = config.hidden_size;
  j["num_transformer_submodules"] = 1;
  j["num_attention_heads"] = config.num_attention_heads;
  j["num_layers"] = config.num_hidden_layers;
  j["base_model_name_or_path"] = base_model;
  j["revision"] = nullptr;
  j["inference_mode"] = true;
  // PEFT adds the classifier to a SEQ_CLS model's modules_to_save by itself;
  // an empty list records that ft kept the base model's classifier.
  j["modules_to_save"] = p.train_head ? json(peft_head_modules(weights)) : json::array();
  if (p.method == PromptMethod::kPrompt) {
    static const std::map<std::string, std::string> kInit = {{"random", "RANDOM"}, {"vocab", "SAMPLE_VOCAB"},
                                                             {"text", "TEXT"}};
    j["prompt_tuning_init"] = kInit.at(p.init);
    j["prompt_tuning_init_text"] = p.init == "text" ? json(p.init_text) : json(nullptr);
    // PEFT's config refuses TEXT without a tokenizer to name.
    j["tokenizer_name_or_path"] = p.init == "text" ? json(base_model) : json(nullptr);
    j["tokenizer_kwargs"] = nullptr;
  } else {
    j["encoder_hidden_size"] = config.hidden_size;
    j["prefix_projection"] = false;
  }
  fs::write_file_atomic(dir / kPeftConfigFile, j.dump(2) + "\n");
}

PromptLearning read_prompt_learning_config(const fsys::path& dir) {
  const json j = read_config_json(dir);
  const std::string file = (dir / kPeftConfigFile).string();
  auto bad = [&](const char* field, const std::string& why) { fail("{}: '{}' {}", file, field, why); };
  PromptLearning p;
  p.path = dir.string();
  try {
    const std::string type = j.value("peft_type", std::string());
    if (type == "PROMPT_TUNING") {
      p.method = PromptMethod::kPrompt;
    } else if (type == "PREFIX_TUNING") {
      p.method = PromptMethod::kPrefix;
    } else {
      bad("peft_type", fmt::format("is \"{}\"; prompt.path and prefix.path load PROMPT_TUNING and PREFIX_TUNING "
                                   "adapters (a LoRA adapter loads with lora.adapter)",
                                   type));
    }
    if (j.contains("task_type") && !j["task_type"].is_null() && j["task_type"] != "SEQ_CLS") {
      bad("task_type", "must be \"SEQ_CLS\" (ft trains sequence classifiers)");
    }
    if (!j.contains("num_virtual_tokens") || !j["num_virtual_tokens"].is_number_integer() ||
        j["num_virtual_tokens"].get<int64_t>() <= 0) {
      bad("num_virtual_tokens", "must be an integer > 0");
    }
    p.length = j["num_virtual_tokens"].get<int64_t>();
    const json& sub = j.value("num_transformer_submodules", json());
    if (!sub.is_null() && sub != 1) bad("num_transformer_submodules", "must be 1 (BERT is an encoder)");
    if (j.value("prefix_projection", false)) {
      bad("prefix_projection", "is true: ft does not support PEFT's prefix projection (its saved table cannot "
                               "be trained further without the MLP); train with prefix_projection false");
    }
    const json& m = j.value("modules_to_save", json());
    p.train_head = !m.is_array();
    if (m.is_array())
      for (const auto& name : m) p.train_head = p.train_head || name == "classifier";
    if (p.method == PromptMethod::kPrompt) {
      const std::string init = j.value("prompt_tuning_init", json("RANDOM")).get<std::string>();
      if (init == "RANDOM") {
        p.init = "random";
      } else if (init == "SAMPLE_VOCAB" || init == "RANDOM_DISCRETE") {
        p.init = "vocab";
      } else if (init == "TEXT") {
        p.init = "text";
        const json& text = j.value("prompt_tuning_init_text", json());
        p.init_text = text.is_string() ? text.get<std::string>() : "";
      } else {
        bad("prompt_tuning_init", fmt::format("is \"{}\" (known: RANDOM, SAMPLE_VOCAB, TEXT)", init));
      }
    }
  } catch (const json::exception& e) {
    fail("{}: malformed adapter config ({})", file, e.what());
  }
  return p;
}

TensorList read_prompt_learning_weights(const fsys::path& dir, const BertConfig& config) {
  const PromptLearning p = read_prompt_learning_config(dir);
  const json j = read_config_json(dir);
  const std::string cfg = (dir / kPeftConfigFile).string();
  for (const auto& [field, want] : {std::pair<const char*, int64_t>{"token_dim", config.hidden_size},
                                    {"num_layers", config.num_hidden_layers},
                                    {"num_attention_heads", config.num_attention_heads}}) {
    const json& v = j.value(field, json());
    if (!v.is_null() && (!v.is_number_integer() || v.get<int64_t>() != want)) {
      fail("{}: '{}' is {}, but the model's config.json implies {} (an adapter for another base model?)", cfg, field,
           v.dump(), want);
    }
  }
  const fsys::path file = dir / kPeftWeightsFile;
  if (!fsys::exists(file)) fail("{}: {} is missing", dir.string(), kPeftWeightsFile);
  const int64_t width = p.method == PromptMethod::kPrompt ? config.hidden_size
                                                          : config.num_hidden_layers * 2 * config.hidden_size;
  TensorList out;
  bool table = false;
  for (auto& [name, t] : safetensors::load(file.string())) {
    if (name == kPeftTable) {
      if (t.dim() != 2 || t.size(0) != p.length || t.size(1) != width) {
        fail("{}: '{}' is {}, but num_virtual_tokens {} and the model need {}x{}", file.string(), name, shape(t),
             p.length, p.length, width);
      }
      table = true;
      if (p.method == PromptMethod::kPrompt) {
        out.emplace_back(prompt_name(config), t);
      } else {
        for (auto& named : prefix_from_peft(t, config.num_hidden_layers, file.string(), config.family().prefix()))
          out.push_back(std::move(named));
      }
    } else if (starts_with(name, kPeftHeadPrefix) && is_classifier_parameter(name.substr(sizeof(kPeftHeadPrefix) - 1))) {
      out.emplace_back(name.substr(sizeof(kPeftHeadPrefix) - 1), t);
    } else {
      fail("{}: unexpected tensor '{}' (a {} adapter holds '{}' and base_model.classifier.*)", file.string(), name,
           p.peft_type(), kPeftTable);
    }
  }
  if (!table) fail("{}: no '{}' tensor", file.string(), kPeftTable);
  return out;
}

void load_prompt_learning(EncoderModel& model, const fsys::path& dir, const PromptLearning& p) {
  const PromptLearning saved = read_prompt_learning_config(dir);
  if (saved.method != p.method) {
    fail("{}.path: {} holds a {} adapter; point {}.path at it instead", p.section(), dir.string(), saved.peft_type(),
         saved.section());
  }
  if (saved.length != p.length) {
    fail("{}.path: {} has num_virtual_tokens {}, but {}.length is {}; set {}.length={}", p.section(), dir.string(),
         saved.length, p.section(), p.length, p.section(), saved.length);
  }
  std::map<std::string, at::Tensor> params;
  for (const auto& item : model.named_parameters()) params[item.key()] = item.value();
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : read_prompt_learning_weights(dir, model.config())) {
    auto it = params.find(name);
    if (it == params.end()) fail("{}.path: {}: '{}' has no place in this model", p.section(), dir.string(), name);
    if (t.sizes() != it->second.sizes()) {
      fail("{}.path: {}: '{}' is {}, the model's is {}", p.section(), dir.string(), name, shape(t), shape(it->second));
    }
    it->second.copy_(t);
  }
}

}  // namespace ft
