// Where a batch's tokens live while the encoder runs.
//
// Padding-free execution: everything but the attention product is per token
// (embeddings, every Linear, LayerNorm, GELU, dropout, residuals), so the
// encoder keeps its hidden states as one [T, hidden] matrix of the batch's
// real tokens, T = sum of the rows' lengths. Only attention needs each
// sequence on its own: it scatters the packed tokens into [rows, width,
// hidden], width = the longest row's length, masks the empty slots as keys,
// and gathers the result back. Pad positions therefore cost nothing outside
// attention, and inside it only up to the batch's longest row. On CPU, when
// the mask has no holes among kept tokens (the usual right-padded batch),
// attention runs per sequence instead (sequence_lengths below), so padding
// costs nothing at all.
//
// The padded layout (padding_free off) is the same code with T = rows * seq
// and no scatter, which is what the Hugging Face model computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ft {

// Which attention kernel a layer runs (yaml model.attention; the model stamps
// it on every batch's layout):
//   kAuto:   packed per-sequence attention where it applies (CPU, no holes in
//            the mask, whole heads per rank), else LibTorch's SDPA where it
//            exists (2.0+) and ft's dropout is not needed (CUDA, or no
//            dropout), else eager;
//   kPacked: packed where it applies, each sequence's scores computed whole
//            (AttentionSchedule::kWhole), else eager (what 1.13 builds do);
//   kTiled:  packed where it applies, in tiles with an online softmax
//            (AttentionSchedule::kTiled: for long inputs), else eager;
//   kSdpa:   SDPA everywhere it can run (not where ranks share heads), with
//            LibTorch's own dropout;
//   kEager:  matmul, softmax, dropout, matmul: Hugging Face's "eager".
enum class AttentionKernel { kAuto, kPacked, kTiled, kSdpa, kEager };
// "auto", "packed", "tiled", "sdpa", "eager" (config validation has refused others).
AttentionKernel attention_kernel(const std::string& name);

struct TokenLayout {
  int64_t rows = 0;   // sequences in the batch
  int64_t seq = 0;    // columns of the batch tensors
  int64_t width = 0;  // attention width: seq (padded) or the longest row's kept tokens
  int64_t tokens = 0; // T: rows of the hidden-state matrix
  // [T] flat batch positions (row * seq + column) of the kept tokens; undefined
  // when every position is kept (then token t is position t).
  at::Tensor keep_index;
  // [T] flat attention-buffer positions (row * width + j) of the kept tokens;
  // undefined when the buffer is the token matrix itself (no scatter).
  at::Tensor slot;
  // [rows] index in the token matrix of each row's column 0 (the pooler's
  // [CLS]); undefined when it is row * seq.
  at::Tensor first;
  // [rows, 1, 1, width] additive key mask: 0 where a key is attended, the
  // lowest float where not (as Hugging Face's BERT).
  at::Tensor additive_mask;
  // Kept tokens per row, on the host. Set by packed() on CPU (also when
  // no row has padding and the layout is the padded one) when every kept
  // token is also attended, so each row's tokens are exactly one
  // sequence and attention can run per sequence with no mask at all
  // (ft/model/packed_attention.h); empty otherwise.
  std::vector<int64_t> sequence_lengths;
  AttentionKernel attention = AttentionKernel::kAuto;

  // attention_mask [rows, seq] (any 0/1 integer or bool tensor). Packed: the
  // kept tokens are the attended ones plus column 0 of every row (the pooler
  // reads it whatever the mask says); they may sit anywhere in a row.
  static TokenLayout packed(const at::Tensor& attention_mask);
  static TokenLayout padded(const at::Tensor& attention_mask);

  bool is_packed() const { return keep_index.defined(); }
  // [rows, seq] batch tensor -> [T] values of the kept tokens.
  at::Tensor gather_tokens(const at::Tensor& per_position) const;
  // Column of each kept token (its position id), [T].
  at::Tensor positions(const c10::TensorOptions& options) const;
  // [T, f] -> [rows, width, f] with zeros in the empty slots.
  at::Tensor to_attention(const at::Tensor& tokens_by_features) const;
  // [rows * width, f] -> [T, f].
  at::Tensor from_attention(const at::Tensor& slots_by_features) const;
  // [M] flat batch positions (row * seq + column) of kept tokens -> their
  // rows in the token matrix, [M] (the masked-LM head reads these).
  at::Tensor token_index(const at::Tensor& flat_positions) const;
  // [T, f] -> [rows, f]: each row's column-0 token.
  at::Tensor first_tokens(const at::Tensor& tokens_by_features) const;
  // The layout of first_tokens()'s output, one token per row, for a head
  // that reads only those: its tokens and first_tokens() are the rows as
  // they are. Nothing else of it describes the batch.
  TokenLayout first_tokens_only() const;
};

}  // namespace ft
