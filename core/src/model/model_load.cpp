// EncoderModel::load_weights: initial weights and checkpoints
// into the parameters, with transformers' from_pretrained rules (see model.h).
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/io/saved_state.h"
#include "text_affix.h"

namespace ft {
namespace {

// The module a parameter belongs to ("classifier", "bert.pooler.dense"): a
// head module is present or absent as a whole, never half.
std::string module_of(const std::string& name) { return name.substr(0, name.rfind('.')); }

std::string shape_of(const at::Tensor& t) { return fmt::format("{}", fmt::join(t.sizes(), "x")); }

bool is_base_model_key(const std::string& key, const EncoderFamily& family) {
  for (const auto& module : family.base_modules)
    if (starts_with(key, module)) return true;
  return false;
}

// Names as this model knows them. A base-model checkpoint (a BertModel, what
// an encoder like all-MiniLM-L6-v2 ships) has no "bert." prefix: transformers
// adds the base model prefix when the checkpoint has none of its keys, and so
// do we. RoBERTa's masked-LM file may keep the decoder's bias under
// lm_head.decoder.bias only (it is tied to lm_head.bias).
std::map<std::string, const at::Tensor*> canonical_names(const TensorList& weights, const EncoderFamily& family,
                                                        const HeadNames& mlm, bool& base_model_names) {
  std::map<std::string, const at::Tensor*> given;
  bool has_prefix = false, has_base_keys = false;
  for (const auto& [name, t] : weights) {
    std::string key = hf_name(name);  // checkpoints of a DDP-wrapped model carry "module." prefixes
    has_prefix |= starts_with(key, family.prefix());
    has_base_keys |= is_base_model_key(key, family);
    given[key] = &t;
  }
  if (given.count(mlm.tied_bias) && !given.count(mlm.output_bias)) given[mlm.output_bias] = given[mlm.tied_bias];
  base_model_names = !has_prefix && has_base_keys;
  if (!base_model_names) return given;
  std::map<std::string, const at::Tensor*> renamed;
  for (const auto& [key, t] : given) renamed[is_base_model_key(key, family) ? family.prefix() + key : key] = t;
  return renamed;
}

// Full names when few, else grouped by module: "cls.predictions.* (5 tensors)".
std::string describe_tensors(const std::vector<std::string>& names) {
  if (names.size() <= 6) return fmt::format("{}", fmt::join(names, ", "));
  std::vector<std::pair<std::string, int>> groups;
  for (const auto& n : names) {
    const auto first = n.find('.');
    const auto second = first == std::string::npos ? first : n.find('.', first + 1);
    const std::string module = n.substr(0, second == std::string::npos ? n.rfind('.') : second);
    if (groups.empty() || groups.back().first != module) groups.emplace_back(module, 0);
    ++groups.back().second;
  }
  std::string out;
  for (const auto& [module, count] : groups) out += fmt::format("{}{}.* ({} tensors)", out.empty() ? "" : ", ", module, count);
  return out;
}

}  // namespace

std::vector<std::string> describe_load(const EncoderModel::LoadReport& r, const std::string& source) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("{}: loaded {} tensors{}", source, r.loaded,
                              r.base_model_names ? fmt::format(" (a {}Model: its names gained the '{}' prefix)",
                                                               r.family_class, r.family_prefix)
                                                 : ""));
  if (!r.initialised.empty()) {
    lines.push_back(fmt::format("{}: newly initialised, not in the weights: {}", source, describe_tensors(r.initialised)));
  }
  if (!r.replaced.empty()) {
    lines.push_back(fmt::format("{}: classifier replaced and newly initialised (as ignore_mismatched_sizes=True): {}",
                                source, fmt::join(r.replaced, "; ")));
  }
  if (!r.ignored.empty()) {
    lines.push_back(fmt::format("{}: not used by this model: {}", source, describe_tensors(r.ignored)));
  }
  return lines;
}

EncoderModel::LoadReport EncoderModel::load_weights(const TensorList& weights,
                                                                                      const std::string& source,
                                                                                      const LoadOptions& options) {
  const EncoderFamily& family = config_.family();
  // Other heads' tensors, and buffers HF keeps in some files.
  const std::string base = family.prefix();
  std::vector<std::string> other_heads = {base + "embeddings.position_ids", base + "embeddings.token_type_ids",
                                          base + "pooler.", base + "pooler_", "classifier."};
  other_heads.insert(other_heads.end(), family.other_heads.begin(), family.other_heads.end());
  LoadReport report;
  report.family_class = family.class_prefix;
  report.family_prefix = base;
  const HeadNames mlm = head_names(config_, BertHead::kMaskedLM);
  const auto given = canonical_names(weights, family, mlm, report.base_model_names);
  const int head = num_units() - 1;
  std::set<std::string> given_modules;
  for (const auto& [key, t] : given) given_modules.insert(module_of(key));

  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& item : named_parameters()) {
    const std::string& key = item.key();
    const bool optional_head = options.head_optional && unit_of(key) == head;
    const bool classifier = starts_with(key, "classifier.");
    auto it = given.find(key);
    if (classifier && options.replace_classifier) {
      if (it != given.end()) used.insert(key);
      report.replaced.push_back(key + ": new label set");
      continue;
    }
    if (it == given.end()) {
      if (optional_head && !given_modules.count(module_of(key))) {
        report.initialised.push_back(key);
        continue;
      }
      fail("{}: missing tensor '{}' (the checkpoint does not match config.json)", source, key);
    }
    const at::Tensor& src = *it->second;
    if (src.sizes() != item.value().sizes()) {
      if (optional_head && classifier) {
        // Another num_labels: the classifier starts afresh (ignore_mismatched_sizes=True).
        used.insert(key);
        report.replaced.push_back(fmt::format("{}: {} given, {} here", key, shape_of(src), shape_of(item.value())));
        continue;
      }
      fail("{}: tensor '{}' has shape {}, config.json implies {}", source, key, shape_of(src),
           shape_of(item.value()));
    }
    if (!src.is_floating_point()) {
      fail("{}: tensor '{}' has dtype {}, but config.json describes a model with floating-point weights", source,
           key, c10::toString(src.scalar_type()));
    }
    item.value().copy_(src);
    used.insert(key);
    ++report.loaded;
  }
  for (const auto& [key, t] : given) {
    if (used.count(key)) continue;
    bool ignorable = false;
    for (const auto& prefix : other_heads) ignorable |= starts_with(key, prefix);
    if (!ignorable) fail("{}: unexpected tensor '{}' (not part of this {} model)", source, key, family.model_type);
    const bool buffer = ends_with(key, "embeddings.position_ids") || ends_with(key, "embeddings.token_type_ids");
    // The tied decoder's copies are this model's tensors under another name, not unused ones.
    const bool tied = key == mlm.tied_bias || key == mlm.output_weight;
    if (!buffer && !tied) report.ignored.push_back(key);
  }
  return report;
}

}  // namespace ft
