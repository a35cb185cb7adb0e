// What a pipeline stage holds and moves, as its MemoryModel.
#include <algorithm>

#include "ft/model/model.h"
#include "pipeline_strategy.h"

namespace ft {

std::string PipelineStrategy::memory_formula(const std::map<std::string, std::string>&) const { return "16Ψ/N"; }

int64_t PipelineStrategy::theory_bytes(const TheoryInputs& in) const {
  // Stages of equal size, the ideal split (ft bench lists every stage's).
  const PipelineOptions o = pipeline_options_from(in.options, std::max(1, in.world_size));
  return 16 * in.model.params / std::max(1, o.stages);
}

std::optional<CandidateEstimate> PipelineStrategy::estimate(const PlanInputs& in, const EncoderModel& model) const {
  // N stages over all N ranks, N micro-batches of batch_rows: the
  // data-parallel candidates' global batch.
  const int n = std::max(1, in.world_size);
  if (n < 2 || n > model.num_units()) return std::nullopt;
  CandidateEstimate e = begin_estimate("pipeline", "16Ψ/N", in);
  // A stage holds no less than its biggest unit; under 1F1B the first stage
  // keeps N micro-batches of its L/N layers in flight, one micro-batch's
  // worth of the whole model (begin_estimate's activations).
  e.state_bytes = std::max(16 * in.model.params / n, 16 * in.model.largest_unit_params);
  e.extra_bytes = in.mixed_precision ? e.state_bytes / 8 : 0;
  // Each stage computes N micro-batches of 1/N of the model, idle for a
  // bubble of (p-1)/(m+p-1) with p = m = N.
  e.compute_s *= static_cast<double>(2 * n - 1) / n;
  // Per micro-batch, an activation forward and its gradient backward cross
  // each stage boundary, fp32 on the wire.
  const int64_t activation = 4 * in.batch_rows * in.seq_len * in.model.hidden;
  e.collectives = 2LL * n;
  e.comm_bytes = e.collectives * activation;
  e.comm_s = static_cast<double>(e.collectives) *
             (in.link.alpha_s + static_cast<double>(activation) * in.link.beta_s_per_byte);
  finish_estimate(e, in);
  return e;
}

}  // namespace ft
