// PipelineStrategy: setup, the unit runner, the schedule and the step.
// Checkpoint state is in pipeline_state.cpp.
#include "pipeline_strategy.h"

#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <algorithm>
#include <cmath>
#include <numeric>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/optim/param_plan.h"
#include "ft/parallel/param_sync.h"
#include "ft/optim/precision.h"

namespace ft {

namespace {
// Point-to-point tags: activations flow to the next stage, their gradients
// back; each receiver hears one direction from one peer, so the tags only
// make the intent readable.
constexpr int kActivationTag = 1;
constexpr int kGradientTag = 2;
}  // namespace

class PipelineStrategy::Runner final : public UnitRunner {
 public:
  explicit Runner(PipelineStrategy* owner) : owner_(owner) {}
  at::Tensor run(int index, RunPass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    return owner_->run_unit(index, input, fn);
  }
  bool computes(int index) const override { return owner_->owns(index); }

 private:
  PipelineStrategy* owner_;
};

PipelineStrategy::PipelineStrategy() = default;

PipelineStrategy::~PipelineStrategy() {
  if (model_) model_->set_unit_runner(nullptr);
}

Comm& PipelineStrategy::data_comm() { return mesh_->comm("dp"); }

int PipelineStrategy::owner_of(int unit) const {
  int s = 0;
  while (unit >= bounds_[static_cast<size_t>(s) + 1]) ++s;
  return s;
}

void PipelineStrategy::setup(std::shared_ptr<EncoderModel> model, const OptimizerSpec& optimizer,
                             const ParamPlan& plan, StrategyContext& ctx) {
  adopt(std::move(model), plan, ctx);
  Comm& world = *ctx.comm;
  options_ = pipeline_options_from(ctx.options, world.world_size());
  stages_ = options_.stages;
  mesh_ = std::make_unique<DeviceMesh>(world, std::vector<MeshDim>{{"pp", stages_}, {"dp", world.world_size() / stages_}},
                                       "strategy.options.stages");
  stage_ = mesh_->coordinate("pp");

  unit_params_ = model_->unit_parameters();
  if (options_.balance == StageBalance::kTime) {
    unit_micros_ = measured_unit_costs(*model_, world, ctx.device, 4, 128);
    bounds_ = balance_stages(unit_micros_, stages_);
  } else {
    bounds_ = balance_stages(unit_costs(unit_params_, options_.balance), stages_);
  }
  first_ = bounds_[static_cast<size_t>(stage_)];
  end_ = bounds_[static_cast<size_t>(stage_) + 1];
  // A unit that reads another stage's weights (the MLM decoder, tied to the
  // word embeddings) keeps a replica of them, as Megatron's embedding group.
  const int head = model_->num_units() - 1;
  std::vector<int> tied_units;
  for (int u : model_->units_read_by(head)) {
    if (owner_of(u) == owner_of(head)) continue;
    tied_units.push_back(u);
    if (last_stage()) replicas_.insert(u);
  }

  // Rank 0's weights everywhere (as DDP), then each stage keeps its own units.
  std::vector<at::Tensor> all;
  for (const auto& params : unit_params_)
    for (const auto& [name, t] : params) all.push_back(t);
  broadcast_tensors(world, all, 0);
  TensorList own;
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u)
    if (holds(u))
      for (const auto& named : unit_params_[static_cast<size_t>(u)]) own.push_back(named);
  auto slots = slots_from_plan(own, plan);
  for (const auto& s : slots) {
    trainable_.push_back(s.param);
    if (owns(model_->unit_of(s.name))) norm_params_.push_back(s.param);
  }
  optimizer_ = std::make_unique<SplitOptimizer>(optimizer, std::move(slots));
  if (!tied_units.empty()) {
    std::vector<std::vector<int>> groups;
    for (int s = 0; s + 1 < stages_; ++s) {
      const bool ends = s == owner_of(tied_units.front());
      groups.push_back(ends ? std::vector<int>{s, stages_ - 1} : std::vector<int>{s});
    }
    tied_comm_ = pipe().split("tied", groups);
    for (int u : tied_units)
      if (holds(u))
        for (const auto& [name, t] : unit_params_[static_cast<size_t>(u)])
          if (t.requires_grad()) tied_.push_back(t);
  }
  free_other_units();
  runner_ = std::make_unique<Runner>(this);
  model_->set_unit_runner(runner_.get());
  if (world.rank() == 0) report_stages();
}

