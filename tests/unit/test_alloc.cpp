// No allocation inside a step after the first: every strategy that uses the
// one gradient buffer (ddp, zero1, zero2, zero3, fsdp) runs Strategy::step()
// on persistent storage (GradBuffer, in-place reduce-scatter and all-gather
// on the Comm's ring thread, the gather pool, fused AdamW), so LibTorch's
// CPU allocator sees nothing between the two ranks entering step() and both
// leaving it, from the second step on. The first step may allocate scratch
// that is then kept. The last case shows the counter does count.
//
// Two ranks run as two threads of this process (Gloo over loopback), as in
// test_sharded_checkpoint; the counter is process-wide, so it also sees the
// Gloo and ring threads.
#include <condition_variable>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include "ft/observe/alloc_counter.h"
#include "ft/comm/comm.h"
#include "ft_two_ranks.h"
#include "ft/comm/launcher.h"
#include "ft/model/model.h"
#include "ft/optim/optim.h"
#include "ft/plugin/plugin_host.h"
#include "ft/optim/precision.h"
#include "ft/parallel/strategy.h"
#include "sharded_strategy.h"

namespace {


// Both threads reach the same point before either goes on.
class Rendezvous {
 public:
  void arrive() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int gen = generation_;
    if (++waiting_ == 2) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_ = 0;
  int generation_ = 0;
};

constexpr int kSteps = 4;

// Allocations counted in each step's window (both ranks inside step()).
std::vector<int64_t> step_allocations(const std::function<std::shared_ptr<ft::Strategy>()>& make) {
  ft::CpuAllocationCounter counter;
  Rendezvous meet;
  std::vector<int64_t> per_step(kSteps, 0);
  std::string errors[2];
  const int port = ft::pick_free_port("127.0.0.1");
  auto rank_main = [&](int rank) {
    try {
      auto comm = ft_test::connect_rank(rank, 2, port);
      at::manual_seed(3);
      auto model = std::make_shared<ft::EncoderModel>(ft_test::two_rank_config());
      ft::Precision precision(ft::PrecisionMode::FP32, c10::kCPU);
      ft::StrategyContext ctx;
      ctx.comm = comm.get();
      ctx.precision = &precision;
      auto strategy = make();
      ft::OptimizerSpec spec;
      strategy->setup(model, spec, ft::default_param_plan(model->weights(), 0.01, false), ctx);
      for (int s = 0; s < kSteps; ++s) {
        ft::Batch b;
        b.input_ids = at::randint(1, 41, {2, 6}, at::kLong);
        b.attention_mask = at::ones({2, 6}, at::kLong);
        b.token_type_ids = at::zeros({2, 6}, at::kLong);
        b.labels = at::randint(0, 3, {2}, at::kLong);
        auto loss = at::cross_entropy_loss(strategy->forward(b), b.labels);
        strategy->backward(loss, true);
        meet.arrive();
        if (rank == 0) counter.arm(true);
        meet.arrive();
        strategy->step({1e-3, 1.0});
        meet.arrive();
        if (rank == 0) {
          counter.arm(false);
          per_step[static_cast<size_t>(s)] = counter.count();
        }
        meet.arrive();
      }
      strategy->teardown();
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::thread r0(rank_main, 0), r1(rank_main, 1);
  r0.join();
  r1.join();
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  // Cumulative counts -> per step.
  for (int s = kSteps - 1; s > 0; --s) per_step[static_cast<size_t>(s)] -= per_step[static_cast<size_t>(s) - 1];
  return per_step;
}

}  // namespace

TEST_CASE("no tensor is allocated inside a step after the first") {
  at::set_num_threads(1);
  const ft::PluginHost host = ft::PluginHost::discover(ft::DiscoveryOptions{});
  const std::map<std::string, std::function<std::shared_ptr<ft::Strategy>()>> strategies = {
      {"ddp", [&] { return host.create("ddp"); }},
      {"zero1", [] { return std::make_shared<ft::ShardedStrategy>(ft::ShardingPolicy::zero(ft::ZeroStage::kOptimizerStates)); }},
      {"zero2", [] { return std::make_shared<ft::ShardedStrategy>(ft::ShardingPolicy::zero(ft::ZeroStage::kGradients)); }},
      {"zero3", [] { return std::make_shared<ft::ShardedStrategy>(ft::ShardingPolicy::zero(ft::ZeroStage::kWeights)); }},
      {"fsdp", [] { return std::make_shared<ft::ShardedStrategy>(ft::ShardingPolicy::fsdp(ft::FsdpSharding::kFullShard, 1)); }},
  };
  for (const auto& [name, make] : strategies) {
    CAPTURE(name);
    const auto per_step = step_allocations(make);
    CAPTURE(per_step[0]);
    for (int s = 1; s < kSteps; ++s) {
      CAPTURE(s);
      CHECK(per_step[static_cast<size_t>(s)] == 0);
    }
  }
}

TEST_CASE("the allocation counter counts only while armed") {
  ft::CpuAllocationCounter counter;
  at::Tensor before = at::empty({16});
  counter.arm(true);
  at::Tensor a = at::empty({16});
  at::Tensor b = at::zeros({4, 4});
  counter.arm(false);
  at::Tensor after = at::empty({16});
  CHECK(counter.count() == 2);
  CHECK(counter.bytes() == 2 * 16 * 4);
}
