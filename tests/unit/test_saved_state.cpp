// ft/io/saved_state.h: how every strategy's load_state() finds saved tensors.
#include "ft/io/saved_state.h"

#include <ATen/ATen.h>

#include "ft/base/error.h"
#include "ft_test.h"

TEST_CASE("hf_name drops one DDP-style 'module.' prefix and nothing else") {
  CHECK(ft::hf_name("module.bert.pooler.dense.bias") == "bert.pooler.dense.bias");
  CHECK(ft::hf_name("bert.pooler.dense.bias") == "bert.pooler.dense.bias");
  CHECK(ft::hf_name("module.module.x") == "module.x");
  CHECK(ft::hf_name("bert.module.x") == "bert.module.x");
}

TEST_CASE("saved weights are found by HF name; optimizer state by its exact key; a missing one is one clear error") {
  const ft::TensorList model{{"module.classifier.bias", at::ones({2})}, {"classifier.weight", at::zeros({2, 4})}};
  const auto weights = ft::SavedTensors::weights(model);
  CHECK(weights.at("classifier.bias").equal(at::ones({2})));
  CHECK(weights.at("classifier.weight").sizes() == at::IntArrayRef{2, 4});
  CHECK(ft_test::error_of([&] { weights.at("bert.pooler.dense.bias"); }) ==
        "checkpoint: missing tensor 'bert.pooler.dense.bias'");

  ft::OptimizerState state;
  state.tensors = {{"module.classifier.bias.exp_avg", at::ones({2})}, {"classifier.bias.exp_avg_sq", at::ones({2})}};
  const auto saved = ft::SavedTensors::optimizer(state);
  CHECK(saved.at("classifier.bias.exp_avg_sq").numel() == 2);
  // Optimizer keys are ft's own, never prefixed: a prefixed one does not match.
  CHECK(ft_test::error_of([&] { saved.at("classifier.bias.exp_avg"); }) ==
        "checkpoint optimizer state: no 'classifier.bias.exp_avg'");
}
