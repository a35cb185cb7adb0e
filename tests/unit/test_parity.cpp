// The source of truth for "every strategy trains the same model": each case
// runs the real `ft` on ../shared/fixtures/parity-tiny (fp32, dropout 0,
// global batch 32) and must reproduce the PyTorch reference losses.
#include <fmt/format.h>

#include "ft_run.h"

namespace {

struct ParityCase {
  const char* strategy;
  int nproc;
  int batch_size;  // per rank, per micro-batch
  int grad_accum;
  const char* extra;  // more flags
  double tolerance;
};

// One row per (strategy, layout); the global batch is always 32. fp32 rows
// hold at 1e-5 (measured: within 2.4e-7); padding-free is the default path.
const ParityCase kCases[] = {
    {"single", 1, 32, 1, "", 1e-5},
    {"single", 1, 16, 2, "", 1e-5},
    {"ddp", 2, 16, 1, "", 1e-5},
    {"ddp", 4, 8, 1, "", 1e-5},
    // ddp_amp in its own precision (the config says fp32; auto takes the
    // strategy's default: bf16 autocast on CPU) against the fp32 reference.
    // bf16 keeps 8 bits of mantissa; measured within 3.2e-4, held at 1e-3.
    {"ddp_amp", 2, 16, 1, "--set strategy.precision=auto", 1e-3},
    // auto on 2 ranks without a memory limit picks a data-parallel strategy
    // (ddp under fp32): the same losses.
    {"auto", 2, 16, 1, "", 1e-5},
    {"dp", 1, 32, 1, "--set strategy.options.replicas=2", 1e-5},
    {"horovod", 2, 16, 1, "", 1e-5},
    {"horovod", 2, 16, 1, "--set strategy.options.compression=fp16", 1e-2},
    // ZeRO / FSDP (helper `zero`): 2 and 4 ranks; the flat buffers do not
    // divide evenly, so padding is exercised.
    {"zero1", 2, 16, 1, "", 1e-5},
    {"zero1", 4, 8, 1, "", 1e-5},
    {"zero2", 2, 16, 1, "", 1e-5},
    {"zero2", 4, 8, 1, "", 1e-5},
    {"zero3", 2, 16, 1, "", 1e-5},
    {"zero3", 4, 8, 1, "", 1e-5},
    {"zero3", 2, 8, 2, "", 1e-5},
    // Accumulation over 4 micro-batches, both rules: DeepSpeed's (each
    // micro-batch reduce-scattered into the gradient shard, the default) and
    // FSDP's no_sync (full gradients kept, one reduce-scatter).
    {"zero2", 2, 4, 4, "", 1e-5},
    {"zero2", 2, 4, 4, "--set strategy.options.grad_accumulation=no_sync", 1e-5},
    {"zero3", 4, 2, 4, "", 1e-5},
    {"zero3", 2, 4, 4, "--set strategy.options.grad_accumulation=no_sync", 1e-5},
    {"fsdp", 2, 4, 4, "--set strategy.options.grad_buckets=1", 1e-5},
    {"fsdp", 4, 2, 4, "--set strategy.options.grad_accumulation=no_sync", 1e-5},
    {"fsdp", 2, 16, 1, "--set strategy.options.sharding_strategy=FULL_SHARD", 1e-5},
    {"fsdp", 4, 8, 1, "--set strategy.options.sharding_strategy=FULL_SHARD", 1e-5},
    {"fsdp", 2, 16, 1, "--set strategy.options.sharding_strategy=SHARD_GRAD_OP", 1e-5},
    {"fsdp", 4, 8, 1, "--set strategy.options.sharding_strategy=SHARD_GRAD_OP", 1e-5},
    {"fsdp", 2, 16, 1, "--set strategy.options.sharding_strategy=NO_SHARD", 1e-5},
    {"fsdp", 4, 8, 1, "--set strategy.options.sharding_strategy=NO_SHARD", 1e-5},
    // Hybrid: 4 ranks as 2 shard groups of 2 (a DeviceMesh over ft::Comm sub-groups).
    {"fsdp", 4, 8, 1, "--set strategy.options.sharding_strategy=HYBRID_SHARD --set strategy.options.shard_group_size=2",
     1e-5},
    {"fsdp", 4, 8, 1,
     "--set strategy.options.sharding_strategy=_HYBRID_SHARD_ZERO2 --set strategy.options.shard_group_size=2", 1e-5},
    // Pipeline (the model cut into stages; micro-batches = train.grad_accum):
    // 2 stages of 2 units, 4 stages of one unit each, both schedules.
    {"pipeline", 2, 8, 4, "--set strategy.options.schedule=gpipe", 1e-5},
    {"pipeline", 2, 8, 4, "--set strategy.options.schedule=1f1b", 1e-5},
    {"pipeline", 4, 8, 4, "--set strategy.options.schedule=gpipe", 1e-5},
    {"pipeline", 4, 8, 4, "--set strategy.options.schedule=1f1b", 1e-5},
    // dp 2 x pp 2: two pipelines of 2 stages, each on half the batch.
    {"pipeline", 4, 8, 2, "--set strategy.options.stages=2", 1e-5},
    {"pipeline", 2, 8, 4, "--set strategy.options.balance=time", 1e-5},
    {"pipeline", 2, 8, 4, "--set train.activation_checkpointing=true", 1e-5},
    {"pipeline", 2, 8, 4, "--set model.padding_free=false --set train.activation_checkpointing=true", 1e-5},
    // Tensor parallel (Megatron): parity-tiny has 2 heads, so 2 ranks per
    // group; 4 ranks run as dp 2 x tp 2.
    {"tensor", 2, 32, 1, "", 1e-5},
    {"tensor", 2, 16, 2, "--set train.activation_checkpointing=true", 1e-5},
    {"tensor", 2, 32, 1, "--set model.padding_free=false", 1e-5},
    {"tensor", 4, 16, 1, "--set strategy.options.tp_size=2", 1e-5},
    // 4 ranks on the fixture's 2 heads: pairs of ranks share a head, each
    // holding half its dimensions (their partial scores summed).
    {"tensor", 4, 32, 1, "", 1e-5},
    {"tensor", 4, 16, 2, "--set train.activation_checkpointing=true", 1e-5},
    // The padded path (model.padding_free=false: every pad position computed,
    // as Hugging Face does) is kept for comparisons; it must agree as well.
    {"single", 1, 32, 1, "--set model.padding_free=false", 1e-5},
    {"ddp", 2, 16, 1, "--set model.padding_free=false", 1e-5},
    {"zero3", 2, 16, 1, "--set model.padding_free=false", 1e-5},
    {"dp", 1, 32, 1, "--set model.padding_free=false --set strategy.options.replicas=2", 1e-5},
};

void check_case(const ParityCase& c) {
  ft_test::TempDir tmp(fmt::format("parity-{}-{}", c.strategy, c.nproc));
  const auto metrics = tmp.path() / "metrics.jsonl";
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --strategy {} --nproc {} --threads 1 --set train.batch_size={} "
      "--set train.grad_accum={} --metrics-out {} {}",
      c.strategy, c.nproc, c.batch_size, c.grad_accum, metrics.string(), c.extra);
  auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  const auto ref = ft_test::reference_losses();
  const auto got = ft_test::step_losses(metrics);
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(got[i] - ref[i]) < c.tolerance);
  }
  // Hybrid sharding reports the mesh it built.
  if (std::string(c.extra).find("shard_group_size=2") != std::string::npos) {
    const auto hybrid = ft_test::strategy_events(metrics, "sharded.hybrid");
    REQUIRE(hybrid.size() == 1);
    CHECK(hybrid[0] == nlohmann::json{{"strategy", c.strategy}, {"replicate", 2}, {"shard", 2}});
  }
}

}  // namespace

