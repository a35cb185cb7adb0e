// Importing the configs users arrive with (ft/config/config_import.h): each mapped
// key of real-looking DeepSpeed, accelerate and TrainingArguments files, the
// layer order (embedded default < imports < --config < --set), one warning
// line per unsupported key, and an error for keys that would change the run.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/config/config_import.h"
#include "ft/base/error.h"
#include "ft/optim/precision.h"
#include "ft/train/trainer.h"
#include "ft_test.h"

namespace {

namespace fs = std::filesystem;

std::string data(const char* name) { return (ft_test::source_dir() / "tests" / "data" / name).string(); }

// A file under a fresh temp directory, for the error cases.
std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / "ft_test_config_import";
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

const std::string kUserYaml =
    "model:\n  config: tiny\n"
    "data:\n  train: rows.jsonl\n  vocab: vocab.txt\n"
    "train:\n  lr: 0.0003\n"
    "strategy:\n  name: ddp\n";

ft::RunConfig on_default(const ft::ConfigImports& imports, const std::vector<std::string>& overrides = {}) {
  return ft::config_from_layers(ft::default_config_yaml(), "default.yaml", true, imports, overrides);
}

int count_warnings_about(const std::vector<std::string>& warnings, const std::string& key) {
  int n = 0;
  for (const auto& w : warnings) n += w.find(": " + key + ":") != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("DeepSpeed ZeRO-2 bf16 with HF's auto values: stage, precision, schedule; auto left alone") {
  ft::ConfigImports imports(2);
  imports.add_deepspeed(data("ds_zero2_bf16.json"));
  const ft::RunConfig c = on_default(imports);
  const ft::RunConfig base = ft::default_config();
  CHECK(c.strategy.name == "zero2");
  CHECK(c.strategy.precision == "bf16");
  CHECK(c.train.scheduler == "linear");  // WarmupDecayLR
  CHECK(c.train.warmup_type == "linear");
  // steps_per_print 2000 paces DeepSpeed's own prints: ft's loss lines keep the run's log_every.
  CHECK(c.train.log_every == base.train.log_every);
  // "auto": the other layers decide.
  CHECK(c.train.lr == base.train.lr);
  CHECK(c.train.batch_size == base.train.batch_size);
  CHECK(c.train.grad_accum == base.train.grad_accum);
  CHECK(c.train.max_grad_norm == base.train.max_grad_norm);
  CHECK(c.train.warmup_steps == base.train.warmup_steps);
  CHECK(c.train.max_steps == base.train.max_steps);
  // One line per key ft cannot honour; the matching ones are silent.
  const auto w = imports.warnings();
  CHECK(w.size() == 2);
  CHECK(count_warnings_about(w, "zero_optimization.allgather_bucket_size") == 1);
  CHECK(count_warnings_about(w, "zero_optimization.round_robin_gradients") == 1);
  for (const auto& line : w) CHECK(line.find('\n') == std::string::npos);
  CHECK(c.source == "default.yaml + " + data("ds_zero2_bf16.json"));
}

TEST_CASE("DeepSpeed ZeRO-3 fp16 (the seeds' row): batch arithmetic, Adam, WarmupLR, loss scaler, checkpointing") {
  ft::ConfigImports imports(2);
  imports.add_deepspeed(data("ds_zero3_fp16_seeds.json"));
  const ft::RunConfig c = on_default(imports);
  CHECK(c.strategy.name == "zero3");
  CHECK(c.train.batch_size == 16);
  CHECK(c.train.grad_accum == 2);  // 64 = 16 x 2 x world 2
  CHECK(c.train.optimizer == "adamw");  // DeepSpeed's Adam is AdamW by default
  CHECK(c.train.lr == 2e-5);
  CHECK(c.train.beta1 == 0.9);
  CHECK(c.train.beta2 == 0.98);
  CHECK(c.train.eps == 1e-6);
  CHECK(c.train.weight_decay == 0.01);
  CHECK(c.train.scheduler == "constant");
  CHECK(c.train.warmup_steps == 100);
  CHECK(c.train.warmup_type == "log");  // DeepSpeed's default ramp
  CHECK(c.train.max_grad_norm == 1.0);
  // steps_per_print governs DeepSpeed's own prints, not ft's loss lines: the other layers decide.
  CHECK(c.train.log_every == ft::default_config().train.log_every);
  CHECK(c.train.activation_checkpointing);
  CHECK(c.strategy.precision == "fp16");
  CHECK(c.strategy.loss_scale == 0);
  CHECK(c.strategy.loss_scale_init == 65536);
  CHECK(c.strategy.loss_scale_window == 1000);
  CHECK(c.strategy.loss_scale_hysteresis == 2);
  CHECK(c.strategy.loss_scale_min == 1);
  CHECK(c.strategy.options.at("prefetch") == "false");  // stage3_prefetch_bucket_size: 0
  CHECK(imports.warnings().size() == 6);

  // 64 is not 16 x accumulation x 3.
  ft::ConfigImports three(3);
  const std::string err = ft_test::error_of([&] { three.add_deepspeed(data("ds_zero3_fp16_seeds.json")); });
  CHECK(err.find("ds_zero3_fp16_seeds.json: train_batch_size: 64") != std::string::npos);
  CHECK(err.find("world size (3)") != std::string::npos);
}

TEST_CASE("the seeds' TrainingArguments: every mapped field") {
  ft::ConfigImports imports;
  imports.add_training_args(data("hf_training_args_seeds.json"));
  const ft::RunConfig c = on_default(imports);
  CHECK(c.train.output_dir == "runs/chnsenticorp");
  CHECK(c.train.batch_size == 64);
  CHECK(c.train.eval_batch_size == 128);
  CHECK(c.train.grad_accum == 1);
  CHECK(c.train.lr == 2e-5);
  CHECK(c.train.weight_decay == 0.01);
  CHECK(c.train.beta1 == 0.9);
  CHECK(c.train.beta2 == 0.999);
  CHECK(c.train.eps == 1e-8);
  CHECK(c.train.max_grad_norm == 1.0);
  CHECK(c.train.epochs == 1);
  CHECK(c.train.max_steps == 0);
  CHECK(c.train.scheduler == "linear");
  CHECK(c.train.warmup_ratio == 0.1);
  CHECK(c.train.warmup_steps == 0);
  CHECK(c.train.log_every == 50);
  CHECK(c.train.eval_every == 0);  // eval_strategy epoch
  CHECK(c.train.save_each_epoch);  // save_strategy epoch
  CHECK(c.train.save_every == 0);
  CHECK(c.train.save_total_limit == 3);
  CHECK(c.train.best_metric == "macro_f1");
  CHECK(c.train.seed == 42);
  CHECK(c.train.optimizer == "adamw");
  CHECK(c.strategy.precision == "fp16");
  CHECK_FALSE(c.train.activation_checkpointing);
  CHECK_FALSE(c.train.drop_last);
  CHECK_FALSE(c.data.group_by_length);
  CHECK(c.runtime.tensorboard_dir == "runs/chnsenticorp/runs/Nov24_10-12-01_gpu-node");
  // A full to_json dump: only the two fields ft honours differently speak.
  const auto w = imports.warnings();
  CHECK(w.size() == 1);
  CHECK(count_warnings_about(w, "metric_for_best_model") == 1);
  CHECK(c.train.load_best_model_at_end);
}

TEST_CASE("TrainingArguments with EarlyStoppingCallback's arguments and label smoothing map onto ft's keys") {
  ft::ConfigImports imports;
  imports.add_training_args(write_temp("args.json", R"({"output_dir": "out", "eval_strategy": "steps", "eval_steps": 20,
      "save_steps": 20, "load_best_model_at_end": true, "metric_for_best_model": "eval_matthews_correlation",
      "greater_is_better": true, "early_stopping_patience": 3, "early_stopping_threshold": 0.001,
      "label_smoothing_factor": 0.1})"));
  const ft::RunConfig c = on_default(imports);
  CHECK(c.train.best_metric == "mcc");
  CHECK(c.train.greater_is_better == std::optional<bool>(true));
  CHECK(c.train.load_best_model_at_end);
  CHECK(c.train.early_stopping_patience == 3);
  CHECK(c.train.early_stopping_threshold == 0.001);
  CHECK(c.train.label_smoothing_factor == 0.1);
  CHECK(c.train.eval_every == 20);
  CHECK(c.train.save_every == 20);
  CHECK(imports.warnings().empty());
}

TEST_CASE("TrainingArguments written by hand: a left-out field takes Hugging Face's default") {
  ft::ConfigImports imports;
  imports.add_training_args(write_temp("args.json", R"({"output_dir": "out", "eval_strategy": "steps", "eval_steps": 20,
      "lr_scheduler_type": "cosine", "warmup_steps": 10, "max_steps": 200, "bf16": true, "gradient_checkpointing": true})"));
  const ft::RunConfig c = on_default(imports);
  CHECK(c.train.lr == 5e-5);
  CHECK(c.train.weight_decay == 0.0);
  CHECK(c.train.batch_size == 8);
  CHECK(c.train.eval_batch_size == 8);
  CHECK(c.train.max_steps == 200);
  CHECK(c.train.scheduler == "cosine");
  CHECK(c.train.warmup_steps == 10);
  CHECK(c.train.eval_every == 20);
  CHECK(c.train.save_every == 500);  // save_strategy steps, save_steps 500
  CHECK(c.train.save_total_limit == 0);  // None: keep all
  CHECK(c.train.log_every == 500);
  CHECK(c.strategy.precision == "bf16");
  CHECK(c.train.activation_checkpointing);
  CHECK(imports.warnings().empty());
}

TEST_CASE("accelerate FSDP config: strategy options, precision and the launch settings") {
  ft::ConfigImports imports;
  imports.add_accelerate(data("accelerate_fsdp.yaml"));
  const ft::RunConfig c = on_default(imports);
  CHECK(c.strategy.name == "fsdp");
  CHECK(c.strategy.options.at("sharding_strategy") == "SHARD_GRAD_OP");
  CHECK(c.strategy.options.at("backward_prefetch") == "BACKWARD_PRE");
  CHECK(c.strategy.options.at("forward_prefetch") == "false");
  CHECK(c.train.save_sharded);  // SHARDED_STATE_DICT
  CHECK(c.train.activation_checkpointing);
  CHECK(c.strategy.precision == "bf16");
  CHECK(c.runtime.device == "cpu");
  const ft::ImportedLaunch l = imports.launch();
  CHECK(l.nproc == 2);  // 4 processes over 2 machines
  CHECK(l.nnodes == 2);
  CHECK(l.node_rank == 0);
  CHECK(l.master_addr == "10.0.0.1");
  CHECK(l.master_port == 29555);
  CHECK(imports.world_size() == 4);
  CHECK(imports.warnings().empty());
}

TEST_CASE("accelerate DeepSpeed config: inline ZeRO settings; an offload device is one warning") {
  ft::ConfigImports imports;
  imports.add_accelerate(data("accelerate_deepspeed.yaml"));
  const ft::RunConfig c = on_default(imports);
  CHECK(c.strategy.name == "zero3");
  CHECK(c.train.grad_accum == 4);
  CHECK(c.train.max_grad_norm == 0.5);
  CHECK(c.strategy.precision == "fp16");
  CHECK(imports.launch().nproc == 2);
  const auto w = imports.warnings();
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("accelerate_deepspeed.yaml: deepspeed_config.offload_optimizer_device:") != std::string::npos);
}

TEST_CASE("layers: embedded default < imports < --config file < --set") {
  ft::ConfigImports imports(2);
  imports.add_deepspeed(data("ds_zero3_fp16_seeds.json"));
  // The user's file wins over the import where both speak.
  ft::RunConfig c = ft::config_from_layers(kUserYaml, "user.yaml", false, imports, {});
  CHECK(c.train.lr == 0.0003);
  CHECK(c.strategy.name == "ddp");
  CHECK(c.train.batch_size == 16);  // only the import speaks
  // --set wins over both.
  c = ft::config_from_layers(kUserYaml, "user.yaml", false, imports, {"train.lr=1e-4", "train.batch_size=4"});
  CHECK(c.train.lr == 1e-4);
  CHECK(c.train.batch_size == 4);
  CHECK(c.source == "user.yaml + " + data("ds_zero3_fp16_seeds.json") + " + --set");
  // The embedded default run is below the import.
  c = on_default(imports);
  CHECK(c.train.lr == 2e-5);
}

TEST_CASE("keys that would change the run are errors naming the file and key") {
  auto ds_error = [](const std::string& json) {
    ft::ConfigImports imports;
    return ft_test::error_of([&] { imports.add_deepspeed(write_temp("ds.json", json)); });
  };
  CHECK(ds_error(R"({"optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}})").find("ds.json: optimizer.type: 'Lamb' is not in ft") != std::string::npos);
  CHECK(ds_error(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-6}}})").find("ds.json: scheduler.params.warmup_min_lr:") != std::string::npos);
  CHECK(ds_error(R"({"scheduler": {"type": "OneCycle"}})").find("ds.json: scheduler.type:") != std::string::npos);
  CHECK(ds_error(R"({"zero_optimization": {"stage": 4}})").find("ds.json: zero_optimization.stage: expected 0, 1, 2 or 3") != std::string::npos);
  CHECK(ds_error(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})").find("adam_w_mode") != std::string::npos);
  CHECK(ds_error(R"({"curriculum_learning": {"enabled": true}})").find("ds.json: curriculum_learning:") != std::string::npos);
  CHECK(ds_error(R"({"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})").find("zero_quantized_gradients") != std::string::npos);
  CHECK(ds_error("{not json").find("ds.json: not valid JSON") != std::string::npos);

  auto ta_error = [](const std::string& json) {
    ft::ConfigImports imports;
    return ft_test::error_of([&] { imports.add_training_args(write_temp("args.json", json)); });
  };
  CHECK(ta_error(R"({"neftune_noise_alpha": 5})").find("args.json: neftune_noise_alpha:") != std::string::npos);
  CHECK(ta_error(R"({"num_train_epochs": 2.5})").find("args.json: num_train_epochs: ft trains whole epochs") != std::string::npos);
  CHECK(ta_error(R"({"optim": "adafactor"})").find("args.json: optim: 'adafactor'") != std::string::npos);
  CHECK(ta_error(R"({"lr_scheduler_type": "polynomial"})").find("args.json: lr_scheduler_type:") != std::string::npos);

  ft::ConfigImports acc;
  const std::string e = ft_test::error_of([&] { acc.add_accelerate(write_temp("acc.yaml", "distributed_type: MEGATRON_LM\n")); });
  CHECK(e.find("acc.yaml: distributed_type: 'MEGATRON_LM'") != std::string::npos);
}

