#include "ft/optim/optim.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "ft/model/encoder_family.h"
#include "ft/base/error.h"
#include "inplace_scale.h"
#include "simd_clones.h"

namespace ft {
namespace {

// The step's scalars every slot shares; per-slot decay and step size live in
// the FusedSegment.
struct AdamWScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps;
};

// All four tensors CPU fp32, contiguous, the same size: the fused loop applies.
bool fusable(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v) {
  for (const at::Tensor* t : {&p, &g, &m, &v}) {
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat || !t->is_contiguous()) return false;
    if (t->numel() != p.numel()) return false;
  }
  return true;
}

// ONE pass over every fusable slot, as if their storage were one flat
// buffer (which it is for GradBuffer / flat-shard users): a single parallel
// region per step instead of several tensor ops per parameter. `Segment`s
// are sorted by `begin`, their index in the concatenated element space;
// `f(segment, j0, j1)` updates elements [j0, j1) of one segment. Per-slot
// weight decay and LR scale live in the segments, so parameter groups stay
// exact.
template <typename Segment, typename F>
void segmented_for(const std::vector<Segment>& segs, int64_t total, const F& f) {
  at::parallel_for(0, total, 16384, [&](int64_t begin, int64_t end) {
    auto it = std::upper_bound(segs.begin(), segs.end(), begin,
                               [](int64_t i, const Segment& s) { return i < s.begin; });
    size_t si = static_cast<size_t>(it - segs.begin()) - 1;
    for (int64_t i = begin; i < end; ++si) {
      const Segment& s = segs[si];
      const int64_t stop = std::min(end, si + 1 < segs.size() ? segs[si + 1].begin : total);
      f(s, i - s.begin, stop - s.begin);
      i = stop;
    }
  });
}

// One slot's share of the fused pass; the same operations in the same order
// as the op-by-op paths below, each rounded to fp32 as ATen does.
struct FusedSegment {
  float* p;
  const float* g;
  float* m;  // AdamW exp_avg, SGD momentum buffer (null without momentum)
  float* v;  // AdamW exp_avg_sq
  int64_t begin;
  float decay, step_size;  // AdamW: 1 - lr·wd and -lr/bc1; SGD: wd and -lr
};

// The element loops, in clones: the baseline build's SSE code spent a third
// of the AdamW pass on sqrt and division, which AVX-512 does 4x wider. The
// order of operations is the op-by-op path's and this file builds with
// -ffp-contract=off (core/CMakeLists.txt), so no clone rounds differently.
FT_SIMD_CLONES void adamw_range(const FusedSegment& s, const AdamWScalars& k, int64_t j0, int64_t j1) {
  float* __restrict p = s.p;
  float* __restrict m = s.m;
  float* __restrict v = s.v;
  const float* __restrict g = s.g;
  for (int64_t j = j0; j < j1; ++j) {
    const float gi = g[j];
    const float pi = p[j] * s.decay;
    const float mi = m[j] * k.beta1 + k.one_minus_beta1 * gi;
    const float vi = v[j] * k.beta2 + k.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
    m[j] = mi;
    v[j] = vi;
    p[j] = pi + s.step_size * mi / denom;
  }
}

FT_SIMD_CLONES void sgd_range(const FusedSegment& s, float mu, bool first, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    float d = s.decay != 0.0f ? s.g[j] + s.decay * s.p[j] : s.g[j];
    if (s.m) {
      s.m[j] = first ? d : s.m[j] * mu + d;
      d = s.m[j];
    }
    s.p[j] = s.p[j] + s.step_size * d;
  }
}

// Sum of x² in double, over sixteen independent lanes: a single running sum
// serialises the loop on the add's latency (the norm cost 3 % of a step).
FT_SIMD_CLONES double sum_squares(const float* x, int64_t n) {
  double lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  }
  double total = 0.0;
  for (; i < n; ++i) total += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (double l : lanes) total += l;
  return total;
}

}  // namespace

TensorOptimizer::TensorOptimizer(const OptimizerSpec& spec, std::vector<OptimSlot> slots)
    : spec_(spec), slots_(std::move(slots)) {
  buffers_.reserve(slots_.size());
  for (const auto& slot : slots_) {
    std::vector<at::Tensor> b;
    if (spec_.kind == OptimizerKind::AdamW) {
      b = {at::zeros_like(slot.param), at::zeros_like(slot.param)};
    } else if (spec_.momentum != 0.0) {
      b = {at::zeros_like(slot.param)};
    }
    buffers_.push_back(std::move(b));
  }
}

std::vector<std::string> TensorOptimizer::buffer_names() const {
  if (spec_.kind == OptimizerKind::AdamW) return {"exp_avg", "exp_avg_sq"};
  if (spec_.momentum != 0.0) return {"momentum_buffer"};
  return {};
}

