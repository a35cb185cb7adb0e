// A Strategy that does nothing real, shared by the test-only plugins.
// Every training method throws ft::Error("test plugin") so a test can check
// that exceptions cross the .so boundary; state_bytes() is the cheap call the
// lifetime test makes after the host is gone.
#pragma once

#include "ft/base/error.h"
#include "ft/plugin/plugin.h"

namespace ft_test_plugin {

class TestStrategy : public ft::Strategy {
 public:
  explicit TestStrategy(int64_t marker) : marker_(marker) {}

  void setup(std::shared_ptr<ft::EncoderModel>, const ft::OptimizerSpec&,
             const ft::ParamPlan&, ft::StrategyContext&) override {
    ft::fail("test plugin");
  }
  at::Tensor forward(const ft::Batch&) override { ft::fail("test plugin"); }
  void backward(const at::Tensor&, bool) override { ft::fail("test plugin"); }
  ft::StepResult step(const ft::StepOptions&) override { ft::fail("test plugin"); }
  ft::TensorList model_state() override { ft::fail("test plugin"); }
  ft::OptimizerState optimizer_state() override { ft::fail("test plugin"); }
  void load_state(const ft::TensorList&, const ft::OptimizerState*) override { ft::fail("test plugin"); }
  ft::StateBytes state_bytes() const override { return {marker_, 2 * marker_, 3 * marker_}; }

 private:
  int64_t marker_;
};

}  // namespace ft_test_plugin
