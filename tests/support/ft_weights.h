// Comparing trained weights: tensor lists and saved model.safetensors files.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include <ATen/ATen.h>

#include "ft/io/safetensors.h"
#include "ft/base/types.h"
#include "ft_test.h"

namespace ft_test {

// The largest element difference between two tensor lists holding the
// same names and shapes (in any order); a missing name or a shape mismatch
// fails the test case.
inline double max_abs_diff(const ft::TensorList& a, const ft::TensorList& b) {
  std::map<std::string, at::Tensor> by_name(b.begin(), b.end());
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(by_name.count(name) == 1);
    REQUIRE(t.sizes() == by_name[name].sizes());
    worst = std::max(worst, (t - by_name[name]).abs().max().item<double>());
  }
  return worst;
}

// The same, for two saved model.safetensors.
inline double max_weight_diff(const std::filesystem::path& a, const std::filesystem::path& b) {
  return max_abs_diff(ft::safetensors::load(a.string()), ft::safetensors::load(b.string()));
}

}  // namespace ft_test