TEST_CASE("two files that disagree on one key are an error naming both; DeepSpeed's scheduler replaces HF's") {
  const std::string ds = write_temp("ds_lr.json", R"({"optimizer": {"type": "AdamW", "params": {"lr": 3e-5}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 50, "warmup_type": "linear"}}})");
  ft::ConfigImports imports;
  imports.add_training_args(write_temp("args_ds.json", R"({"learning_rate": 2e-5, "deepspeed": ")" + ds + R"("})"));
  const std::string err = ft_test::error_of([&] { (void)imports.values(); });
  CHECK(err.find("ds_lr.json: optimizer.params.lr sets train.lr=3e-05") != std::string::npos);
  CHECK(err.find("args_ds.json: learning_rate sets it to 2e-05") != std::string::npos);

  ft::ConfigImports agree;
  agree.add_training_args(write_temp("args_ok.json", R"({"learning_rate": 3e-5, "lr_scheduler_type": "cosine", "deepspeed": ")" + ds + R"("})"));
  const ft::RunConfig c = on_default(agree);
  CHECK(c.train.lr == 3e-5);
  CHECK(c.train.scheduler == "constant");  // WarmupLR, not lr_scheduler_type
  CHECK(c.train.warmup_steps == 50);
}

TEST_CASE("an unknown key is one warning line, and loading goes on") {
  ft::ConfigImports imports;
  imports.add_deepspeed(write_temp("ds_unknown.json", R"({"zero_optimization": {"stage": 1}, "flux_capacitor": 3})"));
  const auto w = imports.warnings();
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("ds_unknown.json: flux_capacitor: not a DeepSpeed key ft maps; ignored") != std::string::npos);
  CHECK(on_default(imports).strategy.name == "zero1");
}

