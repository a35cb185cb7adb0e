// DeepSpeed's ds_config.json -> ft keys (docs/importing-configs.md). Only
// keys the file sets are mapped; DeepSpeed's own defaults are not imported,
// because under the HF Trainer its "auto" values come from TrainingArguments.
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "import_builder.h"

namespace ft::config_import {
namespace {

// Keys that only tune speed, memory or DeepSpeed's own bookkeeping: accepted
// without a word when they hold the value that matches what ft does anyway.
bool matches_ft(const std::string& key, const Json& v) {
  static const std::map<std::string, Json> same = {
      {"overlap_comm", true},         {"contiguous_gradients", true}, {"reduce_scatter", true},
      {"allgather_partitions", true}, {"wall_clock_breakdown", false}, {"memory_breakdown", false},
      {"zero_allow_untested_optimizer", true}, {"zero_force_ds_cpu_optimizer", false},
      {"round_robin_gradients", false}, {"sparse_gradients", false}, {"prescale_gradients", false},
      {"gradient_predivide_factor", 1.0}, {"stage3_gather_16bit_weights_on_model_save", false},
      {"zero_quantized_weights", false}, {"zero_quantized_gradients", false}, {"mics_shard_size", -1},
      {"zero_hpz_partition_size", 1}};
  auto it = same.find(key);
  return it != same.end() && (v == it->second || (v.is_number() && it->second.is_number() && v.get<double>() == it->second.get<double>()));
}

void import_batch(Builder& b, const Field& root, int world_size) {
  std::optional<int64_t> micro, accum, total;
  auto read = [&](const char* name, std::optional<int64_t>& out) {
    if (!root.has(name) || is_auto(root.json.at(name))) return;
    out = b.integer(root.at(name));
    if (*out < 1) b.error(name, "must be >= 1, got {}", *out);
  };
  read("train_micro_batch_size_per_gpu", micro);
  read("gradient_accumulation_steps", accum);
  read("train_batch_size", total);
  // DeepSpeed's rule: train_batch_size = micro * accumulation * world; any
  // two give the third, and all three must agree.
  const int64_t w = world_size;
  if (total && micro && !accum) {
    if (*total % (*micro * w) != 0) {
      b.error("train_batch_size", "{} is not train_micro_batch_size_per_gpu ({}) x world size ({}) x a whole number",
              *total, *micro, w);
    }
    accum = *total / (*micro * w);
  } else if (total && accum && !micro) {
    if (*total % (*accum * w) != 0) {
      b.error("train_batch_size", "{} is not gradient_accumulation_steps ({}) x world size ({}) x a whole number",
              *total, *accum, w);
    }
    micro = *total / (*accum * w);
  } else if (total && !micro && !accum) {
    if (*total % w != 0) b.error("train_batch_size", "{} does not divide by the world size {}", *total, w);
    micro = *total / w;
    accum = 1;
  } else if (total && micro && accum && *total != *micro * *accum * w) {
    b.error("train_batch_size",
            "{} != train_micro_batch_size_per_gpu ({}) x gradient_accumulation_steps ({}) x world size ({}) = {}",
            *total, *micro, *accum, w, *micro * *accum * w);
  }
  if (micro) b.set("train.batch_size", *micro, total && !root.has("train_micro_batch_size_per_gpu") ? "train_batch_size" : "train_micro_batch_size_per_gpu");
  if (accum) b.set("train.grad_accum", *accum, root.has("gradient_accumulation_steps") ? "gradient_accumulation_steps" : "train_batch_size");
}

void import_precision(Builder& b, const Field& root) {
  bool fp16 = false, bf16 = false;
  for (const char* name : {"bf16", "bfloat16"}) {
    if (!root.has(name)) continue;
    const Field f = root.at(name);
    b.object(f);
    if (f.has("enabled") && !is_auto(f.json.at("enabled")) && b.boolean(f.at("enabled"))) bf16 = true;
  }
  if (root.has("amp")) {
    const Field f = root.at("amp");
    b.object(f);
    if (f.has("enabled") && !is_auto(f.json.at("enabled")) && b.boolean(f.at("enabled"))) {
      b.error("amp.enabled", "NVIDIA Apex AMP is not in ft; use \"fp16\": {{\"enabled\": true}} (torch-style autocast + loss scaling)");
    }
  }
  if (root.has("fp16")) {
    const Field f = root.at("fp16");
    b.object(f);
    const bool enabled = f.has("enabled") && !is_auto(f.json.at("enabled")) && b.boolean(f.at("enabled"));
    fp16 = enabled;
    // The scaler settings matter only when fp16 is on, but are checked either way.
    if (f.has("loss_scale") && !is_auto(f.json.at("loss_scale"))) {
      const double s = b.number(f.at("loss_scale"));
      if (s < 0) b.error("fp16.loss_scale", "must be >= 0 (0: dynamic), got {}", s);
      if (enabled) b.set("strategy.loss_scale", s, "fp16.loss_scale");
    }
    if (f.has("initial_scale_power") && !is_auto(f.json.at("initial_scale_power"))) {
      const int64_t p = b.integer(f.at("initial_scale_power"));
      if (enabled) b.set("strategy.loss_scale_init", std::ldexp(1.0, static_cast<int>(p)), "fp16.initial_scale_power");
    }
    if (f.has("loss_scale_window") && !is_auto(f.json.at("loss_scale_window")) && enabled) {
      b.set("strategy.loss_scale_window", b.integer(f.at("loss_scale_window")), "fp16.loss_scale_window");
    }
    if (f.has("hysteresis") && !is_auto(f.json.at("hysteresis")) && enabled) {
      b.set("strategy.loss_scale_hysteresis", b.integer(f.at("hysteresis")), "fp16.hysteresis");
    }
    if (f.has("min_loss_scale") && !is_auto(f.json.at("min_loss_scale")) && enabled) {
      b.set("strategy.loss_scale_min", b.number(f.at("min_loss_scale")), "fp16.min_loss_scale");
    }
    if (f.has("consecutive_hysteresis") && b.boolean(f.at("consecutive_hysteresis")) && enabled) {
      b.error("fp16.consecutive_hysteresis", "not in ft: its hysteresis refills only when the scale grows (DeepSpeed's default)");
    }
    for (const auto& [k, v] : f.json.items()) {
      static const std::set<std::string> known = {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
                                                  "hysteresis", "min_loss_scale", "consecutive_hysteresis", "auto_cast",
                                                  "fp16_master_weights_and_grads"};
      if (!known.count(k)) b.warn("fp16." + k, "not a key ft maps; ignored");
    }
    if (f.has("fp16_master_weights_and_grads") && b.boolean(f.at("fp16_master_weights_and_grads"))) {
      b.error("fp16.fp16_master_weights_and_grads", "ft keeps fp32 master weights and gradients; set it to false");
    }
  }
  if (fp16 && bf16) b.error("fp16.enabled", "fp16 and bf16 are both enabled; enable one");
  if (fp16) b.set("strategy.precision", "fp16", "fp16.enabled");
  if (bf16) b.set("strategy.precision", "bf16", "bf16.enabled");
  if (!fp16 && !bf16 && (root.has("fp16") || root.has("bf16"))) {
    // Explicitly disabled (not "auto"): DeepSpeed then trains in fp32.
    const bool explicit_off = [&] {
      for (const char* name : {"fp16", "bf16"}) {
        if (root.has(name) && root.json.at(name).contains("enabled") && !is_auto(root.json.at(name).at("enabled")))
          return true;
      }
      return false;
    }();
    if (explicit_off) b.set("strategy.precision", "fp32", root.has("fp16") ? "fp16.enabled" : "bf16.enabled");
  }
}

void import_optimizer(Builder& b, const Field& root) {
  if (!root.has("optimizer")) return;
  const Field opt = root.at("optimizer");
  b.object(opt);
  std::string type = opt.has("type") ? b.text(opt.at("type")) : "";
  std::string lower;
  for (char c : type) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const Json no_params = Json::object();
  const Field params = opt.has("params") ? opt.at("params") : Field{no_params, "optimizer.params"};
  b.object(params);
  auto has = [&](const char* k) { return params.has(k) && !is_auto(params.json.at(k)); };
  if (lower == "adamw" || lower == "adam") {
    // DeepSpeed's Adam is AdamW unless adam_w_mode is false.
    if (lower == "adam" && has("adam_w_mode") && !b.boolean(params.at("adam_w_mode"))) {
      b.error("optimizer.params.adam_w_mode", "Adam with L2 regularisation is not in ft (it has AdamW and SGD)");
    }
    b.set("train.optimizer", "adamw", "optimizer.type");
    if (has("betas")) {
      const Field betas = params.at("betas");
      if (!betas.json.is_array() || betas.json.size() != 2) b.error(betas.key, "expected [beta1, beta2], got {}", betas.json.dump());
      b.set("train.beta1", b.number({betas.json[0], betas.key}), betas.key);
      b.set("train.beta2", b.number({betas.json[1], betas.key}), betas.key);
    }
    if (has("eps")) b.set("train.eps", b.number(params.at("eps")), "optimizer.params.eps");
    if (has("amsgrad") && b.boolean(params.at("amsgrad"))) b.error("optimizer.params.amsgrad", "AMSGrad is not in ft");
  } else if (lower == "sgd") {
    b.set("train.optimizer", "sgd", "optimizer.type");
    if (has("momentum")) b.set("train.momentum", b.number(params.at("momentum")), "optimizer.params.momentum");
    if (has("nesterov") && b.boolean(params.at("nesterov"))) b.error("optimizer.params.nesterov", "Nesterov momentum is not in ft");
    if (has("dampening") && b.number(params.at("dampening")) != 0) b.error("optimizer.params.dampening", "SGD dampening is not in ft");
  } else if (!type.empty()) {
    b.error("optimizer.type", "'{}' is not in ft (it has AdamW, Adam in AdamW mode, and SGD)", type);
  }
  if (has("lr")) b.set("train.lr", b.number(params.at("lr")), "optimizer.params.lr");
  if (has("weight_decay")) b.set("train.weight_decay", b.number(params.at("weight_decay")), "optimizer.params.weight_decay");
}

// WarmupLR / WarmupDecayLR: warm up from warmup_min_lr to warmup_max_lr
// (log-shaped by default), then flat / linear down to 0 at total_num_steps.
void import_scheduler(Builder& b, const Field& root) {
  if (!root.has("scheduler")) return;
  const Field sch = root.at("scheduler");
  b.object(sch);
  const std::string type = sch.has("type") ? b.text(sch.at("type")) : "";
  const Json no_params = Json::object();
  const Field params = sch.has("params") ? sch.at("params") : Field{no_params, "scheduler.params"};
  auto has = [&](const char* k) { return params.has(k) && !is_auto(params.json.at(k)); };
  if (type == "WarmupLR" || type == "WarmupDecayLR") {
    b.set("train.scheduler", type == "WarmupLR" ? "constant" : "linear", "scheduler.type");
    if (has("warmup_min_lr") && b.number(params.at("warmup_min_lr")) != 0) {
      b.error("scheduler.params.warmup_min_lr", "ft warms up from 0; set it to 0");
    }
    if (has("warmup_max_lr")) b.set("train.lr", b.number(params.at("warmup_max_lr")), "scheduler.params.warmup_max_lr");
    // DeepSpeed's defaults: 1000 warm-up steps, a log-shaped ramp.
    if (!params.has("warmup_num_steps") || has("warmup_num_steps")) {
      const int64_t steps = has("warmup_num_steps") ? b.integer(params.at("warmup_num_steps")) : 1000;
      b.set("train.warmup_steps", steps, "scheduler.params.warmup_num_steps");
      // ft reads warmup_ratio when warmup_steps is 0; DeepSpeed has no ratio.
      if (steps == 0) b.set("train.warmup_ratio", 0.0, "scheduler.params.warmup_num_steps");
    }
    std::string shape = has("warmup_type") ? b.text(params.at("warmup_type")) : "log";
    if (shape != "log" && shape != "linear") b.error("scheduler.params.warmup_type", "expected log or linear, got '{}'", shape);
    b.set("train.warmup_type", shape, "scheduler.params.warmup_type");
    // ft's schedule ends where the run ends: the two are one number.
    if (type == "WarmupDecayLR" && has("total_num_steps")) {
      b.set("train.max_steps", b.integer(params.at("total_num_steps")), "scheduler.params.total_num_steps");
    }
  } else if (!type.empty()) {
    b.error("scheduler.type", "'{}' is not in ft (it maps WarmupLR and WarmupDecayLR; for a cosine decay use "
            "--set train.scheduler=cosine, HF's get_cosine_schedule_with_warmup)", type);
  }
}

void import_zero(Builder& b, const Field& root) {
  int64_t stage = 0;
  if (root.has("zero_optimization")) {
    const Field z = root.at("zero_optimization");
    if (z.json.is_boolean()) {  // the old spelling: true = stage 1
      stage = z.json.get<bool>() ? 1 : 0;
    } else {
      b.object(z);
      if (z.has("stage") && !is_auto(z.json.at("stage"))) stage = b.integer(z.at("stage"));
      if (stage < 0 || stage > 3) b.error("zero_optimization.stage", "expected 0, 1, 2 or 3, got {}", stage);
      for (const auto& [k, v] : z.json.items()) {
        const std::string key = "zero_optimization." + k;
        if (k == "stage" || is_auto(v) || matches_ft(k, v)) continue;
        if (k == "reduce_bucket_size" && stage <= 1) {
          // Elements, and ft's buckets hold fp32: 4 bytes each.
          b.set("strategy.options.bucket_mb", b.number(z.at(k)) * 4.0 / (1024.0 * 1024.0), key);
        } else if (k == "stage3_prefetch_bucket_size" && stage == 3 && b.number(z.at(k)) == 0) {
          b.set("strategy.options.prefetch", false, key);
        } else if (k == "zero_quantized_weights" || k == "zero_quantized_gradients") {
          b.error(key, "quantized ZeRO communication changes the numbers and is not in ft; set it to false");
        } else if (k == "offload_optimizer" || k == "offload_param") {
          const std::string device = v.is_object() && v.contains("device") ? b.text({v.at("device"), key + ".device"}) : "none";
          if (device != "none") b.warn(key, "ft keeps this state where training runs (host memory when runtime.device=cpu); no " + device + " offload");
        } else if (k == "reduce_bucket_size" || k == "allgather_bucket_size" || k == "stage3_prefetch_bucket_size" ||
                   k == "stage3_param_persistence_threshold" || k == "stage3_max_live_parameters" ||
                   k == "stage3_max_reuse_distance" || k == "sub_group_size" || k == "prefetch_bucket_size") {
          b.warn(key, "ft gathers and reduce-scatters one encoder layer at a time (docs/zero-fsdp.md); ignored");
        } else if (k == "overlap_comm" || k == "reduce_scatter" || k == "contiguous_gradients" || k == "allgather_partitions") {
          b.warn(key, "ft always overlaps, reduce-scatters into one contiguous buffer and all-gathers its shards; ignored");
        } else if (k == "stage3_gather_16bit_weights_on_model_save") {
          b.warn(key, "ft always saves the full model, in fp32 (model.safetensors); ignored");
        } else if (k == "mics_shard_size" || k == "zero_hpz_partition_size") {
          b.warn(key, "ft shards over the whole job (fsdp's HYBRID_SHARD shards within a node); ignored");
        } else if (k == "ignore_unused_parameters" || k == "legacy_stage1" || k == "elastic_checkpoint" ||
                   k == "load_from_fp32_weights" || k == "round_robin_gradients" || k == "memory_efficient_linear" ||
                   k == "cpu_offload" || k == "use_multi_rank_bucket_allreduce") {
          b.warn(key, "no effect in ft; ignored");
        } else {
          b.warn(key, "not a key ft maps; ignored");
        }
      }
    }
  }
  static const char* names[] = {"ddp", "zero1", "zero2", "zero3"};
  b.set("strategy.name", names[stage], root.has("zero_optimization") ? "zero_optimization.stage" : "zero_optimization");
}

// DeepSpeed configures its checkpointing API here; the model opts in. ft's
// encoder does when this section is present, the way the seeds' run used it.
void import_activation_checkpointing(Builder& b, const Field& root) {
  if (!root.has("activation_checkpointing")) return;
  const Field a = root.at("activation_checkpointing");
  b.object(a);
  b.set("train.activation_checkpointing", true, "activation_checkpointing");
  for (const auto& [k, v] : a.json.items()) {
    const std::string key = "activation_checkpointing." + k;
    const bool on = v.is_boolean() ? v.get<bool>() : !v.is_null();
    if ((k == "partition_activations" || k == "cpu_checkpointing" || k == "contiguous_memory_optimization") && on) {
      b.warn(key, "ft keeps each layer's input whole, on the training device; ignored");
    } else if (k == "number_checkpoints" && on) {
      b.warn(key, "ft checkpoints every encoder layer; ignored");
    } else if (k != "synchronize_checkpoint_boundary" && k != "profile" && k != "partition_activations" &&
               k != "cpu_checkpointing" && k != "contiguous_memory_optimization" && k != "number_checkpoints") {
      b.warn(key, "not a key ft maps; ignored");
    }
  }
}

}  // namespace

void import_deepspeed_tree(Builder& b, const Json& root_json, int world_size) {
  const Field root{root_json, ""};
  if (!root_json.is_object()) b.error("(top level)", "expected a JSON object of DeepSpeed settings, got {}", root_json.dump().substr(0, 40));
  // Each section's first problem, all in one line: a file with three
  // mistakes needs one fix round, not three runs.
  std::vector<std::string> problems;
  const auto section = [&problems](const auto& import) {
    try {
      import();
    } catch (const Error& e) {
      problems.emplace_back(e.what());
    }
  };
  section([&] { import_batch(b, root, world_size); });
  section([&] { import_precision(b, root); });
  section([&] { import_optimizer(b, root); });
  section([&] { import_scheduler(b, root); });
  section([&] { import_zero(b, root); });
  section([&] { import_activation_checkpointing(b, root); });
  if (root.has("gradient_clipping") && !is_auto(root_json.at("gradient_clipping"))) {
    section([&] { b.set("train.max_grad_norm", b.number(root.at("gradient_clipping")), "gradient_clipping"); });
  }
  // steps_per_print paces DeepSpeed's own console prints, not the training
  // log: as train.log_every, the usual 2000 would hide every loss line.
  if (root.has("tensorboard")) section([&] {
    const Field t = root.at("tensorboard");
    b.object(t);
    if (t.has("enabled") && b.boolean(t.at("enabled"))) {
      std::string dir = t.has("output_path") ? b.text(t.at("output_path")) : "runs";
      if (t.has("job_name")) dir += "/" + b.text(t.at("job_name"));
      b.set("runtime.tensorboard_dir", dir, "tensorboard.output_path");
    }
  });
  // Training-changing features ft does not have: refusing beats ignoring.
  for (const char* name : {"curriculum_learning", "data_efficiency", "compression_training", "progressive_layer_drop",
                           "eigenvalue", "sparse_attention", "elasticity"}) {
    if (!root.has(name)) continue;
    const Json& s = root_json.at(name);
    const bool enabled = !s.is_object() || !s.contains("enabled") || (s.at("enabled").is_boolean() && s.at("enabled").get<bool>());
    if (enabled) {
      section([&] { b.error(name, "changes what is trained and is not in ft; remove it or set \"enabled\": false"); });
    }
  }
  static const std::set<std::string> mapped = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "fp16", "bf16", "bfloat16",
      "amp", "optimizer", "scheduler", "zero_optimization", "activation_checkpointing", "gradient_clipping",
      "steps_per_print", "tensorboard", "curriculum_learning", "data_efficiency", "compression_training",
      "progressive_layer_drop", "eigenvalue", "sparse_attention", "elasticity"};
  for (const auto& [k, v] : root_json.items()) {
    if (mapped.count(k) || is_auto(v) || matches_ft(k, v)) continue;
    if (k == "wall_clock_breakdown" || k == "memory_breakdown" || k == "flops_profiler" || k == "comms_logger") {
      b.warn(k, "ft's step timings are in the metrics (--metrics-out) and traces (--profile-steps); ignored");
    } else if (k == "communication_data_type" || k == "prescale_gradients" || k == "gradient_predivide_factor" ||
               k == "data_types" || k == "seq_parallel_communication_data_type") {
      b.warn(k, "ft reduces gradients in fp32, averaging after the sum; ignored");
    } else if (k == "wandb" || k == "csv_monitor" || k == "comet") {
      b.warn(k, "ft writes JSON Lines (--metrics-out) and TensorBoard files; ignored");
    } else if (k == "zero_allow_untested_optimizer" || k == "zero_force_ds_cpu_optimizer" || k == "sparse_gradients" ||
               k == "checkpoint" || k == "dump_state" || k == "load_universal_checkpoint") {
      b.warn(k, "no effect in ft; ignored");
    } else {
      b.warn(k, "not a DeepSpeed key ft maps; ignored");
    }
  }
  if (problems.size() == 1) fail("{}", problems.front());
  if (problems.size() > 1) fail("{} problems: {}", problems.size(), fmt::join(problems, "; "));
}

}  // namespace ft::config_import
