// What a tensor-parallel rank holds and moves, as its MemoryModel.
#include <algorithm>

#include "tensor_strategy.h"

namespace ft {

std::string TensorStrategy::memory_formula(const std::map<std::string, std::string>&) const { return "16Ψr+16Ψs/N"; }

int64_t TensorStrategy::theory_bytes(const TheoryInputs& in) const {
  const int64_t p = in.model.params, sliced = std::min(p, in.model.sliceable_params);
  if (sliced <= 0) return -1;  // the shape does not say what is cut
  const int t = tensor_parallel_size_from(in.options, std::max(1, in.world_size));
  return 16 * (p - sliced) + 16 * sliced / std::max(1, t);
}

std::optional<CandidateEstimate> TensorStrategy::estimate(const PlanInputs& in, const EncoderModel& model) const {
  // One group of all N ranks reading N x batch_rows rows per micro-batch.
  const int n = std::max(1, in.world_size);
  if (n < 2 || !tensor_parallel_refusal(model.config(), n).empty()) return std::nullopt;
  CandidateEstimate e = begin_estimate("tensor", "16Ψr+16Ψs/N", in);
  const int64_t psi = in.model.params, rows = in.batch_rows * n, sliced = std::min(psi, in.model.sliceable_params);
  e.state_bytes = sliced > 0 ? 16 * (psi - sliced) + 16 * sliced / n : 16 * psi;
  e.extra_bytes = in.mixed_precision ? e.state_bytes / 8 : 0;
  e.activation_bytes = activation_bytes(in, rows, n);
  e.compute_s = step_flops(in, rows) / n / std::max(1.0, in.flops_per_s);
  // Per layer two all-reduces forward (attention and FFN outputs) and two
  // backward (their inputs' gradients), plus the vocab-parallel embeddings';
  // each of one fp32 activation.
  const int64_t activation = 4 * rows * in.seq_len * in.model.hidden;
  e.collectives = 4 * in.model.layers + 1;
  e.comm_bytes = static_cast<int64_t>(static_cast<double>(e.collectives) * 2.0 * (n - 1) / n * activation);
  e.comm_s = static_cast<double>(e.collectives) * ring_allreduce_seconds(in.link, n, activation);
  finish_estimate(e, in);
  return e;
}

}  // namespace ft
