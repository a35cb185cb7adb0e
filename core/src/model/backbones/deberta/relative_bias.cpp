#include "model/backbones/deberta/relative_bias.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "model/sgemm.h"

namespace ft::model_detail {
namespace {

// Queries (c2p) or keys (p2c) per block. Where R steps by one row per
// distance (DeBERTa-v3's 256 buckets up to distance 128, and slower beyond),
// a block of 32 reads at most width + 31 rows: at 256 tokens 1.12x the
// products the scores need, where the gather formulation computes all 512.
constexpr int64_t kBlock = 32;

// A [rows, heads, width, d] operand or gradient, read or written in place.
template <typename T>
struct Tokens {
  T* data;
  int64_t row, head, token;  // strides
  explicit Tokens(const at::Tensor& t)
      : data(t.data_ptr<float>()), row(t.stride(0)), head(t.stride(1)), token(t.stride(2)) {}
  T* at(int64_t b, int64_t h, int64_t i) const { return data + b * row + h * head + i * token; }
};

// A [heads, 2 span, d] table or its gradient.
template <typename T>
struct Table {
  T* data;
  int64_t head, row;
  explicit Table(const at::Tensor& t) : data(t.data_ptr<float>()), head(t.stride(0)), row(t.stride(1)) {}
  T* at(int64_t h, int64_t r) const { return data + h * head + r * row; }
};

// Positions [lo, hi) of one block and the table rows [t0, t0 + nt) it reads.
struct Block {
  int64_t lo, hi, t0, nt;
};

struct Geometry {
  int64_t rows, heads, width, d, table_rows;
  const int64_t* by_distance;  // [2 width - 1]: R(i - j) at i - j + width - 1
  bool c2p, p2c;

