#include "ft/optim/param_plan.h"

#include <cmath>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/optim/optim.h"

namespace ft {

bool glob_match(const std::string& pattern, const std::string& name) {
  // Iterative matcher with one backtrack point: linear in practice and no
  // recursion depth to worry about on long patterns.
  size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

OptimizerSpec optimizer_spec(const TrainConfig& t) {
  OptimizerSpec spec;
  spec.kind = t.optimizer == "sgd" ? OptimizerKind::SGD : OptimizerKind::AdamW;
  spec.lr = t.lr;
  spec.beta1 = t.beta1;
  spec.beta2 = t.beta2;
  spec.eps = t.eps;
  spec.weight_decay = t.weight_decay;
  spec.momentum = t.momentum;
  spec.decay_bias_and_norm = t.decay_bias_and_norm;
  return spec;
}

ParamPlan build_param_plan(const EncoderModel& model, const TrainConfig& train,
                           const std::function<bool(const std::string&)>& lora_trainable) {
  const TensorList weights = model.weights();
  ParamPlan plan = default_param_plan(weights, train.weight_decay, train.decay_bias_and_norm);
  const int layers = static_cast<int>(model.config().num_hidden_layers);
  const int head_unit = layers + 1;

  if (train.freeze_layers > layers) {
    fail("train.freeze_layers: the model has {} encoder layers, got {} (use -1 for none, 0 for the embeddings only)",
         layers, train.freeze_layers);
  }
  for (const auto& pattern : train.freeze) {
    bool matched = false;
    for (const auto& [name, t] : weights) matched = matched || glob_match(pattern, name);
    if (!matched) {
      fail("train.freeze: pattern '{}' matches no parameter (names look like "
           "'bert.encoder.layer.0.attention.self.query.weight'; use * and ?)",
           pattern);
    }
  }

  int64_t trainable = 0;
  for (const auto& [name, t] : weights) {
    ParamSettings& s = plan[name];
    const int unit = model.unit_of(name);
    if (lora_trainable) {
      s.trainable = lora_trainable(name);
    } else {
      for (const auto& pattern : train.freeze) s.trainable = s.trainable && !glob_match(pattern, name);
      if (train.freeze_layers >= 0 && unit <= train.freeze_layers) s.trainable = false;
    }
    // Depth below the head: 0 for the head, L+1 for the embeddings.
    const int depth = head_unit - unit;
    s.lr_scale = std::pow(train.layer_lr_decay, depth);
    if (unit == head_unit && train.head_lr > 0) s.lr_scale = train.head_lr / train.lr;
    if (s.trainable) trainable += t.numel();
  }
  if (trainable == 0) fail("train.freeze: every parameter is frozen; nothing would train (check train.freeze / train.freeze_layers)");
  return plan;
}

void apply_trainable(EncoderModel& model, const ParamPlan& plan) {
  for (auto& item : model.named_parameters()) {
    auto it = plan.find(item.key());
    item.value().set_requires_grad(it == plan.end() || it->second.trainable);
  }
}

}  // namespace ft