void TensorOptimizer::step(double lr, const std::vector<at::Tensor>& grads) {
  if (grads.size() != slots_.size()) fail("optimizer: {} grads for {} slots", grads.size(), slots_.size());
  ++step_;
  c10::NoGradGuard no_grad;
  if (spec_.kind == OptimizerKind::AdamW) {
    const double bc1 = 1.0 - std::pow(spec_.beta1, static_cast<double>(step_));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(spec_.beta2, static_cast<double>(step_)));
    const AdamWScalars k{static_cast<float>(spec_.beta1), static_cast<float>(1.0 - spec_.beta1),
                         static_cast<float>(spec_.beta2), static_cast<float>(1.0 - spec_.beta2),
                         static_cast<float>(bc2_sqrt), static_cast<float>(spec_.eps)};
    std::vector<FusedSegment> segs;
    segs.reserve(slots_.size());
    int64_t total = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const auto& g = grads[i];
      if (!g.defined()) continue;
      auto& p = slots_[i].param;
      const double slot_lr = lr * slots_[i].lr_scale;
      auto& exp_avg = buffers_[i][0];
      auto& exp_avg_sq = buffers_[i][1];
      if (fusable(p, g, exp_avg, exp_avg_sq)) {
        if (p.numel() == 0) continue;
        segs.push_back({p.data_ptr<float>(), g.data_ptr<float>(), exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>(),
                        total, static_cast<float>(1.0 - slot_lr * slots_[i].weight_decay),
                        static_cast<float>(-slot_lr / bc1)});
        total += p.numel();
        continue;
      }
      p.mul_(1.0 - slot_lr * slots_[i].weight_decay);
      exp_avg.mul_(spec_.beta1).add_(g, 1.0 - spec_.beta1);
      exp_avg_sq.mul_(spec_.beta2).addcmul_(g, g, 1.0 - spec_.beta2);
      auto denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(spec_.eps);
      p.addcdiv_(exp_avg, denom, -slot_lr / bc1);
    }
    segmented_for(segs, total, [&k](const FusedSegment& s, int64_t j0, int64_t j1) { adamw_range(s, k, j0, j1); });
    return;
  }
  const bool momentum = spec_.momentum != 0.0;
  std::vector<FusedSegment> segs;
  int64_t total = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    at::Tensor d = grads[i];
    if (!d.defined()) continue;
    auto& p = slots_[i].param;
    at::Tensor buf = momentum ? buffers_[i][0] : p;
    if (fusable(p, d, buf, p)) {
      if (p.numel() == 0) continue;
      segs.push_back({p.data_ptr<float>(), d.data_ptr<float>(), momentum ? buf.data_ptr<float>() : nullptr, nullptr,
                      total, static_cast<float>(slots_[i].weight_decay),
                      static_cast<float>(-lr * slots_[i].lr_scale)});
      total += p.numel();
      continue;
    }
    if (slots_[i].weight_decay != 0.0) d = d.add(p, slots_[i].weight_decay);
    if (momentum) {
      // torch.optim.SGD: the first step copies the gradient into the buffer.
      if (step_ == 1) {
        buf.copy_(d);
      } else {
        buf.mul_(spec_.momentum).add_(d);
      }
      d = buf;
    }
    p.add_(d, -lr * slots_[i].lr_scale);
  }
  const float mu = static_cast<float>(spec_.momentum);
  const bool first = step_ == 1;
  segmented_for(segs, total,
                [mu, first](const FusedSegment& s, int64_t j0, int64_t j1) { sgd_range(s, mu, first, j0, j1); });
}

OptimizerState TensorOptimizer::state() const {
  OptimizerState out;
  out.step = step_;
  const auto names = buffer_names();
  for (size_t i = 0; i < slots_.size(); ++i) {
    for (size_t k = 0; k < names.size(); ++k) out.tensors.emplace_back(slots_[i].name + "." + names[k], buffers_[i][k]);
  }
  return out;
}

void TensorOptimizer::load_state(const OptimizerState& state, const std::string& source) {
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, t] : state.tensors) by_name[name] = &t;
  const auto names = buffer_names();
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < slots_.size(); ++i) {
    for (size_t k = 0; k < names.size(); ++k) {
      const std::string key = slots_[i].name + "." + names[k];
      auto it = by_name.find(key);
      if (it == by_name.end()) fail("{}: optimizer state has no '{}'", source, key);
      if (it->second->numel() != buffers_[i][k].numel()) {
        fail("{}: optimizer state '{}' has {} elements, expected {}", source, key, it->second->numel(),
             buffers_[i][k].numel());
      }
      buffers_[i][k].copy_(it->second->reshape(buffers_[i][k].sizes()));
    }
  }
  step_ = state.step;
}

int64_t TensorOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buffers_)
    for (const auto& t : b) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

double grad_norm_squared(const std::vector<at::Tensor>& grads) {
  double total = 0.0;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    if (g.device().is_cpu() && g.scalar_type() == at::kFloat && g.is_contiguous()) {
      // Not g.norm(): that allocates a result tensor per parameter on every
      // step (~200 per BERT step).
      const float* x = g.data_ptr<float>();
      total += at::parallel_reduce(
          0, g.numel(), 32768, 0.0,
          [x](int64_t begin, int64_t end, double acc) { return acc + sum_squares(x + begin, end - begin); },
          [](double a, double b) { return a + b; });
      continue;
    }
    const double n = g.norm(2).item<double>();
    total += n * n;
  }
  return total;
}

void clip_grads(const std::vector<at::Tensor>& grads, double total_norm, double max_norm) {
  if (max_norm <= 0.0) return;
  const double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1.0) return;
  c10::NoGradGuard no_grad;
  for (const auto& g : grads)
    if (g.defined()) scale_inplace(g, coef, ScaleOp::kMul);
}

ParamPlan default_param_plan(const TensorList& params, double weight_decay, bool decay_all) {
  ParamPlan plan;
  for (const auto& [name, t] : params) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = is_layer_norm_parameter(name);
    ParamSettings s;
    s.weight_decay = (decay_all || !(is_bias || is_norm)) ? weight_decay : 0.0;
    plan[name] = s;
  }
  return plan;
}

std::vector<OptimSlot> slots_from_plan(const TensorList& params, const ParamPlan& plan) {
  std::vector<OptimSlot> slots;
  for (const auto& [name, t] : params) {
    auto it = plan.find(name);
    const ParamSettings s = it == plan.end() ? ParamSettings{} : it->second;
    if (!s.trainable) continue;
    slots.push_back({name, t, s.weight_decay, s.lr_scale});
  }
  return slots;
}

}  // namespace ft
