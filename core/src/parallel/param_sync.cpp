#include "ft/parallel/param_sync.h"

#include <c10/core/GradMode.h>
#include <cmath>

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/optim/optim.h"
#include "ft/optim/precision.h"

namespace ft {

void broadcast_tensors(Comm& comm, const std::vector<at::Tensor>& tensors, int root) {
  if (comm.world_size() == 1 || tensors.empty()) return;
  c10::NoGradGuard no_grad;
  // One broadcast per dtype and device: no cast, so integer buffers and
  // 16-bit weights arrive exactly.
  std::vector<bool> done(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (done[i]) continue;
    std::vector<at::Tensor> group, parts;
    for (size_t j = i; j < tensors.size(); ++j) {
      if (!done[j] && tensors[j].scalar_type() == tensors[i].scalar_type() &&
          tensors[j].device() == tensors[i].device()) {
        group.push_back(tensors[j].detach());
        parts.push_back(group.back().reshape({-1}));
        done[j] = true;
      }
    }
    at::Tensor flat = at::cat(parts);
    comm.broadcast(flat, root);
    int64_t off = 0;
    for (auto& t : group) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

namespace {

void reduce_grads(Comm& comm, const std::vector<at::Tensor>& params, ReduceOp op) {
  if (comm.world_size() == 1 || params.empty()) return;
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> parts;
  for (const auto& p : params) {
    parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : at::zeros({p.numel()}, p.options()));
  }
  at::Tensor flat = at::cat(parts);
  comm.all_reduce(flat, op);
  int64_t off = 0;
  for (auto p : params) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    p.grad().copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }
}

}  // namespace

void average_grads(Comm& comm, const std::vector<at::Tensor>& params) { reduce_grads(comm, params, ReduceOp::Avg); }
void sum_grads(Comm& comm, const std::vector<at::Tensor>& params) { reduce_grads(comm, params, ReduceOp::Sum); }

StepResult update_from_grads(const std::vector<at::Tensor>& grads, Precision& precision, TensorOptimizer& optimizer,
                             const StepOptions& options, Comm* overflow_comm,
                             const std::function<double()>& global_norm_squared) {
  StepResult result;
  bool found_inf = precision.unscale_and_check(grads);
  if (precision.uses_loss_scaling() && overflow_comm && overflow_comm->world_size() > 1) {
    at::Tensor flag = at::full({1}, found_inf ? 1.0f : 0.0f, at::kFloat);
    overflow_comm->all_reduce(flag, ReduceOp::Max);
    found_inf = flag.item<float>() > 0.0f;
  }
  result.skipped = found_inf;
  if (!found_inf) {
    if (options.max_grad_norm > 0.0 || options.report_grad_norm) {
      result.grad_norm = std::sqrt(global_norm_squared());
      clip_grads(grads, result.grad_norm, options.max_grad_norm);
    } else {
      result.grad_norm = std::nan("");
    }
    optimizer.step(options.lr, grads);
  } else {
    result.grad_norm = std::nan("");
  }
  c10::NoGradGuard no_grad;
  for (const auto& g : grads) {
    if (g.defined()) at::Tensor(g).zero_();
  }
  precision.update(found_inf);
  return result;
}

SplitOptimizer::SplitOptimizer(const OptimizerSpec& spec, std::vector<OptimSlot> slots)
    : TensorOptimizer(spec, std::move(slots)), norm_buf_(at::zeros({1}, at::kDouble)) {}

StepResult SplitOptimizer::update(const std::vector<at::Tensor>& grads, Precision& precision,
                                  const StepOptions& options, Comm* group, const std::vector<at::Tensor>& split,
                                  const std::vector<at::Tensor>& whole,
                                  const std::function<void(const std::function<void()>&)>& around) {
  const bool alone = group == nullptr || group->world_size() == 1;
  return update_from_grads(grads, precision, *this, options, alone ? nullptr : group, [&] {
    double sq = grad_norm_squared(split);
    if (!alone) {
      norm_buf_.fill_(sq);
      auto reduce = [&] { group->all_reduce(norm_buf_, ReduceOp::Sum); };
      if (around) {
        around(reduce);
      } else {
        reduce();
      }
      sq = norm_buf_.item<double>();
    }
    return sq + (whole.empty() ? 0.0 : grad_norm_squared(whole));
  });
}

StateBytes held_state_bytes(const std::vector<at::Tensor>& params, const TensorOptimizer& optimizer) {
  StateBytes b;
  for (const auto& p : params) {
    b.params += p.numel() * static_cast<int64_t>(p.element_size());
    if (p.grad().defined()) b.grads += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
  }
  b.optimizer = optimizer.state_bytes();
  return b;
}

}  // namespace ft
