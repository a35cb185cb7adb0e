// Comparing trained weights: tensor lists and saved model.safetensors files.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <ATen/ATen.h>

#include "ft/safetensors.h"
#include "ft/types.h"

namespace ft_test {

// The largest element difference of two name-aligned tensor lists, or
// infinity when their names or shapes differ.
inline double max_abs_diff(const ft::TensorList& a, const ft::TensorList& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.sizes() != b[i].second.sizes()) return INFINITY;
    worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
  }
  return worst;
}

// The same, for two saved model.safetensors.
inline double max_weight_diff(const std::filesystem::path& a, const std::filesystem::path& b) {
  return max_abs_diff(ft::safetensors::load(a.string()), ft::safetensors::load(b.string()));
}

}  // namespace ft_test
