// `auto`: one name that picks the backend (the seeds' accelerate row).
//
// At setup it asks every installed strategy that describes itself (the
// MemoryModel ability, ft/parallel/abilities.h) for its estimate of this job: the
// per-rank memory (model-state formula + gathered unit + 16-bit copies +
// activations) and the step time (compute from a measured matmul rate +
// communication from an α-β link model fitted to timed all-reduces of two
// sizes). Each strategy decides whether it applies (ddp under fp32, ddp_amp
// under mixed precision; pipeline and tensor over all ranks where the model
// allows them), so a third-party plugin with a MemoryModel is weighed too.
// ft::plan_strategy picks one; rank 0 reports the estimate table and the
// reason (the "auto.plan" event), and from then on every Strategy call goes
// to the chosen strategy, which it owns; its optional abilities
// (ft/parallel/abilities.h) are reached through delegate(). Whichever it picks, the
// global batch is train.batch_size x ranks x grad_accum: under pipeline the
// stages run N times the micro-batches, under tensor each group reads N
// times the rows (DataParallelGroup).
//
// strategy.options read here (all others go to the chosen strategy):
//   memory_limit_mb  per-rank budget in MiB (default: none)
//   batch_size       per-rank rows for the activation estimate (default: the
//                    run's train.batch_size, StrategyContext::batch_rows)
//   seq_len          tokens per row for the activation estimate (default: the
//                    run's data.max_seq_len)
//   candidates       comma list to choose from (default: all installed)
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ft/parallel/abilities.h"
#include "ft/parallel/cost_model.h"
#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/config/options.h"
#include "ft/plugin/plugin.h"
#include "ft/plugin/plugin_host.h"

