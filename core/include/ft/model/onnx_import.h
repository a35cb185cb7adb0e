// A BERT encoder exported to ONNX, read back as Hugging Face weights and a
// config.json (`ft import onnx`).
//
// Exports by torch.onnx (optimum, transformers.js, langchain4j) keep HF's
// names on the tensors a graph reads directly (embeddings, biases, LayerNorm
// parameters) but hand every Linear weight to a MatMul under an anonymous
// name (onnx::MatMul_541), transposed to [in, out]. Each is named here by
// the HF-named bias its MatMul output is added to; the config is inferred
// from the shapes and the graph (the heads from the query's reshape, the
// activation and LayerNorm epsilon from their ops). Graphs that cannot be
// mapped one-to-one onto transformers' BertModel are refused, one line each:
// quantised weights, ONNX Runtime's fused kernels, an activation other than
// erf GELU, weights outside the encoder.
#pragma once

#include <string>
#include <vector>

#include "ft/model/model.h"
#include "ft/base/types.h"

namespace ft {

struct OnnxEncoder {
  BertConfig config;      // model_type bert, architectures BertModel
  TensorList weights;     // HF names and layout, BertModel's order, fp32
  std::vector<std::string> notes;  // what the import decided (fp16 widened, no pooler, ...)
};

// Reads `path` (an .onnx file; external data beside it is read too).
// Errors (ft::Error) name the file and what to do.
OnnxEncoder read_onnx_encoder(const std::string& path);

}  // namespace ft
