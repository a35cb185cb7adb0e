#include "ft/parallel/state_placement.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include "ft/base/error.h"
#include "ft/comm/comm.h"
#include "ft/io/saved_state.h"

namespace ft {

namespace {

at::Tensor cpu_float(const at::Tensor& t) {
  return t.detach().to(at::kCPU, at::kFloat).contiguous().reshape({-1});
}

// The parts of `placed` (indices `which`) this rank sends, end to end.
template <typename Placed>
at::Tensor pack(const std::vector<Placed>& placed, const std::vector<size_t>& which, int64_t size) {
  at::Tensor out = at::zeros({size}, at::kFloat);
  int64_t pos = 0;
  for (size_t i : which) {
    const at::Tensor& t = placed[i].local;
    if (!t.defined() || t.numel() == 0) continue;
    out.narrow(0, pos, t.numel()).copy_(cpu_float(t));
    pos += t.numel();
  }
  return out;
}

}  // namespace

StatePlacement::StatePlacement(Comm& group) : group_(&group) {}

void StatePlacement::add(std::string name, std::vector<int64_t> shape, at::Tensor local, Placement where) {
  placed_.push_back(Placed{std::move(name), std::move(shape), std::move(local), where});
}

TensorList StatePlacement::gather() const {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> full(placed_.size());
  for (size_t i = 0; i < placed_.size(); ++i) {
    const Placed& p = placed_[i];
    if (p.where.kind != Placement::Kind::kReplicated) continue;
    if (!p.local.defined()) fail("state '{}': replicated but this rank holds no copy", p.name);
    full[i] = cpu_float(p.local).clone().view(p.shape);
  }
  gather_rows(full);
  gather_cuts(full);
  gather_stages(full);
  TensorList out;
  out.reserve(placed_.size());
  for (size_t i = 0; i < placed_.size(); ++i) out.emplace_back(placed_[i].name, std::move(full[i]));
  return out;
}

// The runs differ in length from rank to rank (a shard boundary cuts a
// tensor anywhere), so their (offset, length) pairs go first; the runs then
// travel in one all-gather padded to the longest rank's total.
void StatePlacement::gather_rows(std::vector<at::Tensor>& full) const {
  std::vector<size_t> rows;
  for (size_t i = 0; i < placed_.size(); ++i)
    if (placed_[i].where.kind == Placement::Kind::kRows) rows.push_back(i);
  if (rows.empty()) return;
  const auto n = static_cast<int64_t>(rows.size());
  at::Tensor mine = at::empty({2 * n}, at::kLong);
  auto* m = mine.data_ptr<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    const Placed& p = placed_[rows[static_cast<size_t>(j)]];
    m[2 * j] = p.where.offset;
    m[2 * j + 1] = p.local.defined() ? p.local.numel() : 0;
  }
  std::vector<at::Tensor> runs;
  group_->all_gather(runs, mine);
  int64_t longest = 0;
  for (const auto& r : runs) {
    int64_t total = 0;
    for (int64_t j = 0; j < n; ++j) total += r.data_ptr<int64_t>()[2 * j + 1];
    longest = std::max(longest, total);
  }
  for (size_t i : rows) full[i] = at::zeros(placed_[i].shape, at::kFloat);
  if (longest == 0) return;
  at::Tensor all = at::empty({longest * group_->world_size()}, at::kFloat);
  group_->all_gather_flat(all, pack(placed_, rows, longest));
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto* meta = runs[r].data_ptr<int64_t>();
    int64_t pos = static_cast<int64_t>(r) * longest;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t offset = meta[2 * j], numel = meta[2 * j + 1];
      if (numel == 0) continue;
      at::Tensor flat = full[rows[static_cast<size_t>(j)]].view({-1});
      if (offset < 0 || offset + numel > flat.numel()) {
        fail("state '{}': rank {} holds elements [{}, {}) of {}", placed_[rows[static_cast<size_t>(j)]].name, r,
             offset, offset + numel, flat.numel());
      }
      flat.narrow(0, offset, numel).copy_(all.narrow(0, pos, numel));
      pos += numel;
    }
  }
}