// Another stage's weights are never read here: their storage goes, their
// sizes stay (parameter counts and names still describe the whole model).
void PipelineStrategy::free_other_units() {
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u) {
    if (holds(u)) continue;
    for (const auto& [name, t] : unit_params_[static_cast<size_t>(u)]) {
      c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
      at::DataPtr old = impl->set_data_ptr(at::DataPtr(nullptr, t.device()));
      impl->set_nbytes(0);
    }
  }
}

// The stage boundaries (and, balanced by time, each stage's measured
// milliseconds) as the "pipeline.stages" event.
void PipelineStrategy::report_stages() const {
  auto unit_name = [&](int u) {
    if (u == 0) return std::string("embeddings");
    if (u + 1 == static_cast<int>(unit_params_.size())) return std::string("head");
    return fmt::format("layer {}", u - 1);
  };
  nlohmann::json stages = nlohmann::json::array();
  std::vector<std::string> parts;
  for (int s = 0; s < stages_; ++s) {
    const int a = bounds_[static_cast<size_t>(s)], b = bounds_[static_cast<size_t>(s) + 1];
    int64_t n = 0, micros = 0;
    for (int u = a; u < b; ++u) {
      for (const auto& [name, t] : unit_params_[static_cast<size_t>(u)]) n += t.numel();
      if (!unit_micros_.empty()) micros += unit_micros_[static_cast<size_t>(u)];
    }
    nlohmann::json stage{{"stage", s}, {"first_unit", unit_name(a)}, {"last_unit", unit_name(b - 1)}, {"params", n}};
    if (!unit_micros_.empty()) stage["ms"] = static_cast<double>(micros) / 1e3;
    stages.push_back(stage);
    parts.push_back(fmt::format("stage {}: {}{} ({:.2f}M params{})", s, unit_name(a),
                                b - a > 1 ? " .. " + unit_name(b - 1) : std::string(), static_cast<double>(n) / 1e6,
                                unit_micros_.empty() ? "" : fmt::format(", {:.1f} ms", static_cast<double>(micros) / 1e3)));
  }
  const char* balance = options_.balance == StageBalance::kCompute      ? "compute"
                        : options_.balance == StageBalance::kTime       ? "time"
                        : options_.balance == StageBalance::kParameters ? "parameters"
                                                                        : "units";
  const char* schedule = options_.schedule == PipeSchedule::kGPipe ? "gpipe" : "1f1b";
  const std::string mesh = mesh_->describe("pp");
  nlohmann::json dims;
  for (const auto& d : mesh_->dims()) dims[d.name] = d.size;
  ctx_->events.emit("pipeline.stages",
                    nlohmann::json{{"stages", stages_}, {"schedule", schedule}, {"balance", balance},
                                   {"units", stages}, {"mesh", dims}},
                    fmt::format("pipeline: {} stages, schedule {}, balanced by {}; {}; mesh {}", stages_, schedule,
                                options_.balance == StageBalance::kTime ? "measured time (4 x 128 tokens, fwd+bwd)"
                                                                        : balance,
                                fmt::join(parts, "; "), mesh));
}

// ---------------------------------------------------------------- forward