TEST_CASE("schedules: cosine as HF's get_cosine_schedule_with_warmup, log warm-up as DeepSpeed's WarmupLR") {
  ft::TrainConfig t;
  t.lr = 1.0;
  t.scheduler = "cosine";
  CHECK(ft::scheduled_lr(t, 0, 110, 10) == 0.0);
  CHECK(ft::scheduled_lr(t, 5, 110, 10) == doctest::Approx(0.5));
  CHECK(ft::scheduled_lr(t, 10, 110, 10) == doctest::Approx(1.0));
  CHECK(ft::scheduled_lr(t, 60, 110, 10) == doctest::Approx(0.5));
  CHECK(ft::scheduled_lr(t, 35, 110, 10) == doctest::Approx(0.5 * (1 + std::cos(M_PI * 0.25))));
  t.scheduler = "constant";
  t.warmup_type = "log";
  CHECK(ft::scheduled_lr(t, 0, 100, 10) == 0.0);
  CHECK(ft::scheduled_lr(t, 4, 100, 10) == doctest::Approx(std::log(5.0) / std::log(10.0)));
  CHECK(ft::scheduled_lr(t, 9, 100, 10) == doctest::Approx(1.0));
  CHECK(ft::scheduled_lr(t, 50, 100, 10) == 1.0);
}

