// Moving and slicing a micro-batch's model inputs: one place that knows
// every field the model reads, so a strategy cannot forget one.
#include <ATen/ATen.h>

#include "ft/base/types.h"

namespace ft {

Batch model_inputs_on(const Batch& batch, c10::Device device) {
  if (device == c10::Device(c10::kCPU)) return batch;
  Batch b;
  auto move = [&](const at::Tensor& t) { return t.defined() ? t.to(device, /*non_blocking=*/true) : t; };
  b.input_ids = move(batch.input_ids);
  b.attention_mask = move(batch.attention_mask);
  b.token_type_ids = move(batch.token_type_ids);
  b.positions = move(batch.positions);
  b.features = move(batch.features);
  // Labels stay with the caller: the Trainer moves them next to the logits.
  b.labels = batch.labels;
  return b;
}

Batch slice_rows(const Batch& batch, int64_t offset, int64_t count) {
  Batch b;
  if (batch.features.defined()) {
    b.features = batch.features.narrow(0, offset, count);
    return b;
  }
  b.input_ids = batch.input_ids.narrow(0, offset, count);
  b.attention_mask = batch.attention_mask.narrow(0, offset, count);
  b.token_type_ids = batch.token_type_ids.narrow(0, offset, count);
  if (batch.positions.defined()) {
    // Positions are ascending, so a block of rows is a block of positions.
    const int64_t seq = batch.input_ids.size(1);
    const auto begin = at::searchsorted(batch.positions, offset * seq).item<int64_t>();
    const auto end = at::searchsorted(batch.positions, (offset + count) * seq).item<int64_t>();
    b.positions = batch.positions.narrow(0, begin, end - begin) - offset * seq;
  }
  return b;
}

}  // namespace ft
