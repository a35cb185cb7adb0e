// Inference on many inputs at once, for `ft predict`: the inputs are
// sorted by token count and run as batches of rows of similar length (each
// padded only to its batch's longest, and the encoder packs the real tokens
// anyway), and every input gets its own slice of the output back, in input
// order. One row at a time leaves the GEMMs a few dozen rows tall; a batch
// of 32 reviews gives them thousands.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/model/model.h"
#include "ft/tokenizer/tokenizer.h"

namespace ft {

/// What each input's slice of the model's output is.
enum class InferenceOutput {
  kPerText,       ///< forward(): one row per input (logits, an embedding)
  kPerToken,      ///< forward() at every real token: [tokens, labels] per input
  kHiddenStates,  ///< last_hidden_state(): [tokens, hidden] per input
};

/// Runs `inputs` through `model` (eval mode, under NoGradGuard) in batches
/// of at most `batch_size` rows, longest first, and returns each input's
/// output in input order: contiguous float tensors on the CPU.
std::vector<at::Tensor> infer_batched(EncoderModel& model, const std::vector<Encoding>& inputs, int64_t pad_id,
                                      int64_t batch_size, InferenceOutput what);

}  // namespace ft
