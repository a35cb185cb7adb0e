// `balance: time`: each unit's forward and backward, timed on this machine.
#include <algorithm>
#include <chrono>
#include <limits>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "ft/comm/comm.h"
#include "ft/model/model.h"
#include "pipeline_strategy.h"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;

// Device work is asynchronous; reading one value waits for it.
void wait_for(const at::Tensor& t) {
  if (!t.device().is_cpu()) (void)t.sum().item<double>();
}

// Runs each unit on its own: its output's backward right after its forward,
// then the output, detached, feeds the next unit. Keeps the fastest of the
// passes seen per unit.
class TimingRunner final : public UnitRunner {
 public:
  explicit TimingRunner(size_t units) : best_(units, std::numeric_limits<double>::infinity()) {}
  at::Tensor run(int index, RunPass, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& fn) override {
    const at::Tensor in = input.is_floating_point() ? input.detach().requires_grad_(true) : input;
    const auto t0 = Clock::now();
    at::Tensor out = fn(in);
    if (out.requires_grad()) out.backward(at::ones_like(out));
    wait_for(out);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    auto& b = best_.at(static_cast<size_t>(index));
    b = std::min(b, s);
    return out.detach();
  }
  const std::vector<double>& best() const { return best_; }

 private:
  std::vector<double> best_;
};

}  // namespace

std::vector<int64_t> measured_unit_costs(EncoderModel& model, Comm& comm, c10::Device device,
                                         int64_t rows, int64_t seq_len) {
  const auto& c = model.config();
  const int64_t seq = std::min(seq_len, c.max_tokens() - model.prompt_length() - model.prefix_length());
  Batch batch;
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  batch.input_ids = at::randint(1, c.vocab_size, {rows, seq}, longs);
  batch.attention_mask = at::ones({rows, seq}, longs);
  batch.token_type_ids = at::zeros({rows, seq}, longs);
  const bool checkpointing = model.activation_checkpointing();
  model.set_activation_checkpointing(false);  // one plain pass per unit
  TimingRunner timer(static_cast<size_t>(model.num_units()));
  model.set_unit_runner(&timer);
  for (int pass = 0; pass < 3; ++pass) (void)model.forward(batch);  // the first warms up; the best counts
  model.set_unit_runner(nullptr);
  model.set_activation_checkpointing(checkpointing);
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  // Every rank must split the same way: the slowest measurement of each unit.
  at::Tensor seconds = at::tensor(timer.best(), at::kDouble);
  comm.all_reduce(seconds, ReduceOp::Max);
  std::vector<int64_t> micros;
  for (int64_t u = 0; u < seconds.numel(); ++u) {
    micros.push_back(std::max<int64_t>(1, static_cast<int64_t>(seconds[u].item<double>() * 1e6)));
  }
  return micros;
}

}  // namespace ft
