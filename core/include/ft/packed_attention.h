// Attention of each sequence on its own, straight on packed tokens (CPU).
//
// q, k, v are [T, heads * d] with the batch's sequences stacked row after row
// (TokenLayout's packed order; every row a sequence keeps is attended).
// Sequence b's scores are [heads, len_b, len_b]: no padding at all, so the
// attention FLOPs are sum(len_b^2) instead of rows * width^2 (0.45x on the
// mini bench rows, 0.16x on the seeds' Weibo rows). One autograd node runs
// every sequence: softmax probabilities (fp32) are the only saved
// activation besides q, k, v, and the dropout mask on them is recomputed
// from its seed in backward (ft/dropout.h). Sequences are spread over the
// intra-op threads longest-first, each thread running its share serially.
//
// Numerics follow Hugging Face's eager BERT: scores in the inputs' dtype,
// scaled by 1/sqrt(d), softmax in fp32, probabilities cast back to v's dtype
// for the product with v (what autocast does there).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ft {

at::Tensor packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& lengths, int64_t heads, double dropout_p, bool train);

}  // namespace ft
