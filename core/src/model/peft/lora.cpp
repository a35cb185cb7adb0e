#include "ft/model/lora.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#include <torch/nn/modules/dropout.h>

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

const char kPeftPrefix[] = "base_model.model.";
const char kSuffixA[] = ".lora_A.weight";
const char kSuffixB[] = ".lora_B.weight";


// Holds one adapter matrix as a parameter named "weight", so the adapter of
// module M is "M.lora_A.weight" as in PEFT's saved state. B also keeps the
// scale and dropout, so replicate_lora() can rebuild the adapter.
struct LoraWeight : torch::nn::Module {
  at::Tensor weight;
  double scale = 0.0, dropout = 0.0;
  explicit LoraWeight(at::Tensor w) { weight = register_parameter("weight", std::move(w)); }
};

// Registers A and B under `linear` and routes its output through them.
void attach(AdaptableLinearImpl& linear, const at::Tensor& a, const at::Tensor& b, double scale, double dropout) {
  const auto opts = linear.weight.options();
  auto mod_a = linear.register_module("lora_A", std::make_shared<LoraWeight>(a.to(opts)));
  auto mod_b = linear.register_module("lora_B", std::make_shared<LoraWeight>(b.to(opts)));
  mod_b->scale = scale;
  mod_b->dropout = dropout;
  torch::nn::Dropout drop{nullptr};
  if (dropout > 0) drop = linear.register_module("lora_dropout", torch::nn::Dropout(dropout));
  // Tensor handles, not copies: strategies swap storage with set_data(),
  // which these follow (as LinearImpl's own `weight` does).
  at::Tensor wa = mod_a->weight, wb = mod_b->weight;
  linear.adapter = [wa, wb, drop, scale](const at::Tensor& x) mutable {
    const at::Tensor h = drop ? drop(x) : x;
    return at::linear(at::linear(h, wa), wb) * scale;
  };
}

std::string targets_text(const std::vector<std::string>& targets) {
  return fmt::format("[{}]", fmt::join(targets, ", "));
}

}  // namespace

bool lora_targets_module(const std::string& module_name, const std::vector<std::string>& targets) {
  for (const auto& t : targets) {
    if (module_name == t || ends_with(module_name, "." + t)) return true;
  }
  return false;
}

bool is_lora_param(const std::string& hf_name) {
  return ends_with(hf_name, kSuffixA) || ends_with(hf_name, kSuffixB);
}

bool is_lora_trainable(const std::string& hf_name, const LoraConfig& lora) {
  return is_lora_param(hf_name) || (lora.train_head && is_classifier_parameter(hf_name));
}

LoraConfig with_family_targets(LoraConfig lora, const BertConfig& model) {
  if (lora.targets.empty()) lora.targets = model.family().lora_targets;
  return lora;
}

std::vector<std::string> apply_lora(EncoderModel& model, const LoraConfig& given, uint64_t seed) {
  const LoraConfig lora = with_family_targets(given, model.config());
  if (lora.rank <= 0) fail("lora.rank: must be > 0 to add adapters, got {}", lora.rank);
  std::vector<std::pair<std::string, std::shared_ptr<AdaptableLinearImpl>>> chosen;
  std::set<std::string> used_targets;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    if (!lora_targets_module(name, lora.targets)) continue;
    for (const auto& t : lora.targets)
      if (lora_targets_module(name, {t})) used_targets.insert(t);
    auto linear = std::dynamic_pointer_cast<AdaptableLinearImpl>(item.value());
    if (!linear) {
      fail("lora.targets: '{}' is not a Linear layer; name Linear modules (query, key, value, dense, "
           "attention.output.dense, intermediate.dense, output.dense)",
           name);
    }
    if (linear->adapter) fail("lora: module '{}' already has an adapter (LoRA applied twice)", name);
    chosen.emplace_back(name, std::move(linear));
  }
  for (const auto& t : lora.targets) {
    if (!used_targets.count(t)) {
      fail("lora.targets: '{}' matches no module of the model (modules look like "
           "'bert.encoder.layer.0.attention.self.query'; targets match a name's last components)",
           t);
    }
  }
  // One generator for all adapters, in model order: the same seed gives the
  // same A on every rank, whatever else consumed the global generator.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double scale = lora.alpha / static_cast<double>(lora.rank);
  std::vector<std::string> names;
  torch::NoGradGuard no_grad;
  for (auto& [name, linear] : chosen) {
    const int64_t in = linear->weight.size(1), out = linear->weight.size(0);
    // kaiming_uniform_(a=sqrt(5)) as PEFT: gain sqrt(2 / (1 + 5)), bound
    // gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    at::Tensor a = at::empty({lora.rank, in}, at::kFloat).uniform_(-bound, bound, gen);
    attach(*linear, a, at::zeros({out, lora.rank}, at::kFloat), scale, lora.dropout);
    names.push_back(name);
  }
  return names;
}

