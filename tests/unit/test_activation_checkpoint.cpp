// Activation checkpointing (ft/model/activation_checkpoint.h, train.activation_checkpointing).
//
// In-process: ft::checkpoint against plain autograd (outputs, gradients,
// dropout masks, later random draws, gradient hooks firing once); the model
// trained with and without it under the replicated and sharded strategies at
// world size 1 (zero3 frees and re-gathers the weights for the recompute),
// dropout on and off, and evaluation not checkpointing.
// Subprocess (the real `ft`): parity-tiny with checkpointing on 1 and 2
// ranks (zero3, ddp, ...) against the single-process run and the PyTorch
// reference; the dp refusal; peak RSS with and without on a run whose
// memory is mostly activations.
#include <c10/core/GradMode.h>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "ft/model/activation_checkpoint.h"
#include "ft/comm/comm.h"
#include "ft/model/model.h"
#include "ft/optim/optim.h"
#include "ft/optim/precision.h"
#include "ft/parallel/replicated_strategy.h"
#include "ft/observe/trace.h"
#include "sharded_strategy.h"
#include "ft_run.h"

namespace ft {
// For doctest's messages (found by ADL).
std::ostream& operator<<(std::ostream& os, RunPass pass) {
  const char* names[] = {"kPlain", "kNoGraph", "kRecompute"};
  return os << names[static_cast<int>(pass)];
}
}  // namespace ft

namespace {

// Counts a parameter's AccumulateGrad post-hook calls: what DDP's buckets
// and ZeRO's reduce-scatter count on.
class CountingHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit CountingHook(int* count) : count_(count) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++*count_;
    return outputs;
  }

 private:
  int* count_;
};

struct PlainRun {
  at::Tensor out, input_grad;
  std::vector<at::Tensor> param_grads;
  int hook_calls = 0;
  int fn_calls = 0;
  std::vector<ft::RunPass> passes;
  double draw_after = 0;  // first random number after backward
};

// y = 2 * dropout(gelu(W x + b)), with and without checkpointing, from the
// same generator state. A random draw between forward and backward must
// not leak into the recompute's masks.
PlainRun linear_dropout_run(bool ckpt, bool input_requires_grad) {
  at::manual_seed(3);
  torch::nn::Linear lin(6, 5);
  torch::nn::Dropout drop(0.5);
  PlainRun r;
  // The accumulator's pointer type: std::shared_ptr (LibTorch 1.13) or c10::intrusive_ptr (2.15).
  std::vector<std::decay_t<decltype(torch::autograd::impl::grad_accumulator(lin->weight))>> accs;
  std::vector<uintptr_t> keys;
  for (auto& p : lin->parameters()) {
    accs.push_back(torch::autograd::impl::grad_accumulator(p));
    keys.push_back(accs.back()->add_post_hook(std::make_unique<CountingHook>(&r.hook_calls)));
  }
  auto fn = [&](const at::Tensor& x, ft::RunPass pass) {
    ++r.fn_calls;
    r.passes.push_back(pass);
    return drop(at::gelu(lin(x))) * 2.0;
  };
  at::Tensor x = at::randn({4, 6}).requires_grad_(input_requires_grad);
  r.out = ckpt ? ft::checkpoint(x, lin->parameters(), fn) : fn(x, ft::RunPass::kPlain);
  (void)at::rand({3});
  (r.out * r.out).sum().backward();
  r.draw_after = at::rand({1}).item<double>();
  if (input_requires_grad) r.input_grad = x.grad();
  for (auto& p : lin->parameters()) r.param_grads.push_back(p.grad());
  for (size_t i = 0; i < accs.size(); ++i) accs[i]->del_post_hook(keys[i]);
  return r;
}

ft::BertConfig small_config(double dropout) {
  ft::BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = dropout;
  c.attention_probs_dropout_prob = dropout;
  c.num_labels = 3;
  c.id2label = {"a", "b", "c"};
  return c;
}

