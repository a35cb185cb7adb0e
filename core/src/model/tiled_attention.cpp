// The tiled schedule of packed attention: flash-attention's order of work on
// CPU threads. Each (sequence, head) walks its queries in blocks of kRows;
// a block meets the keys it can reach (all of them, or its band under a
// window) in tiles of kCols, keeping a running maximum and sum per query
// (the online softmax), so no more than one tile of scores exists at a time.
// What backward needs is the output and each query's log-sum-exp: it
// computes every tile's probabilities again from them.
//
// Memory per layer is O(T * width) whatever the length, against
// O(heads * len^2) for the whole schedule, and the tile stays in cache where a
// whole row of scores at 8 192 keys would not. The price is one more product
// per tile in backward (S = Q K^T again).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ft/model/dropout.h"
#include "model/attention_plan.h"
#include "model/vec_math.h"
#include "simd_clones.h"

namespace ft::attention_detail {
namespace {

// Queries per block and keys per tile. A local layer's block of 64 meets a
// band of 64 + 2 x window keys: one tile for ModernBERT's window of 64.
// Global layers ran no faster with 128 x 256, 128 x 512 or 256 x 512
// (MiniLM at 512 tokens).
constexpr int64_t kRows = 64, kCols = 256;

using vec_math::exp8;
using vec_math::Floats8;

}  // namespace

// max of x[0, n), with independent lanes so that it vectorises.
FT_SIMD_CLONES float row_max(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (float& l : lane) l = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = lane[j] > x[i + j] ? lane[j] : x[i + j];
  float m = -std::numeric_limits<float>::infinity();
  for (float l : lane) m = m > l ? m : l;
  for (; i < n; ++i) m = m > x[i] ? m : x[i];
  return m;
}

// dS = P * (dP - D) over one row, in place in dp.
FT_SIMD_CLONES void softmax_grad_row(const float* p, float* dp, int64_t n, float dot) {
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - dot);
}

FT_SIMD_CLONES void scale_row(float* x, int64_t n, float s) {
  for (int64_t j = 0; j < n; ++j) x[j] *= s;
}

// Independent lanes again: a single running sum waits on every add's
// latency (the whole schedule's backward takes one per row of scores).
FT_SIMD_CLONES float row_dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += a[i + j] * b[i + j];
  float total = 0.0f;
  for (; i < n; ++i) total += a[i] * b[i];
  for (float l : lane) total += l;
  return total;
}

// x[i] = exp(x[i] - shift) in place; returns their sum.
FT_SIMD_CLONES float exp_sum(float* x, int64_t n, float shift) {
  Floats8 sum = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Floats8 v;
    std::memcpy(&v, x + i, sizeof v);
    v = exp8(v - shift);
    std::memcpy(x + i, &v, sizeof v);
    sum += v;
  }
  if (i < n) {  // the tail, in lanes whose extra inputs give ~0 and are not stored
    const auto tail = static_cast<size_t>(n - i);
    Floats8 v = Floats8{} + shift - 100.0f;
    std::memcpy(&v, x + i, tail * sizeof(float));
    v = exp8(v - shift);
    std::memcpy(x + i, &v, tail * sizeof(float));
    for (size_t j = 0; j < tail; ++j) sum[j] += v[j];
  }
  float total = 0.0f;
  for (int j = 0; j < 8; ++j) total += sum[j];
  return total;
}