namespace {

using Clock = std::chrono::steady_clock;

// Preference order for near-ties: the simplest strategy first. Installed
// strategies not named here come after these, in discovery order.
const std::vector<std::string> kPreference = {"ddp",  "ddp_amp", "zero1",    "zero2",
                                              "zero3", "fsdp",   "pipeline", "tensor"};

// The installed strategies auto may delegate to, in preference order.
std::vector<std::string> delegates(const ft::PluginHost& host) {
  std::vector<std::string> installed;
  for (const auto& info : host.list()) {
    if (info.name != "auto") installed.push_back(info.name);
  }
  std::vector<std::string> out;
  for (const auto& name : kPreference) {
    if (std::find(installed.begin(), installed.end(), name) != installed.end()) out.push_back(name);
  }
  for (const auto& name : installed) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

struct AutoOptions {
  int64_t memory_limit_bytes = 0;
  int64_t batch_size = 16;
  int64_t seq_len = 128;
  std::vector<std::string> candidates;           // empty: every installed one
  std::map<std::string, std::string> passthrough;  // for the chosen strategy
};

AutoOptions read_options(const ft::StrategyContext& ctx, const std::vector<std::string>& installed) {
  const auto& options = ctx.options;
  // Keys auto does not know belong to the strategy it picks, which checks them.
  const ft::OptionReader r(options, "auto", {"memory_limit_mb", "batch_size", "seq_len", "candidates"},
                           ft::OptionReader::Unknown::kKeep);
  AutoOptions out;
  if (r.has("memory_limit_mb")) {
    const double mb = r.get_double("memory_limit_mb", 0, ft::above(0), "MiB per rank, e.g. 512");
    out.memory_limit_bytes = static_cast<int64_t>(mb * 1024.0 * 1024.0);
  }
  // The run's own shape unless the options say otherwise.
  if (ctx.batch_rows > 0) out.batch_size = ctx.batch_rows;
  if (ctx.seq_len > 0) out.seq_len = ctx.seq_len;
  out.batch_size = r.get_int("batch_size", static_cast<int>(out.batch_size), {1}, "rows per rank, e.g. 16");
  out.seq_len = r.get_int("seq_len", static_cast<int>(out.seq_len), {1}, "tokens per row, e.g. 128");
  if (r.has("candidates")) {
    const std::string list = r.get_string("candidates", "");
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) {
      if (item.empty()) continue;
      auto name = ft::OptionReader::match_choice(item, installed);
      if (!name) r.fail_value("candidates", item, fmt::format("an installed strategy ({})", fmt::join(installed, ", ")));
      out.candidates.push_back(*name);
    }
    if (out.candidates.empty()) r.fail_value("candidates", list, "a list naming at least one strategy, e.g. ddp,zero3");
  }
  out.passthrough = r.unknown();
  return out;
}

// Median seconds of `reps` all-reduces of `numel` floats, after one warm-up.
double time_allreduce(ft::Comm& comm, int64_t numel, int reps) {
  at::Tensor t = at::ones({numel}, at::kFloat);
  comm.all_reduce(t);
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    comm.all_reduce(t);
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

// Best-of-3 fp32 matmul rate on this rank's threads, sized like one FFN matmul.
double measure_flops(int64_t hidden) {
  const int64_t m = 512, k = std::max<int64_t>(64, hidden), n = 4 * k;
  at::Tensor a = at::randn({m, k});
  at::Tensor b = at::randn({k, n});
  at::Tensor c = at::mm(a, b);  // warm-up
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    c = at::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(m * k * n) / std::max(1e-9, best);
}

class AutoStrategy final : public ft::Strategy, public ft::DataParallelGroup {
 public:
  void setup(std::shared_ptr<ft::EncoderModel> model, const ft::OptimizerSpec& optimizer,
             const ft::ParamPlan& plan, ft::StrategyContext& ctx) override {
    model_ = model;
    ft::PluginHost host = ft::PluginHost::discover(ft::DiscoveryOptions::from_environment());
    const std::vector<std::string> installed = delegates(host);
    const AutoOptions options = read_options(ctx, installed);
    ft::Comm& comm = *ctx.comm;
    job_comm_ = &comm;

    ft::PlanInputs in;
    in.model = ft::model_shape(*model, plan, comm.world_size());
    in.world_size = comm.world_size();
    in.mixed_precision = ctx.precision->mixed();
    in.batch_rows = options.batch_size;
    in.seq_len = options.seq_len;
    in.memory_limit_bytes = options.memory_limit_bytes;
    measure(comm, in);

    // Strategies without a MemoryModel (dp, horovod, single) cannot be
    // weighed; those with one say themselves whether they apply.
    std::vector<ft::CandidateEstimate> estimates;
    std::vector<std::string> weighable;
    for (const auto& name : options.candidates.empty() ? installed : options.candidates) {
      const std::shared_ptr<ft::Strategy> candidate = host.create(name);
      const ft::MemoryModel* theory = candidate->ability<ft::MemoryModel>();
      if (theory == nullptr) continue;
      weighable.push_back(name);
      if (std::optional<ft::CandidateEstimate> e = theory->estimate(in, *model)) {
        e->name = name;  // the registered name, whatever the plugin calls itself
        estimates.push_back(std::move(*e));
      }
    }
    if (estimates.empty()) {
      ft::fail("auto: none of the candidates can run this job on {} rank(s) (weighable: {}; candidates: {}); "
               "install ddp or the sharded strategies, or pick a strategy by name",
               comm.world_size(), weighable.empty() ? "none" : fmt::format("{}", fmt::join(weighable, ", ")),
               fmt::join(options.candidates.empty() ? installed : options.candidates, ", "));
    }
    plan_ = ft::plan_strategy(std::move(estimates), in);
    // The inputs agree on every rank, so the plans do; rank 0's choice is
    // broadcast anyway so a floating-point tie can never split the job.
    at::Tensor chosen = at::tensor({static_cast<int64_t>(plan_.chosen)}, at::kLong);
    comm.broadcast(chosen, 0);
    plan_.chosen = static_cast<int>(chosen.item<int64_t>());
    if (comm.rank() == 0) report_plan(in, ctx.events);

    inner_ = host.create(plan_.choice().name);
    inner_ctx_ = ctx;
    inner_ctx_.options = options.passthrough;
    inner_->setup(std::move(model), optimizer, plan, inner_ctx_);
    group_ = inner_->ability<ft::DataParallelGroup>();
    if (group_) {
      // The batch the estimates assumed: N times the micro-batches (pipeline)
      // or N times the rows (tensor) per data-parallel group.
      scale_ = comm.world_size() / group_->data_comm().world_size();
      scale_micro_batches_ = plan_.choice().name == "pipeline";
      if (comm.rank() == 0 && scale_ > 1) {
        const char* scaled = scale_micro_batches_ ? "micro_batches" : "rows";
        ctx.events.emit("auto.global_batch",
                        nlohmann::json{{"strategy", plan_.choice().name}, {"world_size", comm.world_size()},
                                       {"scale", scale_}, {"scaled", scaled}},
                        fmt::format("auto: {} keeps the global batch of train.batch_size x {} ranks: {} x the {}",
                                    plan_.choice().name, comm.world_size(), scale_,
                                    scale_micro_batches_ ? "micro-batches per step" : "rows per micro-batch"));
      }
    }
  }

  // DataParallelGroup: the picked strategy's groups, or the job's ranks.
  ft::Comm& data_comm() override { return group_ ? group_->data_comm() : *job_comm_; }
  bool holds_loss() const override { return group_ == nullptr || group_->holds_loss(); }
  ft::MicroBatching micro_batching(int64_t batch_size, int64_t grad_accum) const override {
    if (scale_micro_batches_) return {batch_size, grad_accum * scale_};
    return {batch_size * scale_, grad_accum};
  }

  ft::PrecisionMode default_precision(c10::DeviceType device) const override {
    // As accelerate: full precision unless the run asks for mixed.
    (void)device;
    return ft::PrecisionMode::FP32;
  }

  at::Tensor forward(const ft::Batch& batch) override { return inner().forward(batch); }
  void backward(const at::Tensor& loss, bool sync_grads) override { inner().backward(loss, sync_grads); }
  ft::StepResult step(const ft::StepOptions& options) override { return inner().step(options); }
  ft::TensorList model_state() override { return inner().model_state(); }
  ft::OptimizerState optimizer_state() override { return inner().optimizer_state(); }
  void load_state(const ft::TensorList& model, const ft::OptimizerState* optimizer) override {
    inner().load_state(model, optimizer);
  }
  void set_training(bool training) override {
    if (inner_) {
      inner_->set_training(training);
    } else {
      Strategy::set_training(training);
    }
  }
  ft::StateBytes state_bytes() const override { return inner_ ? inner_->state_bytes() : ft::StateBytes{}; }
  // Abilities (sharded checkpoints, ...) are the picked strategy's.
  ft::Strategy* delegate() override { return inner_.get(); }
  void teardown() override {
    if (inner_) inner_->teardown();
  }

 private:
  ft::Strategy& inner() {
    if (!inner_) ft::fail("strategy 'auto': used before setup()");
    return *inner_;
  }

  // The estimate table, the inputs it came from and the pick, as the
  // "auto.plan" event; its line is the table ft::format_plan prints.
  void report_plan(const ft::PlanInputs& in, ft::StrategyEvents& events) const {
    nlohmann::json table = nlohmann::json::array();
    for (const auto& e : plan_.table) {
      table.push_back({{"name", e.name}, {"formula", e.formula}, {"state_bytes", e.state_bytes},
                       {"extra_bytes", e.extra_bytes}, {"activation_bytes", e.activation_bytes},
                       {"total_bytes", e.total_bytes}, {"fits", e.fits}, {"comm_bytes", e.comm_bytes},
                       {"comm_s", e.comm_s}, {"compute_s", e.compute_s}, {"step_s", e.step_s}});
    }
    std::string line = ft::format_plan(plan_, in);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    events.emit("auto.plan",
                nlohmann::json{{"picked", plan_.choice().name}, {"bench_note", "picked " + plan_.choice().name},
                               {"reason", plan_.reason}, {"candidates", table},
                               {"params", in.model.params}, {"world_size", in.world_size},
                               {"mixed_precision", in.mixed_precision}, {"batch_rows", in.batch_rows},
                               {"seq_len", in.seq_len}, {"link_alpha_s", in.link.alpha_s},
                               {"link_beta_s_per_byte", in.link.beta_s_per_byte}, {"flops_per_s", in.flops_per_s},
                               {"memory_limit_bytes", in.memory_limit_bytes}},
                line);
  }

  // Fits the link model and the compute rate; the slowest rank's timings are
  // used everywhere so every rank plans from the same numbers.
  static void measure(ft::Comm& comm, ft::PlanInputs& in) {
    constexpr int64_t kSmall = 256, kLarge = 1 << 20;  // floats: 1 KiB and 4 MiB
    double t_small = 0, t_large = 0;
    if (comm.world_size() > 1) {
      t_small = time_allreduce(comm, kSmall, 5);
      t_large = time_allreduce(comm, kLarge, 5);
    }
    const double flops = measure_flops(in.model.hidden);
    at::Tensor facts = at::tensor({t_small, t_large, 1.0 / flops}, at::kDouble);
    comm.all_reduce(facts, ft::ReduceOp::Max);
    const double* d = facts.data_ptr<double>();
    in.link = ft::fit_link_model(comm.world_size(), kSmall * 4, d[0], kLarge * 4, d[1]);
    in.flops_per_s = 1.0 / d[2];
  }

  ft::Plan plan_;
  ft::Comm* job_comm_ = nullptr;
  ft::DataParallelGroup* group_ = nullptr;  // the picked strategy's, if it has one
  int64_t scale_ = 1;
  bool scale_micro_batches_ = false;
  // The chosen strategy keeps a pointer to its context, so the context is
  // declared first (destroyed after the strategy).
  ft::StrategyContext inner_ctx_;
  std::shared_ptr<ft::Strategy> inner_;
};

}  // namespace

FT_STRATEGY_PLUGIN("auto", "1.0.0",
                   FT_STRATEGY("auto", "picks ddp/ddp_amp/zero1-3/fsdp/pipeline/tensor from a memory and α-β cost model, says why",
                               [] { return new AutoStrategy(); }))
