// The tiny transformers.Trainer fixtures (tests/data/hf/families/, tasks/):
// `ft run` on a fixture directory must give its 8 recorded losses.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft_run.h"

namespace ft_test {

// `ft run` on fixture directory `d`: the saved model, 8 global batches of
// 16 in file order, the Trainer's settings (the MiniLM run's ft.yaml with
// this fixture's model, data and learning rate), then `flags`. Each step's
// loss within `tolerance` (1e-4 in fp32) of ref_losses.json; some later step of the reference
// must differ from step 1 by more than `min_move`, so that matching it
// means something.
inline void check_trainer_trajectory(const std::filesystem::path& d, const std::string& flags, double min_move,
                                     double tolerance = 1e-4) {
  TempDir tmp("trainer-" + d.filename().string());
  const auto metrics = tmp.path() / "metrics.jsonl";
  run_ok(fmt::format("run --config tests/data/hf/minilm-trainer/ft.yaml --set model.config={} "
                     "--set data.train={} --set train.lr=3e-3 --metrics-out {} {}",
                     d.string(), (d / "train.safetensors").string(), metrics.string(), flags));
  const auto got = step_losses(metrics);
  std::ifstream in(d / "ref_losses.json");
  const auto want = nlohmann::json::parse(in).at("losses").get<std::vector<double>>();
  REQUIRE(want.size() == 8);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(d.filename().string() << " " << flags << " step " << i + 1 << ": ft " << got[i]
                               << " vs transformers.Trainer " << want[i]);
    CHECK(std::abs(got[i] - want[i]) < tolerance);
  }
  double moved = 0;
  for (const double loss : want) moved = std::max(moved, std::abs(loss - want[0]));
  CHECK(moved > min_move);
}

// check_trainer_trajectory of fixture `d` under every parallel strategy
// (`flags` before each), fp32 within 1e-4, and ddp_amp's bf16 within 3e-2.
inline void check_trajectory_under_strategies(const std::filesystem::path& d, const std::string& flags) {
  for (const char* strategy : {"--strategy dp --set strategy.options.replicas=2 --set train.batch_size=16",
                               "--strategy ddp --nproc 2 --set train.batch_size=8",
                               "--strategy zero1 --nproc 2 --set train.batch_size=8",
                               "--strategy horovod --nproc 2 --set train.batch_size=8",
                               "--strategy zero2 --nproc 2 --set train.batch_size=8",
                               "--strategy zero3 --nproc 2 --set train.batch_size=8",
                               "--strategy fsdp --nproc 2 --set train.batch_size=8",
                               "--strategy pipeline --nproc 2 --set train.batch_size=16",
                               "--strategy tensor --nproc 2 --set train.batch_size=16"}) {
    check_trainer_trajectory(d, flags + " " + strategy, 5e-2);
  }
  check_trainer_trajectory(d, flags + " --strategy ddp_amp --precision bf16 --nproc 2 --set train.batch_size=8", 5e-2,
                           3e-2);
}

}  // namespace ft_test