ft::Batch make_batch(at::Generator& gen) {
  ft::Batch b;
  b.input_ids = at::randint(1, 50, {6, 10}, gen, at::kLong);
  b.attention_mask = at::ones({6, 10}, at::kLong);
  b.attention_mask.narrow(1, 7, 3).narrow(0, 4, 2).zero_();
  b.token_type_ids = at::zeros({6, 10}, at::kLong);
  b.labels = at::randint(0, 3, {6}, gen, at::kLong);
  return b;
}

struct TrainResult {
  std::vector<double> losses;
  ft::TensorList weights;
};

// The Trainer's loop in miniature at world size 1: same init, same batches,
// same dropout stream for both settings of `ckpt`.
TrainResult train(std::shared_ptr<ft::Strategy> strategy, double dropout, bool ckpt, bool freeze_embeddings = false,
                  ft::PrecisionMode mode = ft::PrecisionMode::FP32, ft::Tracer* tracer = nullptr) {
  auto comm = ft::Comm::create(ft::DistEnv{});
  ft::Precision precision{mode, c10::kCPU};
  ft::StrategyContext ctx;
  ctx.comm = comm.get();
  ctx.precision = &precision;
  ctx.trace = tracer;
  at::manual_seed(7);
  auto model = std::make_shared<ft::EncoderModel>(small_config(dropout));
  model->set_activation_checkpointing(ckpt);
  auto plan = ft::default_param_plan(model->weights(), 0.01, false);
  if (freeze_embeddings)
    for (auto& [name, s] : plan) s.trainable = name.rfind("bert.embeddings.", 0) != 0;
  ft::OptimizerSpec spec;
  spec.lr = 1e-2;
  strategy->setup(model, spec, plan, ctx);
  at::manual_seed(11);  // the dropout stream
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  TrainResult r;
  for (int step = 0; step < 4; ++step) {
    if (tracer) tracer->begin_step(step + 1);
    ft::Batch b = make_batch(gen);
    auto loss = at::cross_entropy_loss(strategy->forward(b), b.labels);
    strategy->backward(loss, true);
    strategy->step({1e-2, 1.0});
    if (tracer) tracer->end_step(step + 1);
    r.losses.push_back(loss.item<double>());
  }
  r.weights = strategy->model_state();
  strategy->teardown();
  return r;
}

std::shared_ptr<ft::Strategy> replicated() { return std::make_shared<ft::ReplicatedStrategy>(); }
std::shared_ptr<ft::Strategy> sharded(ft::ShardingPolicy p) { return std::make_shared<ft::ShardedStrategy>(p); }

void check_same_training(const TrainResult& a, const TrainResult& b, double tol) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(a.losses[i] - b.losses[i]) <= tol);
  }
  REQUIRE(a.weights.size() == b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    INFO(a.weights[i].first);
    REQUIRE(a.weights[i].first == b.weights[i].first);
    CHECK((a.weights[i].second - b.weights[i].second).abs().max().item<double>() <= tol);
  }
}

}  // namespace

TEST_CASE("checkpoint(): same output, gradients, dropout masks and later random draws as plain autograd") {
  for (bool input_grad : {true, false}) {
    CAPTURE(input_grad);
    const PlainRun plain = linear_dropout_run(false, input_grad);
    const PlainRun ckpt = linear_dropout_run(true, input_grad);
    CHECK(at::equal(plain.out, ckpt.out));
    if (input_grad) CHECK(at::equal(plain.input_grad, ckpt.input_grad));
    REQUIRE(ckpt.param_grads.size() == 2);
    // A frozen input (e.g. frozen embeddings) still trains the parameters.
    for (size_t i = 0; i < 2; ++i) {
      REQUIRE(ckpt.param_grads[i].defined());
      CHECK(at::equal(plain.param_grads[i], ckpt.param_grads[i]));
    }
    CHECK(plain.hook_calls == 2);
    CHECK(ckpt.hook_calls == 2);  // once per parameter, from the outer backward
    CHECK(plain.fn_calls == 1);
    CHECK(ckpt.fn_calls == 2);  // forward + recompute
    CHECK(ckpt.passes == std::vector<ft::RunPass>{ft::RunPass::kNoGraph, ft::RunPass::kRecompute});
    CHECK(plain.draw_after == ckpt.draw_after);
  }
}

