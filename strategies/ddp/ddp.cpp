// `ddp` / `ddp_amp`: a full replica per rank; gradients are averaged by
// bucketed all-reduces launched from autograd hooks while backward is still
// running (ft::GradBuffer), and waited on only at the optimizer step.
//
// `ddp_amp` is the same class registered with mixed precision as its
// default (bf16 autocast on CPU, fp16 autocast + loss scaling on CUDA); the
// precision component does the rest, so it is a preset, not a copy.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddp_options.h"
#include "ft/parallel/abilities.h"
#include "ft/comm/comm.h"
#include "ft/parallel/grad_buffer.h"
#include "ft/model/model.h"
#include "ft/plugin/plugin.h"
#include "ft/parallel/replicated_strategy.h"

namespace {

using ft::ddp::Compression;
using ft::ddp::DdpOptions;

class DdpStrategy final : public ft::ReplicatedStrategy, public ft::MemoryModel {
 public:
  explicit DdpStrategy(bool amp) : amp_(amp) {}

  // A full replica: fp32 weights, gradients (the GradBuffer) and AdamW's two
  // moments on every rank.
  std::string memory_formula(const std::map<std::string, std::string>&) const override { return "16Ψ"; }
  int64_t theory_bytes(const ft::TheoryInputs& in) const override { return 16 * in.model.params; }

  // One bucketed ring all-reduce of the fp32 gradients per step; `auto`
  // weighs ddp under fp32 and ddp_amp under mixed precision, which is all
  // that tells them apart.
  std::optional<ft::CandidateEstimate> estimate(const ft::PlanInputs& in, const ft::EncoderModel&) const override {
    if (amp_ != in.mixed_precision) return std::nullopt;
    ft::CandidateEstimate e = ft::begin_estimate(amp_ ? "ddp_amp" : "ddp", "16Ψ", in);
    const int64_t psi = in.model.params, grad_bytes = 4 * psi;
    e.state_bytes = 16 * psi;
    e.extra_bytes = in.mixed_precision ? 2 * psi : 0;  // autocast's 16-bit weight copies
    const int n = std::max(1, in.world_size);
    if (n > 1) {
      const int64_t buckets = (grad_bytes + in.bucket_bytes - 1) / std::max<int64_t>(1, in.bucket_bytes);
      e.collectives = buckets;
      e.comm_bytes = static_cast<int64_t>(2.0 * (n - 1) / n * static_cast<double>(grad_bytes));
      e.comm_s = ft::ring_allreduce_seconds(in.link, n, grad_bytes, buckets);
    }
    ft::finish_estimate(e, in);
    return e;
  }

  ft::PrecisionMode default_precision(c10::DeviceType device) const override {
    if (!amp_) return ft::PrecisionMode::FP32;
    return device == c10::DeviceType::CUDA ? ft::PrecisionMode::FP16 : ft::PrecisionMode::BF16;
  }

  void teardown() override {
    if (buffer_ && ctx_->comm->world_size() > 1 && ctx_->comm->rank() == 0) {
      const ft::OverlapStats& s = buffer_->overlap();
      if (s.syncs > 0) {
        const int buckets = buffer_->num_buckets();
        ctx_->events.emit("ddp.overlap",
                          nlohmann::json{{"hidden_fraction", s.hidden_fraction()}, {"waited_s", s.waited_s},
                                         {"in_flight_s", s.in_flight_s}, {"buckets", buckets}, {"syncs", s.syncs}},
                          fmt::format("ddp: comm hidden behind backward {:.0f}% (waited {:.3f} s of {:.3f} s in "
                                      "flight, {} bucket(s), {} sync(s))",
                                      100.0 * s.hidden_fraction(), s.waited_s, s.in_flight_s, buckets, s.syncs));
      }
    }
    buffer_.reset();
  }

 protected:
  void on_setup() override {
    // Validate before the first collective so every rank fails the same way.
    const DdpOptions options = DdpOptions::parse(ctx_->options);
    ft::Comm& comm = *ctx_->comm;
    broadcast_model_from_rank0();
    ft::GradBufferOptions bo;
    bo.bucket_bytes = options.bucket_bytes;
    bo.rebuild_with = &comm;  // lay buckets out in the order grads really arrive
    bo.trace = ctx_->trace;   // bucket all-reduces on the profiler's comm track
    ft::CommHook hook;
    switch (options.compression) {
      case Compression::None: hook = ft::allreduce_avg_hook(comm); break;
      case Compression::FP16: hook = ft::compressed_allreduce_hook(comm, at::kHalf); break;
      case Compression::BF16: hook = ft::compressed_allreduce_hook(comm, at::kBFloat16); break;
    }
    if (options.sparse_embedding) {
      const auto named = model_->named_parameters();
      if (const at::Tensor* table = named.find(model_->config().family().word_embeddings())) {
        for (size_t i = 0; i < trainable().size(); ++i) {
          if (trainable()[i].is_same(*table)) bo.row_sparse.push_back(static_cast<int>(i));
        }
      }
      if (!bo.row_sparse.empty()) hook = ft::row_sparse_allreduce_hook(comm, std::move(hook));
    }
    buffer_ = std::make_unique<ft::GradBuffer>(trainable(), bo, std::move(hook));
  }

  void run_backward(const at::Tensor& scaled_loss, bool sync_grads) override {
    buffer_->start_backward(sync_grads);
    scaled_loss.backward();
  }

  void finish_grad_sync() override { buffer_->finish_sync(); }

 private:
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
