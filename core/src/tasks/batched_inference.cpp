#include "ft/tasks/batched_inference.h"

#include <algorithm>
#include <numeric>

#include <ATen/ATen.h>

#include "ft/data/data.h"
#include "ft/base/error.h"

namespace ft {

std::vector<at::Tensor> infer_batched(EncoderModel& model, const std::vector<Encoding>& inputs, int64_t pad_id,
                                      int64_t batch_size, InferenceOutput what) {
  if (batch_size < 1) fail("batch size is {}; it must be at least 1", batch_size);
  std::vector<int64_t> length(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& mask = inputs[i].attention_mask;
    length[i] = std::count(mask.begin(), mask.end(), int64_t{1});
  }
  // Longest first: the first batch is the largest, so a memory limit shows at once.
  std::vector<size_t> order(inputs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return inputs[a].input_ids.size() > inputs[b].input_ids.size();
  });
  std::vector<at::Tensor> out(inputs.size());
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(batch_size));
    std::vector<const Encoding*> rows;
    for (size_t k = start; k < end; ++k) rows.push_back(&inputs[order[k]]);
    const auto width = static_cast<int64_t>(rows.front()->input_ids.size());
    Batch b = pad_encodings(rows, pad_id, width);
    if (what == InferenceOutput::kHiddenStates) {
      const at::Tensor h = model.last_hidden_state(b).to(at::kFloat);
      for (size_t k = start; k < end; ++k) {
        const size_t i = order[k];
        out[i] = h[static_cast<int64_t>(k - start)].narrow(0, 0, static_cast<int64_t>(inputs[i].input_ids.size())).contiguous();
      }
      continue;
    }
    if (what == InferenceOutput::kPerText) {
      const at::Tensor y = model.forward(b).to(at::kFloat);
      for (size_t k = start; k < end; ++k) out[order[k]] = y[static_cast<int64_t>(k - start)].contiguous();
      continue;
    }
    // Every real token of every row, in flat row-major order: the head scores these only.
    std::vector<int64_t> positions;
    for (size_t k = start; k < end; ++k) {
      const auto& mask = inputs[order[k]].attention_mask;
      const int64_t base = static_cast<int64_t>(k - start) * width;
      for (size_t t = 0; t < mask.size(); ++t)
        if (mask[t] == 1) positions.push_back(base + static_cast<int64_t>(t));
    }
    b.positions = at::tensor(positions, at::kLong);
    const at::Tensor y = model.forward(b).to(at::kFloat);
    int64_t offset = 0;
    for (size_t k = start; k < end; ++k) {
      const int64_t n = length[order[k]];
      out[order[k]] = y.narrow(0, offset, n).contiguous();
      offset += n;
    }
  }
  return out;
}

}  // namespace ft
