// DeBERTa's c2p and p2c terms by blocks of the table (the CPU kernel of
// RelativeAttention::bias where each token's position is its column).
//
// The gather formulation (Hugging Face's, and relative_attention.h's
// general path) multiplies every query by all 2 span rows of the table and
// keeps `width` of them per query: half the product is thrown away at 256
// tokens, more at shorter widths, and the [rows, heads, width, 2 span]
// products are twice the size of the scores. When position is column, pair
// (i, j) reads row R(i - j), and R never decreases with the distance, so a
// block of queries [i0, i1) reads only the rows between R(i0 - width + 1)
// and R(i1 - 1): at most width + block - 1 of them. Each block multiplies
// against those rows alone and picks its entries from a block-sized buffer;
// p2c is the same by blocks of keys. Backward adds each score's gradient
// into the same buffers and runs the two products back.
#pragma once

#include <ATen/core/Tensor.h>

namespace ft::model_detail {

// q, k [rows, heads, width, d] and pos_query, pos_key [heads, 2 span, d],
// float32 on the CPU, last dimension dense; rows_by_distance [2 width - 1]
// int64: the table row of distance i - j, from -(width - 1). Returns the
// unscaled c2p + p2c terms, [rows, heads, width, width], differentiable in
// all four float inputs.
at::Tensor banded_relative_bias(const at::Tensor& q, const at::Tensor& k, const at::Tensor& pos_query,
                                const at::Tensor& pos_key, const at::Tensor& rows_by_distance, bool c2p, bool p2c);

}  // namespace ft::model_detail
