// Resume exactness (CPU): a run saved after k steps and resumed gives the
// uninterrupted run's loss curve and final weights, for every built-in
// strategy (ddp_amp in bf16, the others fp32), with everything that carries
// state switched on:
// dropout (per-rank RNG streams), shuffle (sampler position mid-epoch, and
// the next epoch's order), linear warm-up (the schedule across the resume
// point), grad_accum 2 and AdamW moments and step count. Also: the fp16 loss
// scaler's state round-trips through trainer_state.json exactly, checked at
// unit level: fp16 autocast does not run on CPU in LibTorch 1.13
// ("AutocastCPU only support Bfloat16"), and bf16 needs no scaler.
//
// test_cli covers the single-strategy basics (dropout, warm-up ratio) and
// test_zero a cross-strategy resume against the PyTorch reference; this file
// adds the distributed strategies, accumulation and mid-epoch positions, and
// asserts equality to 1e-7 instead of a tolerance.
#include <cmath>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "ft/checkpoint/checkpoint.h"
#include "ft/optim/precision.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"
#include "ft_weights.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;

constexpr double kExact = 1e-7;

struct Strategy {
  const char* name;
  const char* flags;  // global batch 16 (6 steps per epoch over 96 rows) in every case
  int world;
};


ft_test::RunOutput run_tiny(const fsys::path& dir, const std::string& extra, const fsys::path& metrics) {
  return ft_test::run_ft(fmt::format("run --config {}/run.yaml --set train.grad_accum=2 --timeout 60 "
                                     "--metrics-out {} {}",
                                     dir.string(), metrics.string(), extra));
}

// Saved at step 3 of 8: mid-epoch (6 steps per epoch) and mid-warm-up (5
// steps); the resumed part crosses into epoch 1 and its new shuffle.
// Returns {max |loss diff|, max |weight diff|} for the report.
std::pair<double, double> check_resume(const Strategy& s) {
  const std::string name = s.name;
  CAPTURE(name);
  ft_test::TempDir tmp(std::string("resume-") + s.name);
  ft_test::write_tiny_task(tmp.path());
  const auto full_dir = tmp.path() / "full";
  auto full = run_tiny(tmp.path(), fmt::format("{} --max-steps 8 --set train.save_every=3 --output-dir {}", s.flags,
                                               full_dir.string()),
                       tmp.path() / "full.jsonl");
  INFO(full.output);
  REQUIRE(full.exit_code == 0);
  const auto all = ft_test::step_losses(tmp.path() / "full.jsonl");
  REQUIRE(all.size() == 8);

  const auto ckpt = full_dir / "checkpoint-3";
  const auto saved = ft::load_checkpoint(ckpt, /*with_training_state=*/true);
  REQUIRE(saved.state.has_value());
  CHECK(saved.state->global_step == 3);
  CHECK(saved.state->epoch == 0);
  CHECK(saved.state->step_in_epoch == 3);  // the sampler position, mid-epoch
  CHECK(saved.state->world_size == s.world);
  CHECK(static_cast<int>(saved.rng_states.size()) == s.world);  // one dropout stream per rank
  REQUIRE(saved.optimizer.has_value());
  CHECK(saved.optimizer->step == 3);

  const auto resumed_dir = tmp.path() / "resumed";
  auto resumed = run_tiny(tmp.path(), fmt::format("{} --max-steps 8 --resume {} --output-dir {}", s.flags,
                                                  ckpt.string(), resumed_dir.string()),
                          tmp.path() / "resumed.jsonl");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto tail = ft_test::step_losses(tmp.path() / "resumed.jsonl");
  REQUIRE(tail.size() == 5);
  double worst = 0;
  for (size_t i = 0; i < tail.size(); ++i) {
    INFO("step " << i + 4 << ": resumed " << tail[i] << " vs uninterrupted " << all[i + 3]);
    CHECK(std::abs(tail[i] - all[i + 3]) <= kExact);
    worst = std::max(worst, std::abs(tail[i] - all[i + 3]));
  }
  const double weights = ft_test::max_abs_diff(ft::safetensors::load((resumed_dir / "final/model.safetensors").string()),
                                      ft::safetensors::load((full_dir / "final/model.safetensors").string()));
  CHECK(weights <= kExact);
  // The resumed run's learning rates follow the same schedule.
  const auto lr_full = ft_test::read_events(tmp.path() / "full.jsonl", "step");
  const auto lr_resumed = ft_test::read_events(tmp.path() / "resumed.jsonl", "step");
  for (size_t i = 0; i < lr_resumed.size(); ++i)
    CHECK(lr_resumed[i].at("lr").get<double>() == lr_full[i + 3].at("lr").get<double>());
  return {worst, weights};
}

}  // namespace