namespace {

// One (sequence, head): where its operands, log-sum-exps and dropout
// counters start.
struct Task {
  int64_t len, row, lse, counter;  // queries; first element of q/out/k/v; lse start; dropout counter of (0, 0)
  Task(const KernelArgs& a, size_t t) {
    const auto b = t / static_cast<size_t>(a.plan.heads);
    const auto h = static_cast<int64_t>(t % static_cast<size_t>(a.plan.heads));
    len = a.plan.lengths[b];
    row = a.plan.offsets[b] * a.width + h * a.d;
    lse = a.plan.offsets[b] * a.plan.heads + h * len;
    counter = a.plan.prob_offsets[b] + h * len * len;
  }
};

// Scores of queries [r0, r0 + rows) against keys [c0, c0 + cols) into s
// (row stride cols); then each row's reach [lo, hi) relative to c0, the
// scores outside it zeroed (they take no part in the softmax).
struct TileRows {
  int64_t lo, hi;
};
void tile_scores(const KernelArgs& a, const Task& t, const float* q, const float* k, int64_t r0, int64_t rows,
                 int64_t c0, int64_t cols, float* s, std::vector<TileRows>& reach) {
  sgemm_rows(false, true, rows, cols, a.d, a.scale, q + t.row + r0 * a.width, a.width, k + t.row + c0 * a.width,
             a.width, 0.0f, s, cols);
  reach.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t lo = std::clamp(a.plan.reach_lo(r0 + i) - c0, int64_t{0}, cols);
    const int64_t hi = std::clamp(a.plan.reach_hi(r0 + i, t.len) - c0, lo, cols);
    reach[static_cast<size_t>(i)] = {lo, hi};
    float* x = s + i * cols;
    std::fill(x, x + lo, 0.0f);
    std::fill(x + hi, x + cols, 0.0f);
  }
}

// Keys [lo, hi) a block of queries [r0, r0 + rows) reaches at all.
std::pair<int64_t, int64_t> block_reach(const Plan& plan, int64_t r0, int64_t rows, int64_t len) {
  return {plan.reach_lo(r0), plan.reach_hi(r0 + rows - 1, len)};
}

void forward_task(const KernelArgs& a, const Task& t, const float* q, const float* k, const float* v, float* out,
                  float* lse, Scratch& scratch) {
  scratch.a.resize(static_cast<size_t>(kRows * kCols));
  scratch.b.resize(static_cast<size_t>(2 * kRows));
  float* s = scratch.a.data();
  float* m = scratch.b.data();  // running maximum per query
  float* l = m + kRows;         // running sum per query
  std::vector<TileRows> reach;
  for (int64_t r0 = 0; r0 < t.len; r0 += kRows) {
    const int64_t rows = std::min(kRows, t.len - r0);
    float* o = out + t.row + r0 * a.width;
    for (int64_t i = 0; i < rows; ++i) {
      m[i] = -std::numeric_limits<float>::infinity();
      l[i] = 0.0f;
      std::fill(o + i * a.width, o + i * a.width + a.d, 0.0f);
    }
    const auto [key_lo, key_hi] = block_reach(a.plan, r0, rows, t.len);
    for (int64_t c0 = key_lo; c0 < key_hi; c0 += kCols) {
      const int64_t cols = std::min(kCols, key_hi - c0);
      tile_scores(a, t, q, k, r0, rows, c0, cols, s, reach);
      for (int64_t i = 0; i < rows; ++i) {
        const auto [lo, hi] = reach[static_cast<size_t>(i)];
        if (hi <= lo) continue;  // the row is all zeros: nothing added
        float* x = s + i * cols;
        const float top = std::max(m[i], row_max(x + lo, hi - lo));
        const float shrink = std::exp(m[i] - top);  // 0 on the row's first tile (m = -inf)
        l[i] = l[i] * shrink + exp_sum(x + lo, hi - lo, top);
        m[i] = top;
        if (shrink != 1.0f)
          for (int64_t j = 0; j < a.d; ++j) o[i * a.width + j] *= shrink;
        if (a.keep < 1.0)
          apply_dropout_mask(x, x, cols, a.seed, t.counter + (r0 + i) * t.len + c0, a.keep);
      }
      sgemm_rows(false, false, rows, a.d, cols, 1.0f, s, cols, v + t.row + c0 * a.width, a.width, 1.0f, o,
                 a.width);  // O += P' V
    }
    for (int64_t i = 0; i < rows; ++i) {
      const float inv = 1.0f / l[i];
      for (int64_t j = 0; j < a.d; ++j) o[i * a.width + j] *= inv;
      lse[t.lse + r0 + i] = m[i] + std::log(l[i]);
    }
  }
}

