#include "ft/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/checkpoint/checkpoint_writer.h"
#include "ft/checkpoint/save_signals.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/model/model.h"
#include "ft/train/objective.h"
#include "ft/optim/optim.h"
#include "ft/optim/param_plan.h"
#include "ft/optim/precision.h"
#include "ft/train/runtime.h"
#include "ft/data/sampler.h"
#include "ft/observe/trace.h"
#include "ft/train/tuning_method.h"
#include "ft/parallel/abilities.h"
#include "best_model.h"
#include "component_options.h"

namespace ft {
namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Trainer::Impl {
  RunConfig config;
  RunInputs inputs;
  std::shared_ptr<Strategy> strategy;
  std::string strategy_name;
  Comm& comm;
  EventLog& events;
  Tracer tracer;  // the runtime.profile_steps window; strategies get it as ctx.trace
  std::unique_ptr<Precision> precision;
  std::unique_ptr<Objective> objective;
  StrategyContext ctx;
  std::shared_ptr<EncoderModel> model;
  TrainerState state;
  std::optional<ClassificationReport> last_eval, best_eval;
  BestModelTracker best{config.train, best_metric_ref(config)};
  bool stop_early = false;
  int64_t last_eval_step = -1;
  // Counted before setup: strategies that slice the model (tensor) leave
  // each rank only its part.
  int64_t trainable_params = 0;
  // train.batch_size and grad_accum as the strategy reads them
  // (DataParallelGroup::micro_batching); the config keeps what was asked.
  MicroBatching batching;

  Impl(RunConfig c, RunInputs in, std::shared_ptr<Strategy> s, std::string name, Comm& cm, EventLog& ev)
      : config(std::move(c)), inputs(std::move(in)), strategy(std::move(s)), strategy_name(std::move(name)),
        comm(cm), events(ev), tracer(tracer_options(config.runtime, cm.rank())) {}

  bool is_rank0() const { return comm.rank() == 0; }
  // Where data is sharded: the job, or the strategy's data-parallel group.
  Comm& data_comm() const {
    auto* g = strategy->ability<DataParallelGroup>();
    return g ? g->data_comm() : comm;
  }
  c10::Device device() const {
    return config.runtime.device == "cuda" ? c10::Device(c10::kCUDA, comm.local_rank()) : c10::Device(c10::kCPU);
  }

  void setup() {
    const auto dev = device();
    if (dev.is_cuda()) {
      // One GPU per local rank (NCCL refuses two ranks on one device).
      const auto gpus = static_cast<int>(torch::cuda::device_count());
      if (gpus == 0) fail("rank {}: runtime.device=cuda but no GPU is visible (or this LibTorch has no CUDA); use runtime.device=cpu", comm.rank());
      if (comm.local_rank() >= gpus) {
        fail("rank {}: runtime.device=cuda needs GPU {} (one per local rank) but {} GPU(s) are visible; "
             "use --nproc <= {} per host, or runtime.device=cpu",
             comm.rank(), comm.local_rank(), gpus, gpus);
      }
    }
    const PrecisionMode mode = config.strategy.precision == "auto"
                                   ? strategy->default_precision(dev.type())
                                   : parse_precision(config.strategy.precision, "strategy.precision");
    precision = std::make_unique<Precision>(mode, dev.type(), loss_scaler_options(config.strategy));
    ctx.comm = &comm;
    ctx.precision = precision.get();
    ctx.device = dev;
    ctx.seed = config.train.seed;
    ctx.threads = at::get_num_threads();
    ctx.options = config.strategy.options;
    ctx.batch_rows = config.train.batch_size;
    ctx.seq_len = config.data.max_seq_len;
    ctx.trace = &tracer;
    ctx.events.listen([&log = events](const StrategyEvent& e) { log.strategy(e); });

    // Same seed on every rank: identical random init without a broadcast.
    at::manual_seed(static_cast<uint64_t>(config.train.seed));
    objective = make_objective(config, inputs);
    if (!inputs.dev.empty()) judged_dev();  // the set best_metric names has rows: refused now, not at the first evaluation
    model = inputs.model ? inputs.model : std::make_shared<EncoderModel>(inputs.model_config);
    if (inputs.initial_weights && !inputs.model) {
      EncoderModel::LoadOptions load;
      load.head_optional = true;
      load.replace_classifier = inputs.replace_classifier;
      for (const auto& line : describe_load(model->load_weights(*inputs.initial_weights, inputs.weights_source, load),
                                            inputs.weights_source)) {
        events.info(line);
      }
    }
    // LoRA, adapters, prompt and prefix tuning each decide what trains (the rest is frozen).
    // A caller's model comes with its method applied already.
    const AppliedMethod method = inputs.model ? AppliedMethod{} : apply_tuning_method(*model, config, inputs.tokenizer.get());
    const auto& t = config.train;
    const OptimizerSpec spec = optimizer_spec(t);
    const ParamPlan plan = build_param_plan(*model, t, inputs.trainable ? inputs.trainable : method.trainable);
    if (!method.note.empty()) events.info(method.note);
    model->set_activation_checkpointing(t.activation_checkpointing);  // before setup: dp copies both to replicas
    model->set_padding_free(config.model.padding_free);
    model->set_attention(attention_kernel(config.model.attention));
    for (const auto& p : model->named_parameters()) {
      auto it = plan.find(p.key());
      if (it == plan.end() || it->second.trainable) trainable_params += p.value().numel();
    }
    batching = {config.train.batch_size, config.train.grad_accum};
    strategy->setup(model, spec, plan, ctx);
    objective->attach(data_comm());
    if (auto* group = strategy->ability<DataParallelGroup>()) {
      batching = group->micro_batching(config.train.batch_size, config.train.grad_accum);
    }
    // Dropout masks differ per data-parallel rank (as in DDP) but are
    // reproducible; ranks that share a batch (a tensor-parallel group) share
    // the stream, so the activations they hold in common stay identical.
    at::manual_seed(static_cast<uint64_t>(config.train.seed) + 1000003ULL * static_cast<uint64_t>(data_comm().rank()));
  }

  std::vector<at::Tensor> gather_rng_states() {
    auto local = at::detail::getDefaultCPUGenerator().get_state();
    std::vector<at::Tensor> all(comm.world_size());
    for (auto& t : all) t = at::empty_like(local);
    comm.all_gather(all, local);
    return all;
  }

  void resume(const std::string& dir) {
    auto ckpt = load_checkpoint(dir, /*with_training_state=*/true);
    strategy->load_state(ckpt.model, &*ckpt.optimizer);
    if (ckpt.check == CheckpointCheck::kUnverified) {  // said once it loaded: a bad one gets one line
      events.warn(fmt::format("checkpoint {} has no manifest.json (written before ft verified checkpoints); resuming unverified", dir));
    }
    state = *ckpt.state;
    if (!state.loss_scaler.empty()) precision->load_state(state.loss_scaler);
    // RNG streams continue only when every rank has its own saved stream.
    if (static_cast<int>(ckpt.rng_states.size()) == comm.world_size()) {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(ckpt.rng_states[comm.rank()]);
    }
    events.info(fmt::format("resumed from {} at step {} (saved by {} on {} rank(s))", dir, state.global_step,
                            state.strategy, state.world_size));
  }

  ClassificationReport evaluate(const Dataset& dev) {
    strategy->set_training(false);
    torch::NoGradGuard no_grad;
    const int64_t per_rank = config.train.eval_batch_size > 0 ? config.train.eval_batch_size : batching.rows;
    auto report = objective->evaluate(*strategy, dev, data_comm(), events, per_rank);
    strategy->set_training(true);
    return report;
  }

  // The dev set train.best_metric is read on; its report is the run's (summary, best model).
  const Dataset& judged_dev() const {
    for (const auto& d : inputs.dev) {
      if (d.name == best.dev_name()) return *d.data;
    }
    fail("{}: train.best_metric {} is read on dev set '{}', which has no rows", config.source, best.metric(),
         best.dev_name());
  }

  // Evaluates and reports every dev set, each under its name; returns the judged set's report.
  ClassificationReport report_dev_sets(int64_t step, int64_t epoch) {
    std::optional<ClassificationReport> judged;
    for (const auto& d : inputs.dev) {
      auto report = evaluate(*d.data);
      events.dev_set(d.name);
      objective->report(events, step, epoch, report, inputs.label_names);
      if (d.name == best.dev_name()) judged = std::move(report);
    }
    events.dev_set("");
    return *judged;
  }

  void run_eval(int64_t epoch) {
    auto report = report_dev_sets(state.global_step, epoch);
    last_eval = report;
    last_eval_step = state.global_step;
    const auto verdict = best.observe(report, state, comm);
    if (verdict.improved) {
      best_eval = report;
      state.best_checkpoint.clear();  // set when the next checkpoint is written
      pending_best_ = true;
    }
    if (verdict.stop) {
      stop_early = true;
      events.early_stopping(state.global_step, best.metric(), best.shown(state.best_metric, report), state.best_step,
                            config.train.early_stopping_patience);
    }
  }

  // load_best_model_at_end needs a checkpoint at each evaluation: the save
  // cadence follows the evaluations' where none is given.
  int64_t save_every() const {
    const auto& t = config.train;
    return t.save_every > 0 || !t.load_best_model_at_end ? t.save_every : t.eval_every;
  }
  bool save_each_epoch() const {
    const auto& t = config.train;
    return t.save_each_epoch || (t.load_best_model_at_end && t.eval_every == 0);
  }

  // The best evaluation's weights back into the strategy, for final/.
  void load_best_weights() {
    if (!config.train.load_best_model_at_end || pending_best_ || state.best_checkpoint.empty()) return;
    const auto ckpt = load_checkpoint(state.best_checkpoint, /*with_training_state=*/false);
    strategy->load_state(ckpt.model, nullptr);
    events.info(fmt::format("load_best_model_at_end: {} (step {}, {} {:.4f}) is written as the final weights",
                            state.best_checkpoint, state.best_step, best.metric(),
                            best_eval ? best.shown(state.best_metric, *best_eval) : state.best_metric));
    last_eval = best_eval ? best_eval : std::optional<ClassificationReport>(evaluate(judged_dev()));
  }

  CheckpointData checkpoint_data(bool with_training_state) {
    CheckpointData data;
    data.config = inputs.model_config;
    data.model = strategy->model_state();
    data.tokenizer = inputs.tokenizer.get();
    data.model_max_length = config.data.max_seq_len;
    describe_tuning_method(data, config, inputs.weights_source.empty() ? config.model.config : inputs.weights_source);
    if (with_training_state) {
      data.optimizer = strategy->optimizer_state();
      TrainerState s = state;
      s.loss_scaler = precision->state();
      s.strategy = strategy_name;
      s.world_size = comm.world_size();
      data.state = s;
      data.rng_states = gather_rng_states();
      data.run_yaml = to_yaml(config);
    }
    return data;
  }

  void save_step_checkpoint() {
    const fsys::path out = config.train.output_dir;
    const fsys::path dir = out / fmt::format("checkpoint-{}", state.global_step);
    if (pending_best_) {
      state.best_checkpoint = dir.string();
      pending_best_ = false;
    }
    write_checkpoint(dir, out);
  }

  // Collective: every rank gathers the state, then writes its part; with
  // `rotate_under`, older checkpoints there are rotated once `dir` is committed.
  void write_checkpoint(const fsys::path& dir, const fsys::path& rotate_under = {}) {
    checkpoints.write(dir, checkpoint_data(true), strategy->ability<ShardedCheckpointing>(), rotate_under,
                      state.best_checkpoint);
  }

  TrainResult fit();
  bool pending_best_ = false;
  CheckpointWriter checkpoints{
      comm, events, {config.train.save_sharded, config.train.save_total_limit, config.runtime.save_grace_s}};

 private:
  struct Schedule;
  struct FitProgress;
  Schedule make_schedule() const;
  void begin_fit(const Schedule& plan);
  void run_step(const Schedule& plan, FitProgress& p);
  StepResult train_step(const Schedule& plan, int64_t epoch, double lr, double& step_loss);
  void log_step(const Schedule& plan, FitProgress& p, const StepResult& r, int64_t epoch, double lr);
  bool logs_at(int64_t step, const Schedule& plan) const;
  void after_step(FitProgress& p, int64_t epoch, bool last);
  void end_epoch(FitProgress& p);
  TrainResult finish_fit(FitProgress& p);
  void gather_memory_facts(SummaryEvent& s);

  // Runs `f` and adds its wall time to `seconds`.
  template <typename F>
  static void timed(double& seconds, F&& f) {
    const auto t0 = Clock::now();
    f();
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

// ---------------------------------------------------------------- fit

// The sampler and step counts of one fit() call, fixed before the loop.
struct Trainer::Impl::Schedule {
  DistributedSampler sampler;
  int64_t per_epoch = 0;
  int64_t total = 0;
  int64_t warmup = 0;
};

// What the loop accumulates: throughput after warm-up, the current log
// window, and time spent evaluating or saving (left out of train_seconds).
struct Trainer::Impl::FitProgress {
  int64_t warm_steps = 0;  // first steps left out of samples_per_s
  int64_t steps_run = 0, samples = 0;
  int64_t timed_samples = 0;
  double timed_seconds = 0.0;
  double side_seconds = 0.0;  // evaluation and checkpoints
  double loss_since_log = 0.0, last_loss = std::nan("");
  int64_t steps_since_log = 0, samples_since_log = 0;
  double log_window_seconds = 0.0;
  Clock::time_point start = Clock::now();
};

Trainer::Impl::Schedule Trainer::Impl::make_schedule() const {
  const auto& t = config.train;
  SamplerOptions so;
  so.dataset_size = inputs.train->size();
  so.per_rank_batch = batching.rows;
  so.world = data_comm().world_size();
  so.rank = data_comm().rank();
  so.accum = batching.micro_batches;
  so.shuffle = t.shuffle;
  so.drop_last = t.drop_last;
  so.seed = static_cast<uint64_t>(t.seed);
  if (config.data.group_by_length) so.lengths = inputs.train->lengths();
  // Padding-free ranks cost what their tokens cost: deal them even shares.
  if (so.world > 1 && config.model.padding_free)
    so.tokens = [ds = inputs.train.get()](const std::vector<int64_t>& rows) { return ds->lengths_of(rows); };
  Schedule plan{DistributedSampler(so)};
  plan.per_epoch = plan.sampler.steps_per_epoch();
  plan.total = t.max_steps > 0 ? t.max_steps : t.epochs * plan.per_epoch;
  plan.warmup = t.warmup_steps > 0 ? t.warmup_steps
                                   : static_cast<int64_t>(std::ceil(t.warmup_ratio * static_cast<double>(plan.total)));
  return plan;
}

// Everything before the first step: leftovers of an interrupted save,
// resume, train mode, and the lines that say what is about to run.
void Trainer::Impl::begin_fit(const Schedule& plan) {
  const auto& t = config.train;
  state.total_steps = plan.total;
  // A run killed while saving leaves hidden staging directories (and an
  // older ft, checkpoints without their manifest); nothing else writes here
  // before this run's first save.
  if (is_rank0() && !t.output_dir.empty()) {
    for (const auto& line : clean_output_dir(t.output_dir)) events.info(line);
  }
  if (t.resume_from == "auto") {
    // A relaunched job (the launcher's --max-restarts, torchrun, Slurm --requeue) picks up where it stopped.
    std::vector<std::string> skipped;
    const auto found = latest_checkpoint(t.output_dir, &skipped);
    for (const auto& why : skipped) events.warn("resume_from=auto skips " + why);
    if (found) {
      resume(found->dir.string());
    } else {
      events.info(fmt::format("resume_from=auto: no complete checkpoint in {}; starting at step 0", t.output_dir));
    }
  } else if (!t.resume_from.empty()) {
    resume(t.resume_from);
  }
  strategy->set_training(true);
  events.info(fmt::format("{} {} ({} layers) with {} on {} rank(s), precision {}, {} steps ({} per epoch), global batch {}",
                          config.task == RunConfig::Task::kMaskedLm ? "pretraining (masked LM)" : "training",
                          inputs.model_config.family().class_prefix, inputs.model_config.num_hidden_layers, strategy_name, comm.world_size(),
                          to_string(precision->mode()), plan.total, plan.per_epoch, plan.sampler.global_batch_size()));
  // Asked after setup(): `auto` only knows its strategy (and abilities) then.
  if (t.save_sharded && !strategy->ability<ShardedCheckpointing>()) {
    events.warn(fmt::format("train.save_sharded=true, but sharded checkpoints are not written by strategy '{}'; "
                            "only the consolidated checkpoint is saved",
                            strategy_name));
  }
}

// One optimizer step: grad_accum micro-batches of forward and backward,
// then the strategy's step. Adds the step's loss to `step_loss`.
StepResult Trainer::Impl::train_step(const Schedule& plan, int64_t epoch, double lr, double& step_loss) {
  const auto& t = config.train;
  TraceRange data_range(&tracer, "data", "data");
  std::vector<Batch> micro_batches;
  for (int64_t micro = 0; micro < batching.micro_batches; ++micro) {
    micro_batches.push_back(objective->batch(*inputs.train, plan.sampler.micro_batch(epoch, state.step_in_epoch, micro), epoch));
  }
  const double divisor = objective->step_divisor(micro_batches, data_comm());
  data_range.end();
  for (int64_t micro = 0; micro < batching.micro_batches; ++micro) {
    const Batch& batch = micro_batches[static_cast<size_t>(micro)];
    const bool sync = micro == batching.micro_batches - 1;
    if (auto replayed = objective->train_micro_batch(*strategy, batch, divisor, sync)) {
      step_loss += *replayed;
      continue;
    }
    TraceRange forward_range(&tracer, "forward");
    auto logits = strategy->forward(batch);
    auto loss = objective->loss(logits, batch) / divisor;
    forward_range.end();
    TraceRange backward_range(&tracer, "backward");
    strategy->backward(loss, sync);
    backward_range.end();
    step_loss += loss.item<double>();
  }
  TraceRange optimizer_range(&tracer, "optimizer", "optimizer");  // ends on return
  return strategy->step({lr, t.max_grad_norm, logs_at(state.global_step + 1, plan)});
}

// Steps whose record carries the loss and the gradient norm (the others
// only tick the progress line).
bool Trainer::Impl::logs_at(int64_t step, const Schedule& plan) const {
  return step % std::max<int64_t>(1, config.train.log_every) == 0 || step == plan.total;
}

// Rank 0 logs the loss averaged over the window and over ranks every
// log_every steps and at the last one; a progress tick otherwise.
void Trainer::Impl::log_step(const Schedule& plan, FitProgress& p, const StepResult& r, int64_t epoch, double lr) {
  if (!logs_at(state.global_step, plan)) {
    events.progress(state.global_step, plan.total, p.last_loss,
                    p.timed_seconds > 0 ? static_cast<double>(p.timed_samples) / p.timed_seconds : 0.0);
    return;
  }
  // Averaged over the ranks that compute the loss (all but a pipeline's
  // earlier stages): a sum of the losses and one of the counts.
  auto* group = strategy->ability<DataParallelGroup>();
  const bool holds = group == nullptr || group->holds_loss();
  auto l = at::tensor({holds ? p.loss_since_log / static_cast<double>(p.steps_since_log) : 0.0, holds ? 1.0 : 0.0},
                      at::kDouble);
  comm.all_reduce(l, ReduceOp::Sum);
  p.last_loss = l[0].item<double>() / std::max(1.0, l[1].item<double>());
  StepEvent ev{state.global_step, plan.total, epoch, p.last_loss, lr, r.grad_norm,
               static_cast<double>(p.samples_since_log) / std::max(1e-9, p.log_window_seconds),
               precision->loss_scale(), r.skipped};
  events.step(ev, true);
  p.loss_since_log = 0.0;
  p.steps_since_log = p.samples_since_log = 0;
  p.log_window_seconds = 0.0;
}

// eval_every and save_every after a step. The final checkpoint is written
// by finish_fit, so the last step never saves here.
void Trainer::Impl::after_step(FitProgress& p, int64_t epoch, bool last) {
  const auto& t = config.train;
  if (t.eval_every > 0 && !inputs.dev.empty() && (state.global_step % t.eval_every == 0 || last)) {
    timed(p.side_seconds, [&] { run_eval(epoch); });
  }
  if (!t.output_dir.empty() && save_every() > 0 && state.global_step % save_every() == 0 && !last) {
    timed(p.side_seconds, [&] { save_step_checkpoint(); });
  }
}

void Trainer::Impl::run_step(const Schedule& plan, FitProgress& p) {
  // An interrupt held for the save in flight: no further step. The other
  // ranks may be gone already, and a collective failing on them would end
  // this process before the save commits; the save finishes here and the
  // held interrupt stops the process (ft/checkpoint/save_signals.h).
  if (interrupt_held()) checkpoints.finish();
  const int64_t epoch = state.epoch;
  const auto s0 = Clock::now();
  tracer.begin_step(state.global_step + 1);
  const double lr = scheduled_lr(config.train, state.global_step, plan.total, plan.warmup);
  double step_loss = 0.0;
  const StepResult r = train_step(plan, epoch, lr, step_loss);
  if (auto note = tracer.end_step(state.global_step + 1)) events.info(*note);
  const int64_t rows = plan.sampler.step_rows(state.step_in_epoch);
  state.global_step += 1;
  state.step_in_epoch += 1;
  ++p.steps_run;
  p.samples += rows;
  const double dt = std::chrono::duration<double>(Clock::now() - s0).count();
  if (p.steps_run > p.warm_steps) {
    p.timed_seconds += dt;
    p.timed_samples += rows;
  }
  p.loss_since_log += step_loss;
  ++p.steps_since_log;
  p.samples_since_log += rows;
  p.log_window_seconds += dt;
  log_step(plan, p, r, epoch, lr);
  after_step(p, epoch, state.global_step == plan.total);
}

// Per-epoch evaluation (when eval_every is 0) and checkpoint (save_each_epoch),
// then the move to the next epoch. fit() never ends an epoch after the last
// step: finish_fit evaluates and writes the final checkpoint there.
void Trainer::Impl::end_epoch(FitProgress& p) {
  const auto& t = config.train;
  if (!t.eval_every && !inputs.dev.empty()) timed(p.side_seconds, [&] { run_eval(state.epoch); });
  const bool saved_by_step = save_every() > 0 && state.global_step % save_every() == 0;
  if (save_each_epoch() && !t.output_dir.empty() && !saved_by_step) {
    timed(p.side_seconds, [&] { save_step_checkpoint(); });
  }
  state.epoch += 1;
  state.step_in_epoch = 0;
}

// After the loop: the trace file, the closing evaluation, the summary
// (gathered from every rank) and the final checkpoint.
TrainResult Trainer::Impl::finish_fit(FitProgress& p) {
  const auto& t = config.train;
  if (auto note = tracer.finish(state.global_step)) events.info(*note);
  // The per-epoch cadence also evaluates where training stops (unless it just did: an early stop).
  if (!t.eval_every && !inputs.dev.empty() && last_eval_step != state.global_step) {
    timed(p.side_seconds, [&] { run_eval(state.epoch); });
  }
  timed(p.side_seconds, [&] { load_best_weights(); });
  const double loop_seconds = std::chrono::duration<double>(Clock::now() - p.start).count() - p.side_seconds;

  TrainResult result;
  SummaryEvent& s = result.summary;
  s.strategy = strategy_name;
  s.precision = to_string(precision->mode());
  s.world_size = comm.world_size();
  s.threads_per_rank = ctx.threads;
  s.steps = p.steps_run;
  s.samples = p.samples;
  s.train_seconds = loop_seconds;
  s.samples_per_s = p.timed_seconds > 0 ? static_cast<double>(p.timed_samples) / p.timed_seconds
                                        : static_cast<double>(p.samples) / std::max(1e-9, loop_seconds);
  s.final_loss = p.last_loss;
  gather_memory_facts(s);
  s.trainable_params = trainable_params;
  s.negatives_per_anchor = objective->negatives_per_anchor(*inputs.train, batching.rows, data_comm().world_size());
  if (last_eval) {
    s.has_eval = true;
    s.masked_lm = config.task == RunConfig::Task::kMaskedLm;
    s.eval = *last_eval;
    s.eval_dev = best.dev_name();
  }
  if (!t.output_dir.empty()) {
    const fsys::path final_dir = fsys::path(t.output_dir) / "final";
    if (pending_best_) state.best_checkpoint = final_dir.string();
    pending_best_ = false;
    write_checkpoint(final_dir);
    checkpoints.finish();  // the run is not done until its checkpoint is verifiable
    s.checkpoint = final_dir.string();
  }
  events.summary(s);
  result.last_eval = last_eval;
  return result;
}

// Collective: every rank's peak memory and state bytes, for the summary.
void Trainer::Impl::gather_memory_facts(SummaryEvent& s) {
  StateBytes bytes = strategy->state_bytes();
  auto facts = at::tensor({peak_rss_mb(), static_cast<double>(bytes.params), static_cast<double>(bytes.grads),
                           static_cast<double>(bytes.optimizer), peak_device_memory_mb(ctx.device)},
                          at::kDouble);
  std::vector<at::Tensor> all(comm.world_size());
  for (auto& x : all) x = at::empty_like(facts);
  comm.all_gather(all, facts);
  for (const auto& x : all) {
    auto* d = x.data_ptr<double>();
    s.peak_rss_mb.push_back(d[0]);
    if (ctx.device.is_cuda()) s.peak_device_mb.push_back(d[4]);
    s.param_bytes.push_back(static_cast<int64_t>(d[1]));
    s.grad_bytes.push_back(static_cast<int64_t>(d[2]));
    s.optimizer_bytes.push_back(static_cast<int64_t>(d[3]));
    s.model_state_bytes.push_back(static_cast<int64_t>(d[1] + d[2] + d[3]));
  }
}

TrainResult Trainer::Impl::fit() {
  const Schedule plan = make_schedule();
  begin_fit(plan);
  if (objective->evaluates_first() && !inputs.dev.empty() && state.global_step == 0) {
    report_dev_sets(0, 0);  // the untrained model: the gain's baseline
  }
  FitProgress progress;
  // Throughput leaves out the first steps (allocator and thread-pool warm-up).
  progress.warm_steps = plan.total - state.global_step > 6 ? 2 : 0;
  while (state.global_step < plan.total && !stop_early) {
    if (state.step_in_epoch >= plan.per_epoch) {
      end_epoch(progress);
    } else {
      run_step(plan, progress);
    }
  }
  return finish_fit(progress);
}

Trainer::Trainer(RunConfig config, RunInputs inputs, std::shared_ptr<Strategy> strategy, std::string strategy_name,
                 Comm& comm, EventLog& events)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(inputs), std::move(strategy),
                                   std::move(strategy_name), comm, events)) {
  impl_->setup();
}

Trainer::~Trainer() = default;

TrainResult Trainer::fit() { return impl_->fit(); }

std::vector<std::pair<std::string, ClassificationReport>> Trainer::evaluate() {
  if (impl_->inputs.dev.empty()) fail("no dev data: set data.dev or data.dev_fraction > 0");
  std::vector<std::pair<std::string, ClassificationReport>> reports;
  for (const auto& d : impl_->inputs.dev) reports.emplace_back(d.name, impl_->evaluate(*d.data));
  return reports;
}

}  // namespace ft
