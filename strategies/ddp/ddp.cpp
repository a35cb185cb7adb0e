// `ddp` / `ddp_amp`: a full replica per rank; gradients are averaged by
// bucketed all-reduces launched from autograd hooks while backward is still
// running (ft::GradBuffer), and waited on only at the optimizer step.
//
// `ddp_amp` is the same class registered with mixed precision as its
// default (bf16 autocast on CPU, fp16 autocast + loss scaling on CUDA); the
// precision component does the rest, so it is a preset, not a copy.
#include <cstdio>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "ddp_options.h"
#include "ft/comm.h"
#include "ft/grad_buffer.h"
#include "ft/model.h"
#include "ft/plugin.h"
#include "ft/replicated_strategy.h"

namespace {

using ft::ddp::Compression;
using ft::ddp::DdpOptions;

class DdpStrategy final : public ft::ReplicatedStrategy {
 public:
  explicit DdpStrategy(bool amp) : amp_(amp) {}

  ft::PrecisionMode default_precision(c10::DeviceType device) const override {
    if (!amp_) return ft::PrecisionMode::FP32;
    return device == c10::DeviceType::CUDA ? ft::PrecisionMode::FP16 : ft::PrecisionMode::BF16;
  }

  void teardown() override {
    if (buffer_ && ctx_->comm->world_size() > 1 && ctx_->comm->rank() == 0) {
      const ft::OverlapStats& s = buffer_->overlap();
      if (s.syncs > 0) {
        std::printf("ddp: comm hidden behind backward %.0f%% (waited %.3f s of %.3f s in flight, %d bucket(s), %lld sync(s))\n",
                    100.0 * s.hidden_fraction(), s.waited_s, s.in_flight_s, buffer_->num_buckets(),
                    static_cast<long long>(s.syncs));
        std::fflush(stdout);
      }
    }
    buffer_.reset();
  }

 protected:
  void on_setup() override {
    // Validate before the first collective so every rank fails the same way.
    const DdpOptions options = DdpOptions::parse(ctx_->options);
    ft::Comm& comm = *ctx_->comm;
    broadcast_model(comm);
    ft::GradBufferOptions bo;
    bo.bucket_bytes = std::max<int64_t>(4, static_cast<int64_t>(options.bucket_mb * 1024.0 * 1024.0));
    bo.rebuild_with = &comm;  // lay buckets out in the order grads really arrive
    ft::CommHook hook;
    switch (options.compression) {
      case Compression::None: hook = ft::allreduce_avg_hook(comm); break;
      case Compression::FP16: hook = ft::compressed_allreduce_hook(comm, at::kHalf); break;
      case Compression::BF16: hook = ft::compressed_allreduce_hook(comm, at::kBFloat16); break;
    }
    buffer_ = std::make_unique<ft::GradBuffer>(trainable(), bo, std::move(hook));
  }

  void run_backward(const at::Tensor& scaled_loss, bool sync_grads) override {
    buffer_->start_backward(sync_grads);
    scaled_loss.backward();
  }

  void finish_grad_sync() override { buffer_->finish_sync(); }

 private:
  // Rank 0's parameters and buffers, one coalesced broadcast per dtype, so
  // ranks start identical even if their initialisation differed.
  void broadcast_model(ft::Comm& comm) {
    if (comm.world_size() == 1) return;
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> tensors;
    for (const auto& p : model_->parameters()) tensors.push_back(p);
    for (const auto& b : model_->buffers()) tensors.push_back(b);
    std::vector<bool> done(tensors.size(), false);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (done[i]) continue;
      std::vector<size_t> group;
      for (size_t j = i; j < tensors.size(); ++j) {
        if (!done[j] && tensors[j].scalar_type() == tensors[i].scalar_type() &&
            tensors[j].device() == tensors[i].device()) {
          group.push_back(j);
          done[j] = true;
        }
      }
      std::vector<at::Tensor> flat_parts;
      for (size_t j : group) flat_parts.push_back(tensors[j].reshape({-1}));
      at::Tensor flat = at::cat(flat_parts);
      comm.broadcast(flat, 0);
      int64_t offset = 0;
      for (size_t j : group) {
        const int64_t n = tensors[j].numel();
        tensors[j].copy_(flat.narrow(0, offset, n).view(tensors[j].sizes()));
        offset += n;
      }
    }
  }

  bool amp_;
  // Owns the grads (each `.grad` is a view of it) and the bucket hooks;
  // built in on_setup, released in teardown.
  std::unique_ptr<ft::GradBuffer> buffer_;
};

}  // namespace

FT_STRATEGY_PLUGIN("ddp", "1.0.0",
                   FT_STRATEGY("ddp", "DDP: bucketed all-reduce overlapped with backward",
                               [] { return new DdpStrategy(false); }),
                   FT_STRATEGY("ddp_amp", "DDP with mixed precision (bf16 on CPU, fp16 + loss scaling on CUDA)",
                               [] { return new DdpStrategy(true); }))