void replicate_lora(const EncoderModel& from, EncoderModel& to) {
  const auto targets = to.named_modules("", /*include_self=*/false);
  torch::NoGradGuard no_grad;
  for (const auto& item : from.named_modules("", /*include_self=*/false)) {
    auto linear = std::dynamic_pointer_cast<AdaptableLinearImpl>(item.value());
    if (!linear || !linear->adapter) continue;
    auto a = std::dynamic_pointer_cast<LoraWeight>(linear->named_children()["lora_A"]);
    auto b = std::dynamic_pointer_cast<LoraWeight>(linear->named_children()["lora_B"]);
    const auto* dst = targets.find(item.key());
    auto twin = dst ? std::dynamic_pointer_cast<AdaptableLinearImpl>(*dst) : nullptr;
    if (!a || !b || !twin || twin->adapter) fail("lora: cannot replicate the adapter of '{}'", item.key());
    attach(*twin, a->weight.detach().clone(), b->weight.detach().clone(), b->scale, b->dropout);
  }
}

TensorList merge_lora(const TensorList& weights, const LoraConfig& lora) {
  if (lora.rank <= 0) fail("merge_lora: the adapter rank must be > 0, got {}", lora.rank);
  const double scale = lora.alpha / static_cast<double>(lora.rank);
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, t] : weights) by_name[name] = &t;
  std::map<std::string, at::Tensor> merged;
  for (const auto& [name, t] : weights) {
    if (!ends_with(name, kSuffixA)) continue;
    const std::string module = name.substr(0, name.size() - (sizeof(kSuffixA) - 1));
    auto b = by_name.find(module + kSuffixB);
    auto w = by_name.find(module + ".weight");
    if (b == by_name.end()) fail("merge LoRA: '{}' has no '{}'", name, module + kSuffixB);
    if (w == by_name.end()) fail("merge LoRA: adapter '{}' has no base weight '{}'", name, module + ".weight");
    const at::Tensor& base = *w->second;
    at::Tensor delta = at::matmul(b->second->to(at::kFloat), t.to(at::kFloat)) * scale;
    if (delta.sizes() != base.sizes()) {
      fail("merge LoRA: B A of '{}' is {}, the base weight is {}", module, fmt::join(delta.sizes(), "x"),
           fmt::join(base.sizes(), "x"));
    }
    merged[module + ".weight"] = (base.to(at::kFloat) + delta).to(base.scalar_type());
  }
  for (const auto& [name, t] : weights) {
    if (ends_with(name, kSuffixB) && !by_name.count(name.substr(0, name.size() - (sizeof(kSuffixB) - 1)) + kSuffixA)) {
      fail("merge LoRA: '{}' has no matching lora_A", name);
    }
  }
  TensorList out;
  for (const auto& [name, t] : weights) {
    if (is_lora_param(name)) continue;
    auto it = merged.find(name);
    out.emplace_back(name, it == merged.end() ? t : it->second);
  }
  return out;
}

TensorList without_lora(const TensorList& weights) {
  TensorList out;
  for (const auto& [name, t] : weights)
    if (!is_lora_param(name)) out.emplace_back(name, t);
  return out;
}

