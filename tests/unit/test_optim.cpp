// TensorOptimizer: the fused single pass over every slot (CPU fp32
// contiguous) against PyTorch's update rules written out with ATen ops in
// fp64, for AdamW and SGD with per-slot weight decay and LR scale; slots
// that cannot fuse (a strided view) take the op-by-op path and must agree
// too. grad_norm_squared and clip_grads on the same tensors.
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include "ft/optim/optim.h"

namespace {

struct Case {
  std::vector<at::Tensor> params, grads[3];
  std::vector<ft::OptimSlot> slots;
};

// Four slots: two views into one flat buffer (as GradBuffer / flat shards
// lay them out), one tensor of its own, one strided view (not fusable).
Case make_case() {
  Case c;
  at::manual_seed(11);
  at::Tensor flat = at::randn({300});
  at::Tensor own = at::randn({7, 5});
  at::Tensor wide = at::randn({6, 8});
  c.params = {flat.narrow(0, 0, 200), flat.narrow(0, 200, 100), own, wide.t()};
  const double wd[] = {0.01, 0.0, 0.1, 0.05};
  const double scale[] = {1.0, 0.5, 2.0, 1.0};
  for (size_t i = 0; i < c.params.size(); ++i) {
    c.slots.push_back({"p" + std::to_string(i), c.params[i], wd[i], scale[i]});
  }
  for (auto& g : c.grads) {
    for (const auto& p : c.params) g.push_back(at::randn(p.sizes()).contiguous());
  }
  return c;
}

}  // namespace

TEST_CASE("fused AdamW over every slot equals PyTorch's AdamW per parameter") {
  Case c = make_case();
  std::vector<at::Tensor> ref, m, v;
  for (const auto& p : c.params) {
    ref.push_back(p.to(at::kDouble));
    m.push_back(at::zeros_like(ref.back()));
    v.push_back(at::zeros_like(ref.back()));
  }
  ft::OptimizerSpec spec;
  spec.lr = 1e-2;
  ft::TensorOptimizer opt(spec, c.slots);
  for (int step = 1; step <= 3; ++step) {
    opt.step(spec.lr, c.grads[step - 1]);
    for (size_t i = 0; i < ref.size(); ++i) {
      const double lr = spec.lr * c.slots[i].lr_scale;
      const at::Tensor g = c.grads[step - 1][i].to(at::kDouble);
      ref[i].mul_(1.0 - lr * c.slots[i].weight_decay);
      m[i].mul_(spec.beta1).add_(g, 1.0 - spec.beta1);
      v[i].mul_(spec.beta2).addcmul_(g, g, 1.0 - spec.beta2);
      const double bc1 = 1.0 - std::pow(spec.beta1, step), bc2 = 1.0 - std::pow(spec.beta2, step);
      ref[i].addcdiv_(m[i], v[i].sqrt() / std::sqrt(bc2) + spec.eps, -lr / bc1);
    }
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK((c.params[i].to(at::kDouble) - ref[i]).abs().max().item<double>() < 1e-6);
  }
  // The state is keyed by slot name, whichever path updated it.
  CHECK(opt.state().tensors.size() == 2 * c.slots.size());
}

TEST_CASE("fused SGD with momentum and weight decay equals torch.optim.SGD per parameter") {
  Case c = make_case();
  std::vector<at::Tensor> ref, buf;
  for (const auto& p : c.params) {
    ref.push_back(p.to(at::kDouble));
    buf.push_back(at::zeros_like(ref.back()));
  }
  ft::OptimizerSpec spec;
  spec.kind = ft::OptimizerKind::SGD;
  spec.lr = 0.1;
  spec.momentum = 0.9;
  ft::TensorOptimizer opt(spec, c.slots);
  for (int step = 1; step <= 3; ++step) {
    opt.step(spec.lr, c.grads[step - 1]);
    for (size_t i = 0; i < ref.size(); ++i) {
      at::Tensor d = c.grads[step - 1][i].to(at::kDouble) + c.slots[i].weight_decay * ref[i];
      buf[i] = step == 1 ? d : buf[i] * spec.momentum + d;
      ref[i].add_(buf[i], -spec.lr * c.slots[i].lr_scale);
    }
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK((c.params[i].to(at::kDouble) - ref[i]).abs().max().item<double>() < 1e-6);
  }
}

TEST_CASE("grad norm and clipping: fp64 sum of squares, in-place scaling") {
  Case c = make_case();
  double want = 0.0;
  for (const auto& g : c.grads[0]) want += g.to(at::kDouble).pow(2).sum().item<double>();
  const double got = ft::grad_norm_squared(c.grads[0]);
  CHECK(got == doctest::Approx(want).epsilon(1e-12));
  std::vector<at::Tensor> before;
  for (const auto& g : c.grads[0]) before.push_back(g.clone());
  ft::clip_grads(c.grads[0], std::sqrt(got), 1.0);
  const double coef = 1.0 / (std::sqrt(got) + 1e-6);
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK((c.grads[0][i].to(at::kDouble) - before[i].to(at::kDouble) * coef).abs().max().item<double>() < 1e-6);
  }
  CHECK(ft::grad_norm_squared(c.grads[0]) == doctest::Approx(1.0).epsilon(1e-5));
}