// Every rank's part of a cut tensor has the same size, so all of them travel
// in one all-gather of equal lengths, then each tensor is joined block-wise.
void StatePlacement::gather_cuts(std::vector<at::Tensor>& full) const {
  std::vector<size_t> cuts;
  int64_t size = 0;
  for (size_t i = 0; i < placed_.size(); ++i) {
    const Placed& p = placed_[i];
    if (p.where.kind != Placement::Kind::kCut) continue;
    if (!p.local.defined()) fail("state '{}': cut over the group but this rank holds no part", p.name);
    cuts.push_back(i);
    size += p.local.numel();
  }
  if (cuts.empty()) return;
  const int world = group_->world_size();
  at::Tensor all = at::empty({size * world}, at::kFloat);
  group_->all_gather_flat(all, pack(placed_, cuts, size));
  int64_t pos = 0;
  for (size_t i : cuts) {
    const Placed& p = placed_[i];
    std::vector<at::Tensor> parts;
    for (int r = 0; r < world; ++r) parts.push_back(all.narrow(0, r * size + pos, p.local.numel()).view(p.local.sizes()));
    full[i] = join_parts(parts, p.where.cut).clone();
    pos += p.local.numel();
  }
}

// A stage's tensors leave its owner in one broadcast; every rank knows their
// shapes, so the receivers size the buffer without asking.
void StatePlacement::gather_stages(std::vector<at::Tensor>& full) const {
  std::map<int, std::vector<size_t>> by_owner;
  for (size_t i = 0; i < placed_.size(); ++i)
    if (placed_[i].where.kind == Placement::Kind::kStage) by_owner[placed_[i].where.owner].push_back(i);
  for (const auto& [owner, which] : by_owner) {
    int64_t size = 0;
    for (size_t i : which) size += c10::multiply_integers(placed_[i].shape);
    at::Tensor flat;
    if (group_->rank() == owner) {
      for (size_t i : which) {
        const Placed& p = placed_[i];
        if (!p.local.defined() || p.local.numel() != c10::multiply_integers(p.shape)) {
          fail("state '{}': rank {} owns it but holds no whole copy", p.name, owner);
        }
      }
      flat = pack(placed_, which, size);
    } else {
      flat = at::empty({size}, at::kFloat);
    }
    if (group_->world_size() > 1 && size > 0) group_->broadcast(flat, owner);
    int64_t pos = 0;
    for (size_t i : which) {
      const int64_t k = c10::multiply_integers(placed_[i].shape);
      full[i] = flat.narrow(0, pos, k).view(placed_[i].shape).clone();
      pos += k;
    }
  }
}

TensorList StatePlacement::parts(const SavedTensors& full, const std::string& what, ShapeCheck check) const {
  TensorList out;
  for (const Placed& p : placed_) {
    if (!p.local.defined()) continue;
    const at::Tensor& saved = full.at(p.name);
    const bool fits = check == ShapeCheck::kShape ? saved.sizes() == at::IntArrayRef(p.shape)
                                                  : saved.numel() == c10::multiply_integers(p.shape);
    if (!fits) {
      fail("{}: '{}' has shape [{}], the model needs [{}]", what, p.name, fmt::join(saved.sizes(), ", "),
           fmt::join(p.shape, ", "));
    }
    const at::Tensor whole = saved.reshape(p.shape);
    at::Tensor part;
    switch (p.where.kind) {
      case Placement::Kind::kReplicated:
      case Placement::Kind::kStage: part = whole; break;
      case Placement::Kind::kRows: part = whole.reshape({-1}).narrow(0, p.where.offset, p.local.numel()); break;
      case Placement::Kind::kCut: part = take_part(whole, p.where.cut, group_->rank(), group_->world_size()); break;
    }
    out.emplace_back(p.name, part.reshape(p.local.sizes()));
  }
  return out;
}

void StatePlacement::load(const SavedTensors& full, const std::string& what, ShapeCheck check) const {
  c10::NoGradGuard no_grad;
  const TensorList mine = parts(full, what, check);
  size_t k = 0;
  for (const Placed& p : placed_) {
    if (p.local.defined()) p.local.detach().copy_(mine[k++].second);
  }
}

}  // namespace ft