TEST_CASE("checkpoint(): without grad mode, or with nothing to differentiate, fn runs once and nothing is kept") {
  torch::nn::Linear lin(3, 3);
  int calls = 0;
  auto fn = [&](const at::Tensor& x, ft::RunPass pass) {
    ++calls;
    CHECK(pass == ft::RunPass::kPlain);
    return lin(x);
  };
  {
    c10::NoGradGuard no_grad;
    auto y = ft::checkpoint(at::ones({2, 3}).requires_grad_(true), lin->parameters(), fn);
    CHECK_FALSE(y.requires_grad());
  }
  for (auto& p : lin->parameters()) p.set_requires_grad(false);
  auto y = ft::checkpoint(at::ones({2, 3}), lin->parameters(), fn);
  CHECK_FALSE(y.requires_grad());
  CHECK(calls == 2);
}

TEST_CASE("model: checkpointed training equals plain training (single, dropout 0.1 and 0)") {
  for (double dropout : {0.1, 0.0}) {
    CAPTURE(dropout);
    const auto plain = train(replicated(), dropout, false);
    const auto ckpt = train(replicated(), dropout, true);
    check_same_training(plain, ckpt, 1e-6);
    // Dropout must actually have changed the run, or masks were not tested.
    if (dropout > 0) CHECK(std::abs(plain.losses.back() - train(replicated(), 0.0, false).losses.back()) > 1e-4);
  }
}

TEST_CASE("model: checkpointed training equals plain training under bf16 autocast") {
  // The recompute must cast exactly as the forward did (autocast state,
  // and no cast cache for the layer input, which is no leaf).
  check_same_training(train(replicated(), 0.1, false, false, ft::PrecisionMode::BF16),
                      train(replicated(), 0.1, true, false, ft::PrecisionMode::BF16), 1e-6);
}

TEST_CASE("model: checkpointed training equals plain training with frozen embeddings") {
  check_same_training(train(replicated(), 0.1, false, true), train(replicated(), 0.1, true, true), 1e-6);
}

TEST_CASE("model: checkpointing composes with the sharded strategies' unit runner and grad hooks") {
  const std::map<std::string, ft::ShardingPolicy> policies = {
      {"zero2", ft::ShardingPolicy::zero(ft::ZeroStage::kGradients)},
      {"zero3", ft::ShardingPolicy::zero(ft::ZeroStage::kWeights)},
      {"fsdp SHARD_GRAD_OP", ft::ShardingPolicy::fsdp(ft::FsdpSharding::kShardGradOp, 1)},
  };
  for (const auto& [name, policy] : policies) {
    INFO(name);
    check_same_training(train(sharded(policy), 0.1, false), train(sharded(policy), 0.1, true), 1e-6);
  }
}

// All-gathers of each unit's weights in training step 2, from the step trace.
std::vector<int> gathers_per_unit(const ft::ShardingPolicy& policy, bool ckpt) {
  ft_test::TempDir tmp("ckpt-gathers");
  ft::Tracer::Options o;
  o.window = ft::StepWindow{2, 2};
  o.dir = tmp.path().string();
  ft::Tracer tracer(o);
  train(sharded(policy), 0.1, ckpt, false, ft::PrecisionMode::FP32, &tracer);
  const std::string trace = ft_test::read_text(tracer.path());
  std::vector<int> counts;
  for (int unit = 0; unit < 5; ++unit) {
    const std::string key = fmt::format("\"name\":\"all-gather unit {}\"", unit);
    int n = 0;
    for (size_t at = 0; (at = trace.find(key, at)) != std::string::npos; at += key.size()) ++n;
    counts.push_back(n);
  }
  return counts;
}

