// A custom autograd function whose backward recomputes its forward.
//
// Why parameters are inputs of the function (unlike PyTorch's reentrant
// checkpoint, which only takes the activations): their gradients then leave
// this node like any other node's, and the OUTER backward runs their
// AccumulateGrad nodes and post-hooks. Gradient hooks that queue an
// end-of-backward callback (GradBuffer, ZeRO) therefore see the backward
// they belong to, not the nested one below; and a layer whose input needs
// no gradient (frozen embeddings) still trains its own weights.
#include "ft/model/activation_checkpoint.h"

#include <mutex>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "compat.h"

namespace ft {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor generator_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The generators dropout draws from: always the CPU one, and the CUDA one
// of the device the activations live on.
struct RngStates {
  at::Tensor cpu;
  at::Tensor device;
  c10::Device where{c10::kCPU};

  static RngStates capture(c10::Device where) {
    RngStates s;
    s.where = where;
    s.cpu = generator_state(at::detail::getDefaultCPUGenerator());
    if (where.is_cuda()) s.device = generator_state(at::globalContext().defaultGenerator(where));
    return s;
  }
  void restore() const {
    set_generator_state(at::detail::getDefaultCPUGenerator(), cpu);
    if (where.is_cuda()) set_generator_state(at::globalContext().defaultGenerator(where), device);
  }
};

// While alive, the generators replay the forward's draws; afterwards they
// continue where the rest of the run left them, so checkpointing does not
// shift any later random draw.
class ReplayRng {
 public:
  explicit ReplayRng(const RngStates& forward) : now_(RngStates::capture(forward.where)) { forward.restore(); }
  ~ReplayRng() { now_.restore(); }
  ReplayRng(const ReplayRng&) = delete;
  ReplayRng& operator=(const ReplayRng&) = delete;

 private:
  RngStates now_;
};

struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static AutocastState capture() {
    AutocastState s;
    s.cpu = compat::autocast_enabled(c10::kCPU);
    s.cpu_dtype = compat::autocast_dtype(c10::kCPU);
    s.cuda = compat::autocast_enabled(c10::kCUDA);
    s.cuda_dtype = compat::autocast_dtype(c10::kCUDA);
    return s;
  }
  void apply() const {
    compat::set_autocast(c10::kCPU, cpu, cpu_dtype);
    compat::set_autocast(c10::kCUDA, cuda, cuda_dtype);
  }
};

// The forward's autocast state for the recompute (backward runs outside the
// strategy's autocast region), with the same cast-cache rule as
// Precision::Autocast: the cache dies with the outermost region.
class ReplayAutocast {
 public:
  explicit ReplayAutocast(const AutocastState& forward) : previous_(AutocastState::capture()) {
    nested_ = forward.cpu || forward.cuda;
    forward.apply();
    if (nested_) at::autocast::increment_nesting();
  }
  ~ReplayAutocast() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }
  ReplayAutocast(const ReplayAutocast&) = delete;
  ReplayAutocast& operator=(const ReplayAutocast&) = delete;

 private:
  AutocastState previous_;
  bool nested_ = false;
};

// What backward needs besides the saved input; travels in the context as a
// capsule because AutogradContext::saved_data only holds IValues.
struct Recompute : torch::CustomClassHolder {
  CheckpointFn fn;
  std::vector<at::Tensor> params;  // the function's inputs 1..n
  RngStates rng;
  AutocastState autocast;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Runs with grad mode off (Function::apply), so fn records nothing.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, at::TensorList /*params*/,
                            const c10::intrusive_ptr<Recompute>& state) {
    ctx->save_for_backward({input});
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return state->fn(input, RunPass::kNoGraph);
  }

  // Gradients for (input, params..., state): the last is never a tensor.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto state = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data.at("state").toCapsule());
    const at::Tensor input = ctx->get_saved_variables().at(0);
    const size_t n = state->params.size();
    variable_list result(n + 2);

    std::vector<at::Tensor> wrt;
    std::vector<size_t> slot;
    at::Tensor x = input.detach();
    if (ctx->needs_input_grad(0)) {
      x.requires_grad_(true);
      wrt.push_back(x);
      slot.push_back(0);
    }
    for (size_t k = 0; k < n; ++k) {
      if (!ctx->needs_input_grad(k + 1)) continue;
      wrt.push_back(state->params[k]);
      slot.push_back(k + 1);
    }
    if (wrt.empty()) return result;

    at::Tensor out;
    {
      ReplayRng rng(state->rng);
      ReplayAutocast autocast(state->autocast);
      at::AutoGradMode grad_mode(true);
      // Autocast caches its low-precision copy of a LEAF that requires grad,
      // so a leaf here would sum its copy's gradients in bf16/fp16 where the
      // original input (a non-leaf) summed them in fp32. A view is no leaf.
      const bool as_non_leaf = x.requires_grad() && !input.is_leaf();
      out = state->fn(as_non_leaf ? x.view_as(x) : x, RunPass::kRecompute);
    }
    if (!out.requires_grad()) return result;
    // Captures the gradients of `wrt` without accumulating into any `.grad`:
    // the outer backward does that when this function returns them.
    auto grads = torch::autograd::grad({out}, wrt, {grad_out.at(0)}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < grads.size(); ++i) result[slot[i]] = std::move(grads[i]);
    return result;
  }
};

}  // namespace

at::Tensor checkpoint(const at::Tensor& input, const std::vector<at::Tensor>& params, CheckpointFn fn) {
  if (!at::GradMode::is_enabled()) return fn(input, RunPass::kPlain);
  auto state = c10::make_intrusive<Recompute>();
  for (const auto& p : params)
    if (p.requires_grad()) state->params.push_back(p);
  if (!input.requires_grad() && state->params.empty()) return fn(input, RunPass::kPlain);
  state->fn = std::move(fn);
  state->rng = RngStates::capture(input.device());
  state->autocast = AutocastState::capture();
  const std::vector<at::Tensor> inputs = state->params;
  return CheckpointFunction::apply(input, at::TensorList(inputs), state);
}

}  // namespace ft
