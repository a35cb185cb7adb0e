#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "compat.h"
#include "ft/model/model.h"
#include "model/sgemm.h"

namespace ft {

namespace {

// An fp32 CPU Linear runs its products on oneDNN's sgemm where that is the
// faster library: x W^T (forward) and dy W (the input's gradient) are
// 1.1-1.25x OpenBLAS's at these encoders' sizes, 1 and 2 threads; dy^T x (the
// weight's gradient) is 0.82-0.87x on MiniLM's where OpenBLAS runs AVX-512
// kernels, so there it stays on LibTorch's mm (weight_grads_on_onednn,
// docs/performance.md). Autocast keeps LibTorch's linear, which casts.
bool onednn_applies(const at::Tensor& x, const at::Tensor& weight) {
  return x.device().is_cpu() && x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
         x.numel() > 0 && !compat::autocast_enabled(c10::kCPU);
}

at::Tensor shaped_like(const at::Tensor& rows, const at::Tensor& x, int64_t last) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = last;
  return rows.view(sizes);
}

// y = x W^T + b on x's rows.
at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t k = weight.size(1), n = weight.size(0);
  const at::Tensor rows = x.reshape({-1, k}).contiguous();
  const at::Tensor w = weight.contiguous();
  const int64_t m = rows.size(0);
  // The bias as C's starting value (beta 1), as addmm does; a copy, never a
  // view of the bias (expand().contiguous() is the bias itself when m is 1).
  at::Tensor y = at::empty({m, n}, x.options());
  if (bias.defined()) y.copy_(bias.unsqueeze(0).expand({m, n}));
  sgemm_rows(false, true, m, n, k, 1.0f, rows.data_ptr<float>(), k, w.data_ptr<float>(), k, bias.defined() ? 1.0f : 0.0f,
             y.data_ptr<float>(), n);
  return shaped_like(y, x, n);
}

// dW = dy^T x over x's rows ([n, k]).
at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x, int64_t k) {
  if (!weight_grads_on_onednn()) return at::mm(dy.t(), x.reshape({-1, k}));
  const at::Tensor rows = x.reshape({-1, k}).contiguous();
  const int64_t m = dy.size(0), n = dy.size(1);
  at::Tensor dw = at::empty({n, k}, dy.options());
  sgemm_rows(true, false, n, k, m, 1.0f, dy.data_ptr<float>(), n, rows.data_ptr<float>(), k, 0.0f,
             dw.data_ptr<float>(), k);
  return dw;
}

// The gradients of y = x W^T (+ b) from x and W saved by forward: dx, dW and,
// with a bias, db.
torch::autograd::variable_list linear_grads(torch::autograd::AutogradContext* ctx, const at::Tensor& grad,
                                            bool bias) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& weight = saved[1];
  const int64_t k = weight.size(1), n = weight.size(0);
  const at::Tensor dy = grad.reshape({-1, n}).contiguous();
  const int64_t m = dy.size(0);
  torch::autograd::variable_list out(bias ? 3 : 2);
  if (ctx->needs_input_grad(0)) {
    const at::Tensor w = weight.contiguous();
    at::Tensor rows = at::empty({m, k}, dy.options());
    sgemm_rows(false, false, m, k, n, 1.0f, dy.data_ptr<float>(), n, w.data_ptr<float>(), k, 0.0f, rows.data_ptr<float>(), k);
    out[0] = shaped_like(rows, x, k);
  }
  if (ctx->needs_input_grad(1)) out[1] = weight_grad(dy, x, k);
  if (bias && ctx->needs_input_grad(2)) out[2] = dy.sum(0);
  return out;
}

// Two functions, since LibTorch 1.13's autograd takes no undefined input.
struct OnednnLinear : torch::autograd::Function<OnednnLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    ctx->save_for_backward({x, weight});
    return linear_rows(x, weight, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return linear_grads(ctx, grads[0], true);
  }
};

struct OnednnLinearNoBias : torch::autograd::Function<OnednnLinearNoBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    return linear_rows(x, weight, at::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return linear_grads(ctx, grads[0], false);
  }
};

}  // namespace

at::Tensor AdaptableLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y;
  if (!onednn_applies(x, weight)) {
    y = torch::nn::LinearImpl::forward(x);
  } else if (at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                            (bias.defined() && bias.requires_grad()))) {
    y = bias.defined() ? OnednnLinear::apply(x, weight, bias) : OnednnLinearNoBias::apply(x, weight);
  } else {
    y = linear_rows(x, weight, bias);
  }
  if (adapter) y = y + adapter(x);
  return output_adapter ? y + output_adapter(y) : y;
}

}  // namespace ft