TEST_CASE("model: under zero3 / fsdp a checkpointed layer is gathered no more often than without checkpointing") {
  // Units: embeddings, layers 1..3 (checkpointed), head. FULL_SHARD gathers
  // every unit in forward and again for its backward; with checkpointing the
  // second gather serves the recompute and its backward together.
  // SHARD_GRAD_OP keeps a unit from its forward to its backward: once.
  const auto zero3 = ft::ShardingPolicy::zero(ft::ZeroStage::kWeights);
  const auto grad_op = ft::ShardingPolicy::fsdp(ft::FsdpSharding::kShardGradOp, 1);
  CHECK(gathers_per_unit(zero3, false) == std::vector<int>{2, 2, 2, 2, 2});
  CHECK(gathers_per_unit(zero3, true) == std::vector<int>{2, 2, 2, 2, 2});
  CHECK(gathers_per_unit(grad_op, false) == std::vector<int>{1, 1, 1, 1, 1});
  CHECK(gathers_per_unit(grad_op, true) == std::vector<int>{1, 1, 1, 1, 1});
}

namespace {
class CountingRunner final : public ft::UnitRunner {
 public:
  std::vector<int> calls;
  std::vector<std::pair<int, ft::RunPass>> log;
  at::Tensor run(int index, ft::RunPass pass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    if (static_cast<int>(calls.size()) <= index) calls.resize(static_cast<size_t>(index) + 1, 0);
    ++calls[static_cast<size_t>(index)];
    log.emplace_back(index, pass);
    return fn(input);
  }
};
}  // namespace

TEST_CASE("model: encoder layers (only) run again through the unit runner in backward") {
  at::manual_seed(7);
  auto model = std::make_shared<ft::EncoderModel>(small_config(0.1));
  CountingRunner runner;
  model->set_unit_runner(&runner);
  model->set_activation_checkpointing(true);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  ft::Batch b = make_batch(gen);
  auto loss = at::cross_entropy_loss(model->forward(b), b.labels);
  CHECK(runner.calls == std::vector<int>{1, 1, 1, 1, 1});
  loss.backward();
  CHECK(runner.calls == std::vector<int>{1, 2, 2, 2, 1});  // units 1..3 recomputed
  using P = ft::RunPass;
  const std::vector<std::pair<int, P>> want = {{0, P::kPlain},     {1, P::kNoGraph},   {2, P::kNoGraph},
                                               {3, P::kNoGraph},   {4, P::kPlain},     {3, P::kRecompute},
                                               {2, P::kRecompute}, {1, P::kRecompute}};
  CHECK(runner.log == want);
  for (const auto& [name, p] : model->weights()) {
    INFO(name);
    CHECK(p.grad().defined());
  }
  model->set_unit_runner(nullptr);
}

TEST_CASE("model: evaluation (no grad) does not checkpoint and gives the same logits") {
  at::manual_seed(7);
  auto model = std::make_shared<ft::EncoderModel>(small_config(0.1));
  model->set_activation_checkpointing(true);
  model->eval();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  ft::Batch b = make_batch(gen);
  at::Tensor with;
  {
    c10::NoGradGuard no_grad;
    with = model->forward(b);
  }
  CHECK_FALSE(with.requires_grad());
  model->set_activation_checkpointing(false);
  c10::NoGradGuard no_grad;
  CHECK(at::equal(with, model->forward(b)));
}

// ---------------------------------------------------------------- subprocess

namespace {

std::vector<double> parity_losses(const std::string& strategy, int nproc, const std::string& extra) {
  ft_test::TempDir tmp(fmt::format("ckpt-{}-{}", strategy, nproc));
  const auto metrics = tmp.path() / "metrics.jsonl";
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --strategy {} --nproc {} --threads 1 --set train.batch_size={} "
      "--set train.activation_checkpointing=true --metrics-out {} {}",
      strategy, nproc, 32 / nproc, metrics.string(), extra);
  auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  return ft_test::step_losses(metrics);
}

}  // namespace

TEST_CASE("parity: checkpointed zero3 / ddp on 2 ranks reproduce the checkpointed single-process run") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const auto single = parity_losses("single", 1, "");
  const auto ref = ft_test::reference_losses();
  REQUIRE(single.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("single vs PyTorch reference, step " << i + 1);
    CHECK(std::abs(single[i] - ref[i]) < 1e-4);
  }
  struct Case {
    const char* strategy;
    int nproc;
    const char* extra;
  };
  const Case cases[] = {
      {"zero3", 2, ""},
      {"ddp", 2, ""},
      {"dp", 1, "--set strategy.options.replicas=2"},
  };
  for (const auto& c : cases) {
    SUBCASE(fmt::format("{} x{} {}", c.strategy, c.nproc, c.extra).c_str()) {
      const auto got = parity_losses(c.strategy, c.nproc, c.extra);
      REQUIRE(got.size() == single.size());
      for (size_t i = 0; i < single.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(std::abs(got[i] - single[i]) < 1e-4);
      }
    }
  }
}

