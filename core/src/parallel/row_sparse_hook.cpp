// row_sparse_allreduce_hook (ft/parallel/grad_buffer.h): the embedding table's
// gradient averaged over the rows some rank touched, not over all of them.
#include <c10/core/GradMode.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "ft/base/error.h"
#include "ft/parallel/grad_buffer.h"

namespace ft {
namespace {

// Grow-only staging, so a step reuses the last step's memory.
struct RowStaging {
  at::Tensor mask;  // [rows] uint8: 1 where some rank's gradient row is nonzero
  at::Tensor index; // int64, capacity >= touched rows
  at::Tensor rows;  // [capacity, width] of the gradient's dtype

  at::Tensor take_index(int64_t k) {
    if (!index.defined() || index.numel() < k) index = at::empty({std::max<int64_t>(k, 2 * (index.defined() ? index.numel() : 0))}, at::kLong);
    return index.narrow(0, 0, k);
  }
  at::Tensor take_rows(int64_t k, const at::Tensor& like) {
    const int64_t width = like.size(1);
    if (!rows.defined() || rows.size(0) < k || rows.size(1) != width || rows.scalar_type() != like.scalar_type()) {
      const int64_t cap = std::max<int64_t>(k, rows.defined() ? 2 * rows.size(0) : 0);
      rows = at::empty({cap, width}, like.options());
    }
    return rows.narrow(0, 0, k);
  }
};

// 1 where the row has a nonzero element (a row looked up by this rank).
void mark_touched_rows(const at::Tensor& grad, at::Tensor& mask) {
  const int64_t n = grad.size(0), width = grad.size(1);
  const float* g = grad.data_ptr<float>();
  uint8_t* m = mask.data_ptr<uint8_t>();
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = g + r * width;
      uint8_t any = 0;
      for (int64_t j = 0; j < width && !any; ++j) any = row[j] != 0.0f;
      m[r] = any;
    }
  });
}

}  // namespace

CommHook row_sparse_allreduce_hook(Comm& comm, CommHook dense) {
  if (!dense) fail("row-sparse hook: no dense hook given for the other buckets");
  Comm* c = &comm;
  auto staging = std::make_shared<RowStaging>();
  return [c, dense, staging](GradBucket& bucket) -> BucketComm {
    const int64_t width = bucket.row_width;
    if (width <= 0 || c->world_size() == 1 || !bucket.data.device().is_cpu() ||
        bucket.data.scalar_type() != at::kFloat) {
      return dense(bucket);
    }
    c10::NoGradGuard no_grad;
    const int64_t n = bucket.data.numel() / width;
    at::Tensor grad = bucket.data.narrow(0, 0, n * width).view({n, width});
    RowStaging& s = *staging;
    if (!s.mask.defined() || s.mask.numel() != n) s.mask = at::empty({n}, at::kByte);
    mark_touched_rows(grad, s.mask);
    // Small and blocking: the union is needed before the rows can be picked.
    c->all_reduce(s.mask, ReduceOp::Max);
    const uint8_t* m = s.mask.data_ptr<uint8_t>();
    int64_t k = 0;
    for (int64_t r = 0; r < n; ++r) k += m[r];
    at::Tensor index = s.take_index(k);
    int64_t* idx = index.data_ptr<int64_t>();
    for (int64_t r = 0, j = 0; r < n; ++r)
      if (m[r]) idx[j++] = r;
    at::Tensor rows = s.take_rows(k, grad);
    at::index_select_out(rows, grad, 0, index);
    Work work = c->all_reduce_async(rows, ReduceOp::Avg);
    return BucketComm{std::move(work), [grad, rows, index]() mutable {
                        c10::NoGradGuard guard;
                        grad.index_copy_(0, index, rows);
                      }};
  };
}

}  // namespace ft