TEST_CASE("DeepSpeed's loss scaler: hysteresis absorbs overflows until growth refills it, min scale holds") {
  ft::LossScalerOptions o;
  o.init_scale = 8;
  o.growth_interval = 3;
  o.hysteresis = 2;
  o.min_scale = 2;
  // The scaler alone: no autocast runs, so the CUDA device type needs no GPU (CPU fp16 autocast is refused on 1.13).
  ft::Precision p(ft::PrecisionMode::FP16, c10::DeviceType::CUDA, o);
  p.update(true);  // absorbed
  CHECK(p.loss_scale() == 8);
  p.update(true);  // halves
  CHECK(p.loss_scale() == 4);
  p.update(true);  // the hysteresis is spent until the scale grows again
  CHECK(p.loss_scale() == 2);
  p.update(true);  // the floor
  CHECK(p.loss_scale() == 2);
  for (int i = 0; i < 3; ++i) p.update(false);
  CHECK(p.loss_scale() == 4);  // grew; the hysteresis is full again
  p.update(true);
  CHECK(p.loss_scale() == 4);
  // Resume keeps the hysteresis left.
  ft::Precision q(ft::PrecisionMode::FP16, c10::DeviceType::CUDA, o);
  q.load_state(p.state());
  q.update(true);
  CHECK(q.loss_scale() == 2);
  // A fixed scale never moves.
  o.dynamic = false;
  ft::Precision fixed(ft::PrecisionMode::FP16, c10::DeviceType::CUDA, o);
  fixed.update(true);
  CHECK(fixed.loss_scale() == 8);
}