TEST_CASE("dp: CPU replicas with dropout refuse checkpointing, naming the key") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  auto out = ft_test::run_ft(
      "run --config configs/parity-tiny.yaml --strategy dp --threads 1 --set strategy.options.replicas=2 "
      "--set model.dropout=0.1 --set train.activation_checkpointing=true --set train.max_steps=1");
  INFO(out.output);
  CHECK(out.exit_code != 0);
  CHECK(out.output.find("train.activation_checkpointing: dp's 2 CPU replicas share one random generator") !=
        std::string::npos);
}

namespace {

// A run whose peak memory is mostly activations: 4 layers of hidden 128 at
// 256 tokens x 32 rows (each [32, 4 heads, 256, 256] attention tensor kept
// for backward is 33.5 MB), a small vocabulary, synthetic text (no data
// download), one step: the peak is that step's backward. Measured on the
// 2-core dev box: ~1030 MB plain, ~550 MB checkpointed.
double activation_heavy_peak_rss(const ft_test::TempDir& tmp, bool ckpt) {
  const auto dir = tmp.path();
  const auto metrics = dir / fmt::format("metrics-{}.jsonl", ckpt ? "ckpt" : "plain");
  const std::string args = fmt::format("run --config {} --threads 2 --metrics-out {} --set train.activation_checkpointing={}",
                                       (dir / "run.yaml").string(), metrics.string(), ckpt ? "true" : "false");
  auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  const auto summary = ft_test::read_events(metrics, "summary");
  REQUIRE(summary.size() == 1);
  return summary[0].at("peak_rss_mb").at(0).get<double>();
}

void write_activation_heavy_run(const ft_test::TempDir& tmp) {
  const auto dir = tmp.path();
  {
    std::ofstream vocab(dir / "vocab.txt");
    vocab << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    for (int w = 0; w < 200; ++w) vocab << "w" << w << "\n";
  }
  {
    std::ofstream data(dir / "train.jsonl");
    for (int row = 0; row < 64; ++row) {
      data << R"({"label": ")" << (row % 2 ? "pos" : "neg") << R"(", "text": ")";
      for (int t = 0; t < 300; ++t) data << (t ? " " : "") << "w" << (row * 7 + t * 13) % 200;
      data << "\"}\n";
    }
  }
  {
    std::ofstream config(dir / "config.json");
    config << R"({"vocab_size": 205, "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
      "intermediate_size": 512, "max_position_embeddings": 256, "hidden_dropout_prob": 0.1,
      "attention_probs_dropout_prob": 0.1, "num_labels": 2, "id2label": {"0": "neg", "1": "pos"}})";
  }
  std::ofstream yaml(dir / "run.yaml");
  yaml << fmt::format(R"(model:
  config: {0}/config.json
data:
  train: {0}/train.jsonl
  vocab: {0}/vocab.txt
  labels: [neg, pos]
  dev_fraction: 0
  max_seq_len: 256
  padding: max_length
train:
  max_steps: 1
  batch_size: 32
  shuffle: false
  log_every: 1
strategy:
  name: single
  precision: fp32
runtime:
  device: cpu
)",
                      dir.string());
}

}  // namespace

TEST_CASE("memory: checkpointing lowers peak RSS where activations dominate") {
  ft_test::TempDir tmp("ckpt-memory");
  write_activation_heavy_run(tmp);
  const double plain = activation_heavy_peak_rss(tmp, false);
  const double ckpt = activation_heavy_peak_rss(tmp, true);
  MESSAGE("peak RSS: " << plain << " MB plain, " << ckpt << " MB checkpointed");
  CHECK(ckpt <= 0.75 * plain);
}