at::Tensor PipelineStrategy::run_unit(int unit, const at::Tensor& input,
                                      const std::function<at::Tensor(const at::Tensor&)>& fn) {
  // The embeddings turn token ids [T] into activations [T, hidden], with
  // the model's carried rows below them (DeBERTa's relative-position
  // table); layers keep the shape.
  if (unit == 0) activation_shape_ = {input.size(0) + model_->carried_rows(), model_->config().hidden_size};
  if (owns(unit)) return fn(input);
  // The first unit after this stage's: `input` is what this stage computed,
  // with its graph (a checkpointed last layer's output included).
  if (unit == end_) {
    at::Tensor wire = input.detach().to(at::kFloat).contiguous();
    activation_sends_.push_back({pipe().send_async(wire, stage_ + 1, kActivationTag), wire});
    if (at::GradMode::is_enabled()) current_.sent = input;
    return input;
  }
  if (unit == first_ - 1) {
    at::Tensor in = at::empty(activation_shape_, at::TensorOptions().dtype(at::kFloat).device(ctx_->device));
    idle([&] { pipe().recv(in, stage_ - 1, kActivationTag); });
    if (at::GradMode::is_enabled()) {
      in.set_requires_grad(true);
      current_.received = in;
    }
    return in;
  }
  // A unit of another stage: nothing runs here, and nothing reads the result.
  return input;
}