std::string adapter_peft_type(const fsys::path& dir) {
  const fsys::path file = dir / kPeftConfigFile;
  if (!fsys::exists(file)) return "";
  try {
    const json j = json::parse(fs::read_file(file));
    const json& type = j.is_object() ? j.value("peft_type", json()) : json();
    if (!type.is_string() || type.get<std::string>().empty()) {
      fail("{}: no 'peft_type' (PEFT writes LORA, PROMPT_TUNING, PREFIX_TUNING, ...)", file.string());
    }
    return type.get<std::string>();
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", file.string(), e.what());
  }
}

bool has_adapter(const fsys::path& dir) { return adapter_peft_type(dir) == "LORA"; }

void save_adapter(const fsys::path& dir, const TensorList& weights, const LoraConfig& lora,
                  const std::string& base_model, BertHead head) {
  TensorList picked;
  for (const auto& [name, t] : weights) {
    if (is_lora_param(name) || (lora.train_head && is_classifier_parameter(name))) {
      picked.emplace_back(kPeftPrefix + name, t);
    }
  }
  safetensors::save((dir / kPeftWeightsFile).string(), picked, {{"format", "pt"}});
  json j;
  j["peft_type"] = "LORA";
  j["task_type"] = head == BertHead::kTokenClassification ? "TOKEN_CLS"
                  : head == BertHead::kSentenceEmbedding   ? "FEATURE_EXTRACTION"
                                                           : "SEQ_CLS";
  j["r"] = lora.rank;
  // PEFT types lora_alpha as int; keep it one when it is whole.
  if (std::floor(lora.alpha) == lora.alpha && std::abs(lora.alpha) < 1e15) {
    j["lora_alpha"] = static_cast<int64_t>(lora.alpha);
  } else {
    j["lora_alpha"] = lora.alpha;
  }
  j["lora_dropout"] = lora.dropout;
  j["target_modules"] = lora.targets;
  // A bare encoder (embeddings) has no head for PEFT to save.
  const bool has_head =
      std::any_of(weights.begin(), weights.end(), [](const auto& w) { return is_classifier_parameter(w.first); });
  j["modules_to_save"] = lora.train_head && has_head ? json(peft_head_modules(weights)) : json(nullptr);
  j["base_model_name_or_path"] = base_model;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["use_rslora"] = false;
  j["layers_to_transform"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["rank_pattern"] = json::object();
  j["alpha_pattern"] = json::object();
  j["revision"] = nullptr;
  fs::write_file_atomic(dir / kPeftConfigFile, j.dump(2) + "\n");
}

LoraConfig read_adapter_config(const fsys::path& dir) {
  const fsys::path file = dir / kPeftConfigFile;
  if (!fsys::exists(file)) fail("{}: no {} (not a LoRA adapter directory)", dir.string(), kPeftConfigFile);
  LoraConfig c;
  c.adapter = dir.string();
  json j;
  try {
    j = json::parse(fs::read_file(file));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", file.string(), e.what());
  }
  auto bad = [&](const char* field, const std::string& why) { fail("{}: '{}' {}", file.string(), field, why); };
  try {
    const std::string type = j.value("peft_type", std::string());
    if (type == "PROMPT_TUNING" || type == "PREFIX_TUNING") {
      bad("peft_type", fmt::format("is \"{}\", not \"LORA\": load it with {}.path, not as a LoRA adapter", type,
                                   type == "PROMPT_TUNING" ? "prompt" : "prefix"));
    }
    if (type != "LORA") bad("peft_type", "must be \"LORA\" (ft's LoRA loads only LoRA adapters)");
    if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() <= 0) {
      bad("r", "must be an integer > 0");
    }
    c.rank = j["r"].get<int64_t>();
    c.alpha = j.value("lora_alpha", 8.0);
    if (!(c.alpha > 0)) bad("lora_alpha", "must be > 0");
    c.dropout = j.contains("lora_dropout") && !j["lora_dropout"].is_null() ? j["lora_dropout"].get<double>() : 0.0;
    const json& t = j.value("target_modules", json());
    if (!t.is_array() || t.empty()) {
      bad("target_modules", "must be a non-empty list of module names (a regex string is not supported)");
    }
    c.targets = t.get<std::vector<std::string>>();
    const json& m = j.value("modules_to_save", json());
    c.train_head = false;
    if (m.is_array()) {
      for (const auto& name : m) c.train_head = c.train_head || name.get<std::string>() == "classifier";
    }
    if (j.value("use_rslora", false)) bad("use_rslora", "is not supported (scale alpha / r only)");
    if (j.value("fan_in_fan_out", false)) bad("fan_in_fan_out", "is not supported by BERT's Linear layers");
    if (j.value("bias", std::string("none")) != "none") bad("bias", "must be \"none\"");
    for (const char* field : {"rank_pattern", "alpha_pattern"}) {
      if (j.contains(field) && !j[field].is_null() && !j[field].empty()) bad(field, "is not supported (one r and alpha)");
    }
    for (const char* field : {"layers_to_transform", "layers_pattern"}) {
      if (j.contains(field) && !j[field].is_null()) bad(field, "is not supported (adapt every layer)");
    }
  } catch (const json::exception& e) {
    fail("{}: malformed adapter config ({})", file.string(), e.what());
  }
  return c;
}