TEST_CASE("every strategy reproduces the PyTorch reference losses on parity-tiny") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  for (const auto& c : kCases) {
    // The extra flags are part of the name: doctest runs only the first of
    // several subcases with one name.
    SUBCASE(fmt::format("{} x{} accum {} {}", c.strategy, c.nproc, c.grad_accum, c.extra).c_str()) {
      check_case(c);
    }
  }
}

namespace {

// Fine-tuning controls have no PyTorch reference here; the single-process run
// of the same settings is the reference each distributed layout must match.
struct ControlCase {
  const char* name;
  const char* settings;  // flags shared by the reference and the distributed run
  const char* strategy;
  int nproc;
  int data_parallel = 0;  // ranks reading different data; 0: all nproc (a pipeline's stages read the same)
  int grad_accum = 1;     // micro-batches per step, in the reference run too
};

const ControlCase kControlCases[] = {
    {"freeze + layer-wise LR + head LR",
     "--set train.freeze_layers=1 --set train.layer_lr_decay=0.5 --set train.head_lr=3e-3", "ddp", 2},
    // Only adapters + classifier train, so only they are reduced and sharded.
    {"LoRA r=4", "--set lora.rank=4 --set lora.alpha=8", "zero2", 2},
    // Frozen base weights inside sharded units: backward still reads them
    // after the unit's last trainable grad arrived.
    {"LoRA r=4", "--set lora.rank=4 --set lora.alpha=8", "zero3", 2},
    // Frozen embeddings on the first stage: it still receives (and drops) the
    // gradient of what it sent.
    // 4 micro-batches of 8 through 2 stages.
    {"LoRA r=4", "--set lora.rank=4 --set lora.alpha=8", "pipeline", 2, 1, 4},
    // Tensor parallel: LoRA on column- and row-parallel Linears (a slice of
    // one matrix, partial gradients of the other), at 2 ranks and at 4
    // (heads shared); adapters on the summed outputs; prefixes cut by heads.
    // lr 1e-2: at 1e-3 the adapters move too little in 8 steps for unsummed
    // partial gradients to show (measured 1e-4 off at most, 3e-3 at 1e-2).
    {"LoRA r=4 on every Linear",
     "--set lora.rank=4 --set lora.alpha=8 --set lora.targets=[query,key,value,dense] --set train.lr=1e-2", "tensor", 2,
     1},
    {"LoRA r=4", "--set lora.rank=4 --set lora.alpha=8 --set train.lr=1e-2", "tensor", 4, 1},
    {"bottleneck adapters", "--set adapter.size=8 --set train.lr=1e-2", "tensor", 2, 1},
    {"prefix tuning", "--set prefix.length=4 --set train.lr=1e-2", "tensor", 4, 1},
};

// The case's run (a global batch of 32), or with `reference` the single-process one.
std::vector<double> control_losses(const ControlCase& c, bool reference) {
  const char* strategy = reference ? "single" : c.strategy;
  const int nproc = reference ? 1 : c.nproc;
  const int readers = reference ? 1 : (c.data_parallel > 0 ? c.data_parallel : c.nproc);
  ft_test::TempDir tmp(fmt::format("control-{}-{}", strategy, nproc));
  const auto metrics = tmp.path() / "metrics.jsonl";
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --strategy {} --nproc {} --threads 1 --set train.batch_size={} "
      "--set train.grad_accum={} --metrics-out {} {}",
      strategy, nproc, 32 / readers / c.grad_accum, c.grad_accum, metrics.string(), c.settings);
  auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  return ft_test::step_losses(metrics);
}

}  // namespace

TEST_CASE("fine-tuning controls: distributed runs reproduce the single-process run of the same settings") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  for (const auto& c : kControlCases) {
    SUBCASE(fmt::format("{}: {} x{}", c.name, c.strategy, c.nproc).c_str()) {
      const auto ref = control_losses(c, /*reference=*/true);
      const auto got = control_losses(c, /*reference=*/false);
      REQUIRE(ref.size() == 8);
      REQUIRE(got.size() == ref.size());
      // The controls must change the run, or the case proves nothing.
      CHECK(std::abs(ref.back() - ft_test::reference_losses().back()) > 1e-3);
      for (size_t i = 0; i < ref.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(std::abs(got[i] - ref[i]) < 1e-4);
      }
    }
  }
}