template <typename F>
void PipelineStrategy::idle(F&& wait) {
  const auto t0 = Clock::now();
  wait();
  step_idle_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

at::Tensor PipelineStrategy::forward(const Batch& batch) {
  if (batch.features.defined()) {
    fail("strategy pipeline splits the encoder's layers over stages, and a batch of extracted features runs none "
         "of them; train the head with single, ddp or a zero/fsdp strategy");
  }
  const Batch b = model_inputs_on(batch, ctx_->device);
  current_ = Micro{};
  if (at::GradMode::is_enabled()) {
    if (!in_step_) {
      in_step_ = true;
      step_start_ = Clock::now();
      step_idle_s_ = 0;
      micro_in_step_ = 0;
    }
    ++micro_in_step_;
  }
  at::Tensor logits;
  {
    auto autocast = ctx_->precision->autocast();
    logits = model_->forward(b);
  }
  const bool training = at::GradMode::is_enabled();
  const std::vector<int64_t> shape = model_->logits_shape(b);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(ctx_->device);
  if (stages_ > 1 && training && !last_stage()) {
    // Training: the loss lives on the last stage; waiting for it here would
    // serialise the pipeline.
    logits = at::zeros(shape, f32);
  } else if (stages_ > 1 && !training) {
    at::Tensor shared = last_stage() ? logits.detach().to(at::kFloat).contiguous() : at::empty(shape, f32);
    idle([&] { pipe().broadcast(shared, stages_ - 1); });
    if (!last_stage()) logits = shared;
  }
  // Evaluation: the last stage had every activation of this forward, so the
  // sends are done. (Training's are waited for at the step's end.)
  if (!at::GradMode::is_enabled()) {
    for (auto& s : activation_sends_) s.work.wait();
    activation_sends_.clear();
  }
  if (at::GradMode::is_enabled()) waiting_.push_back(std::move(current_));
  current_ = Micro{};
  return logits;
}

// ---------------------------------------------------------------- backward

void PipelineStrategy::run_backward(Micro& m) {
  if (last_stage()) {
    ctx_->precision->scale_loss(m.loss).backward();
  } else {
    at::Tensor grad = at::empty(activation_shape_, at::TensorOptions().dtype(at::kFloat).device(ctx_->device));
    if (m.sent.defined()) grad = at::empty(m.sent.sizes(), grad.options());
    idle([&] { pipe().recv(grad, stage_ + 1, kGradientTag); });
    // Nothing before this point trains (a frozen first stage): the grad is
    // still received, so the sender's send completes.
    if (m.sent.defined() && m.sent.requires_grad()) m.sent.backward(grad.to(m.sent.scalar_type()));
  }
  if (stage_ > 0) {
    at::Tensor g = m.received.grad();
    at::Tensor wire = g.defined() ? g.to(at::kFloat).contiguous() : at::zeros_like(m.received);
    gradient_sends_.push_back({pipe().send_async(wire, stage_ - 1, kGradientTag), wire});
  }
  m = Micro{};
}

void PipelineStrategy::backward(const at::Tensor& loss, bool sync_grads) {
  if (waiting_.empty()) fail("pipeline: backward without a training forward");
  waiting_.back().loss = loss;
  // 1F1B: stage s lets p-1-s forwards wait (the last stage none); GPipe: all of them.
  const size_t limit = options_.schedule == PipeSchedule::kOneFOneB ? static_cast<size_t>(stages_ - 1 - stage_)
                                                                     : waiting_.size();
  while (!waiting_.empty() && (sync_grads || waiting_.size() > limit)) {
    run_backward(waiting_.front());
    waiting_.pop_front();
  }
  if (sync_grads) {
    idle([&] { wait_sends(); });
    if (tied_comm_) idle([&] { sum_grads(*tied_comm_, tied_); });  // both copies' shares
    average_grads(data_comm(), trainable_);  // dp replicas of this stage
  }
}

void PipelineStrategy::wait_sends() {
  for (auto* list : {&activation_sends_, &gradient_sends_}) {
    for (auto& s : *list) s.work.wait();
    list->clear();
  }
}

// ---------------------------------------------------------------- step

StepResult PipelineStrategy::step(const StepOptions& options) {
  wait_sends();
  std::vector<at::Tensor> grads, owned;
  for (const auto& p : trainable_) grads.push_back(p.grad());
  for (const auto& p : norm_params_) owned.push_back(p.grad());
  // Stages own disjoint parameters: the global norm sums their squares (a
  // replica's equal gradient counts at its owner only). The wait for it is
  // the end of the bubble: stage 0's last backward.
  const StepResult result = optimizer_->update(grads, *ctx_->precision, options, &pipe(), owned, {},
                                               [&](const std::function<void()>& reduce) { idle(reduce); });
  end_step_timing();
  return result;
}

void PipelineStrategy::end_step_timing() {
  if (!in_step_) return;
  in_step_ = false;
  micro_per_step_ = micro_in_step_;
  if (++steps_ == 1) return;
  wall_s_ += std::chrono::duration<double>(Clock::now() - step_start_).count();
  idle_s_ += step_idle_s_;
  ++timed_steps_;
}

void PipelineStrategy::teardown() {
  wait_sends();
  if (model_) model_->set_unit_runner(nullptr);
  if (stages_ > 1) {
    // Every stage's idle share, gathered so the stage that holds world rank 0
    // (the one that writes the metrics file) reports the whole pipeline.
    // Safe here: teardown follows a fit() that every rank finished.
    const double own = timed_steps_ > 0 && wall_s_ > 0 ? idle_s_ / wall_s_ : -1.0;
    at::Tensor shares = at::full({stages_}, 0.0, at::kDouble);
    shares[stage_] = own;
    pipe().all_reduce(shares, ReduceOp::Sum);
    std::vector<double> idle(stages_);
    for (int s = 0; s < stages_; ++s) idle[s] = shares[s].item<double>();
    // One line per pipeline, from its first stage (world rank 0 is one).
    if (stage_ != 0 || timed_steps_ == 0 || std::any_of(idle.begin(), idle.end(), [](double f) { return f < 0; })) {
      return;
    }
    const int p = stages_, m = micro_per_step_;
    const double mean = std::accumulate(idle.begin(), idle.end(), 0.0) / p;
    const double theory = (p - 1) / static_cast<double>(m + p - 1);
    std::vector<std::string> pct;
    for (double f : idle) pct.push_back(fmt::format("{:.1f}%", 100.0 * f));
    ctx_->events.emit("pipeline.bubble",
                      nlohmann::json{{"idle_fraction", mean}, {"stage_idle_fractions", idle}, {"steps", timed_steps_},
                                     {"theory_fraction", theory}, {"stages", p}, {"micro_batches", m},
                                     {"bench_note", fmt::format("bubble {:.0f}% (theory {:.0f}%)", 100.0 * mean,
                                                                100.0 * theory)}},
                      fmt::format("pipeline: idle {:.1f}% of the step time (stages {}) over {} steps (bubble "
                                  "theory (p-1)/(m+p-1) = {:.1f}% for p = {}, m = {})",
                                  100.0 * mean, fmt::join(pct, ", "), timed_steps_, 100.0 * theory, p, m));
  }
}

}  // namespace ft
