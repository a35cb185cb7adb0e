// StatePlacement on 3 ranks (threads, Gloo over loopback): every placement
// gathers back the exact full tensor on every rank, and each rank's part
// comes back out of full state; a mis-shaped tensor is one error line.
#include <array>
#include <functional>
#include <string>
#include <thread>

#include <ATen/ATen.h>

#include "ft/base/error.h"
#include "ft/comm/comm.h"
#include "ft/comm/launcher.h"
#include "ft/io/saved_state.h"
#include "ft/parallel/state_placement.h"
#include "ft_test.h"
#include "ft_two_ranks.h"

namespace {

constexpr int kWorld = 3;

// The full tensors every rank starts from: distinct values, so a misplaced
// element shows.
ft::TensorList full_state() {
  auto values = [](std::vector<int64_t> shape, double from) {
    return at::arange(from, from + static_cast<double>(c10::multiply_integers(shape)), at::kFloat).view(shape);
  };
  return {{"a.weight", values({4, 6}, 0)},      // replicated
          {"b.weight", values({2, 9}, 100)},    // runs: [0, 7), none, [7, 18)
          {"c.weight", values({6, 2}, 200)},    // cut over dim 0 in 2 blocks (q and k)
          {"c.bias", values({12}, 300)},        // cut over dim 0
          {"d.weight", values({5}, 400)},       // stage: owner 1, held by 1 only
          {"e.weight", values({3, 1}, 500)}};  // stage: owner 2, also held by rank 0 (a replica)
}

struct Rank {
  ft::TensorList gathered;
  std::vector<at::Tensor> loaded;  // the locals after load(), in add order (undefined: not held)
  std::string error;
};

// Rank `r`'s parts of `full` and where they live.
ft::StatePlacement place(ft::Comm& comm, const ft::TensorList& full, int r) {
  ft::StatePlacement p(comm);
  p.add("a.weight", {4, 6}, full[0].second.clone(), ft::Placement::replicated());
  const std::array<std::pair<int64_t, int64_t>, kWorld> runs{{{0, 7}, {7, 0}, {7, 11}}};
  const auto [offset, numel] = runs[static_cast<size_t>(r)];
  p.add("b.weight", {2, 9}, numel ? full[1].second.reshape({-1}).narrow(0, offset, numel).clone() : at::Tensor(),
        ft::Placement::rows(offset));
  const ft::TensorCut qk{0, 2};
  p.add("c.weight", {6, 2}, ft::take_part(full[2].second, qk, r, kWorld).clone(), ft::Placement::cut_by(qk));
  const ft::TensorCut rows{0, 1};
  p.add("c.bias", {12}, ft::take_part(full[3].second, rows, r, kWorld).clone(), ft::Placement::cut_by(rows));
  p.add("d.weight", {5}, r == 1 ? full[4].second.clone() : at::Tensor(), ft::Placement::stage(1));
  p.add("e.weight", {3, 1}, r != 1 ? full[5].second.clone() : at::Tensor(), ft::Placement::stage(2));
  return p;
}

void run_rank(int r, int port, Rank& out) {
  try {
    auto comm = ft_test::connect_rank(r, kWorld, port);
    const ft::TensorList full = full_state();
    out.gathered = place(*comm, full, r).gather();
    // Zeroed parts, then loaded back from the full state.
    ft::TensorList zeros;
    for (const auto& [name, t] : full) zeros.emplace_back(name, at::zeros_like(t));
    ft::StatePlacement p = place(*comm, zeros, r);
    p.load(ft::SavedTensors::weights(full), "checkpoint", ft::ShapeCheck::kShape);
    for (const auto& [name, t] : p.gather()) out.loaded.push_back(t);
    comm->barrier();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
}

}  // namespace

TEST_CASE("StatePlacement: replicated, rows, cut and stage tensors gather exactly and load back on 3 ranks") {
  at::set_num_threads(1);
  const int port = ft::pick_free_port("127.0.0.1");
  std::array<Rank, kWorld> ranks;
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) threads.emplace_back([&, r] { run_rank(r, port, ranks[static_cast<size_t>(r)]); });
    for (auto& t : threads) t.join();
  }
  const ft::TensorList full = full_state();
  for (int r = 0; r < kWorld; ++r) {
    CAPTURE(r);
    const Rank& rank = ranks[static_cast<size_t>(r)];
    REQUIRE(rank.error.empty());
    REQUIRE(rank.gathered.size() == full.size());
    REQUIRE(rank.loaded.size() == full.size());
    for (size_t i = 0; i < full.size(); ++i) {
      CAPTURE(full[i].first);
      CHECK(rank.gathered[i].first == full[i].first);
      CHECK(at::equal(rank.gathered[i].second, full[i].second));
      // Loaded parts gathered again: the full state, so every part went back in its place.
      CHECK(at::equal(rank.loaded[i], full[i].second));
    }
  }
}

TEST_CASE("StatePlacement: a saved tensor of the wrong shape or a missing one is one line naming it") {
  auto comm = ft::Comm::create(ft::DistEnv{});
  ft::StatePlacement p(*comm);
  p.add("a.weight", {4, 6}, at::zeros({4, 6}), ft::Placement::replicated());
  p.add("a.weight.exp_avg", {4, 6}, at::zeros({24}), ft::Placement::rows(0));
  const ft::TensorList transposed{{"a.weight", at::zeros({6, 4})}, {"a.weight.exp_avg", at::zeros({24})}};
  CHECK(ft_test::error_of([&] { p.load(ft::SavedTensors::weights(transposed), "checkpoint", ft::ShapeCheck::kShape); }) ==
        "checkpoint: 'a.weight' has shape [6, 4], the model needs [4, 6]");
  // Optimizer buffers are matched by element count (some writers keep them flat).
  ft::OptimizerState flat;
  flat.tensors = {{"a.weight.exp_avg", at::ones({24})}};
  ft::StatePlacement q(*comm);
  q.add("a.weight.exp_avg", {4, 6}, at::zeros({24}), ft::Placement::rows(0));
  const ft::TensorList parts = q.parts(ft::SavedTensors::optimizer(flat), "checkpoint optimizer state",
                                       ft::ShapeCheck::kElements);
  REQUIRE(parts.size() == 1);
  CHECK(at::equal(parts[0].second, at::ones({24})));
  CHECK(ft_test::error_of([&] {
          q.parts(ft::SavedTensors::optimizer(ft::OptimizerState{}), "checkpoint optimizer state",
                  ft::ShapeCheck::kElements);
        }) == "checkpoint optimizer state: no 'a.weight.exp_avg'");
}