void backward_task(const KernelArgs& a, const Task& t, const float* q, const float* k, const float* v,
                   const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                   Scratch& scratch) {
  scratch.a.resize(static_cast<size_t>(kRows * kCols));
  scratch.b.resize(static_cast<size_t>(kRows * kCols));
  scratch.c.resize(static_cast<size_t>(kRows));
  float* p = scratch.a.data();   // probabilities of the tile
  float* g = scratch.b.data();   // P' then dP, then dS
  float* dot = scratch.c.data();  // D = rowsum(dO * O) per query: sum(dP * P) of the softmax backward
  std::vector<TileRows> reach;
  for (int64_t r0 = 0; r0 < t.len; r0 += kRows) {
    const int64_t rows = std::min(kRows, t.len - r0);
    const int64_t at = t.row + r0 * a.width;
    for (int64_t i = 0; i < rows; ++i) {
      float sum = 0.0f;
      for (int64_t j = 0; j < a.d; ++j) sum += dout[at + i * a.width + j] * out[at + i * a.width + j];
      dot[i] = sum;
    }
    const auto [key_lo, key_hi] = block_reach(a.plan, r0, rows, t.len);
    for (int64_t c0 = key_lo; c0 < key_hi; c0 += kCols) {
      const int64_t cols = std::min(kCols, key_hi - c0);
      const int64_t key_at = t.row + c0 * a.width;
      tile_scores(a, t, q, k, r0, rows, c0, cols, p, reach);
      for (int64_t i = 0; i < rows; ++i) {
        const auto [lo, hi] = reach[static_cast<size_t>(i)];
        if (hi > lo) exp_sum(p + i * cols + lo, hi - lo, lse[t.lse + r0 + i]);
      }
      const float* pd = p;
      if (a.keep < 1.0) {
        for (int64_t i = 0; i < rows; ++i)
          apply_dropout_mask(p + i * cols, g + i * cols, cols, a.seed, t.counter + (r0 + i) * t.len + c0, a.keep);
        pd = g;
      }
      sgemm_rows(true, false, cols, a.d, rows, 1.0f, pd, cols, dout + at, a.width, 1.0f, dv + key_at,
                 a.width);  // dV += P'^T dO
      sgemm_rows(false, true, rows, cols, a.d, 1.0f, dout + at, a.width, v + key_at, a.width, 0.0f, g,
                 cols);  // dP' = dO V^T
      for (int64_t i = 0; i < rows; ++i) {
        float* gi = g + i * cols;
        if (a.keep < 1.0) apply_dropout_mask(gi, gi, cols, a.seed, t.counter + (r0 + i) * t.len + c0, a.keep);
        softmax_grad_row(p + i * cols, gi, cols, dot[i]);  // zero outside the reach, as P is
      }
      sgemm_rows(false, false, rows, a.d, cols, a.scale, g, cols, k + key_at, a.width, 1.0f, dq + at,
                 a.width);  // dQ += s dS K
      sgemm_rows(true, false, cols, a.d, rows, a.scale, g, cols, q + at, a.width, 1.0f, dk + key_at,
                 a.width);  // dK += s dS^T Q
    }
  }
}

// One task per (sequence, head), costed by the scores it computes.
std::vector<int64_t> task_costs(const Plan& plan) {
  std::vector<int64_t> costs;
  for (int64_t len : plan.lengths) {
    const int64_t reach = plan.window < 0 ? len : std::min(len, 2 * plan.window + kRows);
    for (int64_t h = 0; h < plan.heads; ++h) costs.push_back(len * reach + 1);
  }
  return costs;
}

}  // namespace

void tiled_forward(const KernelArgs& args, const float* q, const float* k, const float* v, float* out, float* lse) {
  for_each_task(task_costs(args.plan), [&](size_t task, Scratch& scratch) {
    forward_task(args, Task(args, task), q, k, v, out, lse, scratch);
  });
}

void tiled_backward(const KernelArgs& args, const float* q, const float* k, const float* v, const float* out,
                    const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  for_each_task(task_costs(args.plan), [&](size_t task, Scratch& scratch) {
    backward_task(args, Task(args, task), q, k, v, out, lse, dout, dq, dk, dv, scratch);
  });
}

}  // namespace ft::attention_detail