  // row_of(i)[-j] = R(i - j).
  const int64_t* row_of(int64_t i) const { return by_distance + i + width - 1; }
  // Queries [lo, hi) meet distances lo - (width - 1) ... hi - 1.
  Block queries(int64_t lo, int64_t hi) const {
    const int64_t t0 = by_distance[lo];
    return {lo, hi, t0, by_distance[hi + width - 2] + 1 - t0};
  }
  // Keys [lo, hi) meet distances -(hi - 1) ... width - 1 - lo.
  Block keys(int64_t lo, int64_t hi) const {
    const int64_t t0 = by_distance[width - hi];
    return {lo, hi, t0, by_distance[2 * width - 2 - lo] + 1 - t0};
  }
};

struct Inputs {
  Tokens<const float> q, k;
  Table<const float> pos_query, pos_key;
};

// One (row, head) plane of the bias, [width, width] at `out`.
void forward_plane(const Geometry& g, const Inputs& in, int64_t b, int64_t h, float* out, std::vector<float>& buf) {
  const int64_t w = g.width;
  if (g.c2p) {
    for (int64_t lo = 0; lo < w; lo += kBlock) {
      const Block blk = g.queries(lo, std::min(w, lo + kBlock));
      // buf[i - lo][t - t0] = q_i . pos_key_t
      sgemm_rows(false, true, blk.hi - blk.lo, blk.nt, g.d, 1.0f, in.q.at(b, h, blk.lo), in.q.token,
                 in.pos_key.at(h, blk.t0), in.pos_key.row, 0.0f, buf.data(), blk.nt);
      for (int64_t i = blk.lo; i < blk.hi; ++i) {
        const float* a = buf.data() + (i - blk.lo) * blk.nt;
        const int64_t* r = g.row_of(i);
        float* o = out + i * w;
        for (int64_t j = 0; j < w; ++j) o[j] = a[r[-j] - blk.t0];
      }
    }
  }
  if (g.p2c) {
    for (int64_t lo = 0; lo < w; lo += kBlock) {
      const Block blk = g.keys(lo, std::min(w, lo + kBlock));
      // buf[j - lo][t - t0] = k_j . pos_query_t
      sgemm_rows(false, true, blk.hi - blk.lo, blk.nt, g.d, 1.0f, in.k.at(b, h, blk.lo), in.k.token,
                 in.pos_query.at(h, blk.t0), in.pos_query.row, 0.0f, buf.data(), blk.nt);
      // Entry (i, j) sits at row j - lo, column R(i - j) - t0.
      const float* a = buf.data();
      const int64_t lo_t0 = blk.lo * blk.nt + blk.t0;
      for (int64_t i = 0; i < w; ++i) {
        const int64_t* r = g.row_of(i);
        float* o = out + i * w;
        if (g.c2p) {
          for (int64_t j = blk.lo; j < blk.hi; ++j) o[j] += a[j * blk.nt + r[-j] - lo_t0];
        } else {
          for (int64_t j = blk.lo; j < blk.hi; ++j) o[j] = a[j * blk.nt + r[-j] - lo_t0];
        }
      }
    }
  }
}

struct Grads {
  Tokens<float> q, k;
  Table<float> pos_query, pos_key;
};

// Every row of head h: dq, dk, and head h of the tables' gradients, which
// only this call writes (so the sums run in one order whatever the threads).
void backward_head(const Geometry& g, const Inputs& in, const Grads& out, const float* grad, int64_t h,
                   std::vector<float>& buf) {
  const int64_t w = g.width;
  for (int64_t b = 0; b < g.rows; ++b) {
    const float* plane = grad + (b * g.heads + h) * w * w;
    if (g.c2p) {
      for (int64_t lo = 0; lo < w; lo += kBlock) {
        const Block blk = g.queries(lo, std::min(w, lo + kBlock));
        std::fill(buf.begin(), buf.begin() + (blk.hi - blk.lo) * blk.nt, 0.0f);
        for (int64_t i = blk.lo; i < blk.hi; ++i) {
          float* a = buf.data() + (i - blk.lo) * blk.nt;
          const int64_t* r = g.row_of(i);
          const float* gi = plane + i * w;
          for (int64_t j = 0; j < w; ++j) a[r[-j] - blk.t0] += gi[j];
        }
        const int64_t m = blk.hi - blk.lo;
        sgemm_rows(false, false, m, g.d, blk.nt, 1.0f, buf.data(), blk.nt, in.pos_key.at(h, blk.t0), in.pos_key.row,
                   0.0f, out.q.at(b, h, blk.lo), out.q.token);
        sgemm_rows(true, false, blk.nt, g.d, m, 1.0f, buf.data(), blk.nt, in.q.at(b, h, blk.lo), in.q.token, 1.0f,
                   out.pos_key.at(h, blk.t0), out.pos_key.row);
      }
    }
    if (g.p2c) {
      for (int64_t lo = 0; lo < w; lo += kBlock) {
        const Block blk = g.keys(lo, std::min(w, lo + kBlock));
        std::fill(buf.begin(), buf.begin() + (blk.hi - blk.lo) * blk.nt, 0.0f);
        float* a = buf.data();
        const int64_t lo_t0 = blk.lo * blk.nt + blk.t0;
        for (int64_t i = 0; i < w; ++i) {
          const int64_t* r = g.row_of(i);
          const float* gi = plane + i * w;
          for (int64_t j = blk.lo; j < blk.hi; ++j) a[j * blk.nt + r[-j] - lo_t0] += gi[j];
        }
        const int64_t m = blk.hi - blk.lo;
        sgemm_rows(false, false, m, g.d, blk.nt, 1.0f, buf.data(), blk.nt, in.pos_query.at(h, blk.t0),
                   in.pos_query.row, 0.0f, out.k.at(b, h, blk.lo), out.k.token);
        sgemm_rows(true, false, blk.nt, g.d, m, 1.0f, buf.data(), blk.nt, in.k.at(b, h, blk.lo), in.k.token, 1.0f,
                   out.pos_query.at(h, blk.t0), out.pos_query.row);
      }
    }
  }
}

Geometry geometry(const at::Tensor& q, const at::Tensor& pos_key, const at::Tensor& by_distance, bool c2p, bool p2c) {
  return {q.size(0), q.size(1), q.size(2), q.size(3), pos_key.size(1), by_distance.data_ptr<int64_t>(), c2p, p2c};
}

// The largest block's buffer: kBlock positions by the rows they can read
// (with few buckets between span / 2 and max_relative, R can step by more
// than one row, up to the whole table).
std::vector<float> block_buffer(const Geometry& g) {
  return std::vector<float>(static_cast<size_t>(kBlock * g.table_rows));
}

struct BandedBias : torch::autograd::Function<BandedBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& pos_query, const at::Tensor& pos_key, const at::Tensor& by_distance,
                            bool c2p, bool p2c) {
    ctx->save_for_backward({q, k, pos_query, pos_key, by_distance});
    ctx->saved_data["c2p"] = c2p;
    ctx->saved_data["p2c"] = p2c;
    const Geometry g = geometry(q, pos_key, by_distance, c2p, p2c);
    const Inputs in{Tokens<const float>(q), Tokens<const float>(k), Table<const float>(pos_query),
                    Table<const float>(pos_key)};
    at::Tensor out = at::empty({g.rows, g.heads, g.width, g.width}, q.options());
    float* o = out.data_ptr<float>();
    at::parallel_for(0, g.rows * g.heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> buf = block_buffer(g);
      for (int64_t p = begin; p < end; ++p) {
        forward_plane(g, in, p / g.heads, p % g.heads, o + p * g.width * g.width, buf);
      }
    });
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &pos_query = saved[2], &pos_key = saved[3];
    const bool c2p = ctx->saved_data["c2p"].toBool(), p2c = ctx->saved_data["p2c"].toBool();
    const Geometry g = geometry(q, pos_key, saved[4], c2p, p2c);
    const Inputs in{Tokens<const float>(q), Tokens<const float>(k), Table<const float>(pos_query),
                    Table<const float>(pos_key)};
    const at::Tensor grad = grads[0].contiguous();
    // A term that is off leaves its operands' gradients at zero.
    at::Tensor dq = c2p ? at::empty_like(q) : at::zeros_like(q);
    at::Tensor dk = p2c ? at::empty_like(k) : at::zeros_like(k);
    at::Tensor dpq = at::zeros(pos_query.sizes(), pos_query.options());
    at::Tensor dpk = at::zeros(pos_key.sizes(), pos_key.options());
    const Grads out{Tokens<float>(dq), Tokens<float>(dk), Table<float>(dpq), Table<float>(dpk)};
    const float* gp = grad.data_ptr<float>();
    at::parallel_for(0, g.heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> buf = block_buffer(g);
      for (int64_t h = begin; h < end; ++h) backward_head(g, in, out, gp, h, buf);
    });
    return {dq, dk, dpq, dpk, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor banded_relative_bias(const at::Tensor& q, const at::Tensor& k, const at::Tensor& pos_query,
                                const at::Tensor& pos_key, const at::Tensor& rows_by_distance, bool c2p, bool p2c) {
  return BandedBias::apply(q, k, pos_query, pos_key, rows_by_distance, c2p, p2c);
}

}  // namespace ft::model_detail
