// `horovod`: the Horovod row. A full replica per rank (ReplicatedStrategy)
// whose gradients are averaged by Horovod's machinery rebuilt on ft::Comm:
// a ring all-reduce over point-to-point send/recv, a background thread with
// tensor fusion, cycle time and negotiation (fusion.h), optional fp16 on the
// wire, and DistributedOptimizer semantics — by default every gradient is
// reduced when step() is called (synchronize()); with overlap it is queued
// from its autograd hook as soon as backward produced it.
//
// Gradients live in a GradBuffer with one "bucket" per parameter: a bucket
// here is one Horovod tensor, and fusion happens in TensorFusion. Because
// the buffer is laid out in the order gradients become ready, the tensors a
// cycle fuses are adjacent and are reduced in place (no fusion-buffer copy).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/parallel/abilities.h"
#include "ft/comm/comm.h"
#include "ft/parallel/grad_buffer.h"
#include "ft/model/model.h"
#include "ft/plugin/plugin.h"
#include "ft/parallel/replicated_strategy.h"
#include "fusion.h"
#include "horovod_options.h"

namespace {

using ft::horovod::FusionOptions;
using ft::horovod::HorovodOptions;
using ft::horovod::TensorFusion;

class HorovodStrategy final : public ft::ReplicatedStrategy, public ft::MemoryModel {
 public:
  // A full replica per rank; the fusion buffer is reduced in place in the
  // GradBuffer, so it adds nothing.
  std::string memory_formula(const std::map<std::string, std::string>&) const override { return "16Ψ"; }
  int64_t theory_bytes(const ft::TheoryInputs& in) const override { return 16 * in.model.params; }

  void teardown() override {
    if (fusion_ && ctx_->comm->world_size() > 1 && ctx_->comm->rank() == 0) {
      const ft::horovod::FusionStats s = fusion_->stats();
      if (s.collectives > 0) {
        constexpr double kMiB = 1024.0 * 1024.0;
        ctx_->events.emit("horovod.fusion",
                          nlohmann::json{{"tensors", s.tensors}, {"rings", s.collectives}, {"cycles", s.cycles},
                                         {"wire_bytes", s.wire_bytes}, {"fusion_bytes", s.copied_bytes}},
                          fmt::format("horovod: {} tensor(s) in {} ring(s) over {} cycle(s), {:.1f} MiB sent by rank "
                                      "0, {:.1f} MiB through the fusion buffer",
                                      s.tensors, s.collectives, s.cycles, static_cast<double>(s.wire_bytes) / kMiB,
                                      static_cast<double>(s.copied_bytes) / kMiB));
      }
    }
    buffer_.reset();  // holds hooks that point at fusion_
    fusion_.reset();
  }

 protected:
  void on_setup() override {
    // Validate before the first collective so every rank fails the same way.
    options_ = HorovodOptions::parse(ctx_->options);
    ft::Comm& comm = *ctx_->comm;
    broadcast_model_from_rank0();
    FusionOptions fo;
    fo.threshold_bytes = static_cast<int64_t>(options_.fusion_mb * 1024.0 * 1024.0);
    fo.cycle = std::chrono::microseconds(static_cast<int64_t>(options_.cycle_ms * 1000.0));
    fo.ring.op = ft::ReduceOp::Avg;
    fo.ring.wire = options_.fp16_compression ? at::kHalf : at::kFloat;
    fo.trace = ctx_->trace;
    fusion_ = std::make_unique<TensorFusion>(comm, fo);
    TensorFusion* fusion = fusion_.get();
    ft::CommHook hook = [fusion](ft::GradBucket& bucket) {
      std::shared_future<void> done = fusion->enqueue(bucket.data);
      return ft::BucketComm{ft::Work{}, [done] { done.get(); }};
    };
    ft::GradBufferOptions bo;
    bo.bucket_bytes = 1;  // one bucket per parameter = one Horovod tensor
    buffer_ = std::make_unique<ft::GradBuffer>(trainable(), bo, std::move(hook));
  }

  void run_backward(const at::Tensor& scaled_loss, bool sync_grads) override {
    const bool now = options_.overlap && sync_grads;
    if (now) fusion_->expect(buffer_->num_buckets());
    buffer_->start_backward(now);
    scaled_loss.backward();
  }

  void finish_grad_sync() override {
    if (!options_.overlap) fusion_->expect(buffer_->num_buckets());
    buffer_->finish_sync();
  }

 private:
  HorovodOptions options_;
  std::unique_ptr<TensorFusion> fusion_;
  // Owns the grads (each `.grad` is a view of it) and the per-parameter
  // hooks; built in on_setup, released in teardown before fusion_.
  std::unique_ptr<ft::GradBuffer> buffer_;
};

}  // namespace

FT_STRATEGY_PLUGIN("horovod", "1.0.0",
                   FT_STRATEGY("horovod",
                               "Horovod: ring all-reduce, tensor fusion, fp16 compression, DistributedOptimizer",
                               [] { return new HorovodStrategy(); }))
