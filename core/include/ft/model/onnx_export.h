// A fine-tuned model as one ONNX file (`ft export --onnx`), for ONNX
// Runtime and the other ONNX consumers.
//
// The graph is built from the model's HF-named weights and its config, the
// way optimum's exports of transformers' models look from outside: inputs
// input_ids, attention_mask (and token_type_ids where the family reads
// them), int64 [batch_size, sequence_length], both axes dynamic; padded
// batches, each row's padding masked out of the attention as transformers
// does it. The output is the head's: `logits` (sequence classification
// [batch_size, num_labels] in every problem type; token classification and
// masked LM [batch_size, sequence_length, labels or vocab]), a sentence
// embedding model's `sentence_embedding` [batch_size, dimension], or a base
// model's `last_hidden_state`. Linear weights are stored transposed ([in,
// out], MatMul's layout); the tied masked-LM decoder reads the word table
// through a Transpose, not a second copy. Written with the ONNX project's
// own protobuf code, opset 17 (LayerNormalization). --fp16 halves the file
// and computes in half precision, for GPU serving.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/model/model.h"

namespace ft {

struct OnnxExportOptions {
  // The encoder's last_hidden_state instead of the head's output (a base
  // model directory, or `--task feature-extraction`).
  bool hidden_states = false;
  // Weights and activations in float16 (LayerNormalization's statistics and
  // the rotary angles in float32, as transformers computes them; masked
  // scores -1e4); inputs and the output keep their types.
  bool fp16 = false;
  std::string producer_version;  // the model's producer_version field
};

struct OnnxExportSummary {
  std::vector<std::string> inputs, outputs;
  int64_t nodes = 0, initializers = 0, bytes = 0;
};

// Writes `model`'s graph to `out` (atomically). Families and heads the
// exporter cannot express are refused with one line naming them, before
// anything is written.
OnnxExportSummary write_onnx(EncoderModel& model, const std::filesystem::path& out, const OnnxExportOptions& options);

}  // namespace ft