TEST_CASE("resume after 3 of 8 steps reproduces the uninterrupted loss curve and weights (fp32, CPU)") {
  // Every built-in strategy; the model-parallel ones read the whole global
  // batch on each rank of their group, so their per-rank batch is doubled.
  for (const Strategy& s : {Strategy{"single", "--strategy single --set train.batch_size=8", 1},
                            // dp's replicas draw dropout seeds from the shared generator on
                            // their own threads, in no fixed order (strategies/dp/dp.cpp):
                            // even an uninterrupted rerun differs, so dp resumes without it.
                            Strategy{"dp", "--strategy dp --set train.batch_size=8 --set strategy.options.replicas=2 "
                                           "--set model.dropout=0", 1},
                            Strategy{"ddp", "--strategy ddp --nproc 2", 2},
                            Strategy{"ddp_amp", "--strategy ddp_amp --nproc 2 --set strategy.precision=auto", 2},  // bf16
                            Strategy{"horovod", "--strategy horovod --nproc 2", 2},
                            Strategy{"zero1", "--strategy zero1 --nproc 2", 2},
                            Strategy{"zero2", "--strategy zero2 --nproc 2", 2},
                            Strategy{"zero3", "--strategy zero3 --nproc 2", 2},
                            Strategy{"fsdp", "--strategy fsdp --nproc 2", 2},
                            Strategy{"pipeline", "--strategy pipeline --nproc 2 --set train.batch_size=8", 2},
                            Strategy{"tensor", "--strategy tensor --nproc 2 --set train.batch_size=8", 2},
                            Strategy{"auto", "--strategy auto --nproc 2", 2}}) {
    const auto [loss_diff, weight_diff] = check_resume(s);
    MESSAGE(std::string(s.name) << ": resumed vs uninterrupted, max |loss diff| " << loss_diff << ", max |weight diff| "
                   << weight_diff);
  }
}

TEST_CASE("the fp16 loss scaler's state round-trips through trainer_state.json exactly") {
  // The scaler alone runs no autocast, so the CUDA device type needs no GPU
  // (LibTorch 1.13 refuses fp16 autocast on the CPU device type).
  ft::LossScalerOptions opts;
  opts.growth_interval = 3;
  ft::Precision live(ft::PrecisionMode::FP16, c10::kCUDA, opts);
  // Overflows back off, clean steps count towards growth: scale 2^15, 2 clean steps.
  for (bool inf : {false, true, false, false, true, false, false, false, false, false}) live.update(inf);
  // An awkward value too: the JSON must keep all 17 significant digits.
  ft::Precision odd(ft::PrecisionMode::FP16, c10::kCUDA, opts);
  odd.load_state({1234.5678901234567, 1});

  for (ft::Precision* p : {&live, &odd}) {
    ft_test::TempDir tmp("scaler");
    ft::CheckpointData data;
    data.config.vocab_size = 5;
    data.config.hidden_size = 4;
    data.config.num_hidden_layers = 1;
    data.config.num_attention_heads = 1;
    data.config.intermediate_size = 4;
    data.config.num_labels = 2;
    data.config.id2label = {"a", "b"};
    data.model = {{"w", at::ones({2, 2})}};
    data.optimizer = ft::OptimizerState{};
    data.optimizer->step = 7;
    data.optimizer->tensors = {{"w.exp_avg", at::zeros({2, 2})}};
    ft::TrainerState st;
    st.global_step = 7;
    st.loss_scaler = p->state();
    st.strategy = "single";
    data.state = st;
    ft::save_checkpoint(tmp.path() / "ck", data);

    const auto back = ft::load_checkpoint(tmp.path() / "ck", true);
    REQUIRE(back.state.has_value());
    ft::Precision restored(ft::PrecisionMode::FP16, c10::kCUDA, opts);
    restored.load_state(back.state->loss_scaler);
    CHECK(restored.state() == p->state());  // bitwise: == on doubles
    CHECK(restored.loss_scale() == p->loss_scale());
    // And they keep evolving identically (growth after the same clean steps).
    for (bool inf : {false, false, false, true, false, false, false}) {
      p->update(inf);
      restored.update(inf);
      CHECK(restored.state() == p->state());
    }
  }
  CHECK(live.loss_scale() == 65536.0);  // backed off twice, grew twice on the way
}