TensorList read_adapter_weights(const fsys::path& dir) {
  const fsys::path file = dir / kPeftWeightsFile;
  if (!fsys::exists(file)) fail("{}: {} is missing", dir.string(), kPeftWeightsFile);
  TensorList out;
  const std::string prefix = kPeftPrefix;
  for (auto& [name, t] : safetensors::load(file.string())) {
    if (name.rfind(prefix, 0) != 0) fail("{}: tensor '{}' lacks PEFT's '{}' prefix", file.string(), name, prefix);
    out.emplace_back(name.substr(prefix.size()), t);
  }
  return out;
}

void load_adapter(EncoderModel& model, const fsys::path& dir, const LoraConfig& lora) {
  if (!fsys::exists(dir / kPeftConfigFile)) {
    fail("lora.adapter: {} has no adapter_config.json; point it at a checkpoint of a LoRA run or a PEFT adapter "
         "directory",
         dir.string());
  }
  const LoraConfig saved = read_adapter_config(dir);
  const std::string file = (dir / kPeftWeightsFile).string();
  if (saved.rank != lora.rank) {
    fail("lora.adapter: {} has r={}, but lora.rank is {}; set lora.rank={}", dir.string(), saved.rank, lora.rank,
         saved.rank);
  }
  std::map<std::string, at::Tensor> params;
  for (const auto& item : model.named_parameters()) params[item.key()] = item.value();
  const TensorList tensors = read_adapter_weights(dir);
  std::set<std::string> given;
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    auto it = params.find(name);
    // An adapter of a bare XModel (PEFT over a sentence-transformers encoder) names no "bert.".
    if (it == params.end()) it = params.find(model.config().family().prefix() + name);
    if (it == params.end()) {
      fail("lora.adapter: {}: tensor '{}' has no place in this model (adapter targets {}, lora.targets {})", file,
           name, targets_text(saved.targets), targets_text(lora.targets));
    }
    if (t.sizes() != it->second.sizes()) {
      fail("lora.adapter: {}: tensor '{}' has shape {}, the model needs {}", file, name, fmt::join(t.sizes(), "x"),
           fmt::join(it->second.sizes(), "x"));
    }
    it->second.copy_(t);
    given.insert(it->first);
  }
  for (const auto& [name, p] : params) {
    if (is_lora_param(name) && !given.count(name)) {
      fail("lora.adapter: {} has no '{}' (adapter targets {}, lora.targets {})", file, name,
           targets_text(saved.targets), targets_text(lora.targets));
    }
  }
}

TensorList with_adapter(TensorList base, const TensorList& adapter) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < base.size(); ++i) index[base[i].first] = i;
  for (const auto& [name, t] : adapter) {
    auto it = index.find(name);
    if (it != index.end()) {
      base[it->second].second = t;
    } else {
      base.emplace_back(name, t);
    }
  }
  return base;
}

}  // namespace ft
