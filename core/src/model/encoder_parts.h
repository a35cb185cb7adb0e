// What an EncoderModel holds, private to core/src/model: encoder_model.cpp builds
// and runs it, tensor_parallel.cpp cuts it.
#pragma once

#include <functional>
#include <memory>

#include "ft/model/model.h"
#include "model/backbone.h"
#include "model/heads/head.h"

namespace ft {
namespace model_detail {

class DirectRunner final : public UnitRunner {
 public:
  at::Tensor run(int, RunPass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    return fn(input);
  }
};

}  // namespace model_detail

struct EncoderModel::Parts {
  const model_detail::Backbone* backbone = nullptr;
  std::shared_ptr<model_detail::BaseModelImpl> base;
  std::unique_ptr<model_detail::Head> head;
  model_detail::DirectRunner direct;
};

}  // namespace ft
