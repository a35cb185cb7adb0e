#include "ft/parallel/flat_shard.h"

#include <c10/core/GradMode.h>
#include <map>

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"

namespace ft {
namespace {

// FSDP's trick: a view keeps its sizes while the storage under it is
// emptied and later refilled, so module parameters (and the tensors autograd
// saved from them in forward) stay valid handles across reshard/unshard.
void free_storage(const at::Tensor& t, GatherPool* pool) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = impl->nbytes();
  if (nbytes == 0) return;
  at::DataPtr old = impl->set_data_ptr(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
  if (pool) pool->give(std::move(old), nbytes);
}

void alloc_storage(const at::Tensor& t, int64_t nbytes, GatherPool* pool) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  if (static_cast<int64_t>(impl->nbytes()) == nbytes) return;
  at::DataPtr ptr = pool ? pool->take(static_cast<size_t>(nbytes), t.device()) : at::DataPtr(nullptr, t.device());
  if (!ptr) ptr = impl->allocator()->allocate(static_cast<size_t>(nbytes));
  impl->set_data_ptr_noswap(std::move(ptr));
  impl->set_nbytes(static_cast<size_t>(nbytes));
}

}  // namespace

// ---------------------------------------------------------------- layout

FlatLayout FlatLayout::build(const TensorList& params, int world, const std::vector<bool>& trainable,
                             int64_t row_align) {
  if (world < 1) fail("flat layout: world size must be >= 1, got {}", world);
  if (row_align < 1) fail("flat layout: row alignment must be >= 1, got {}", row_align);
  FlatLayout l;
  l.world = world;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, t] = params[i];
    FlatEntry e;
    e.name = name;
    e.shape = t.sizes().vec();
    e.offset = l.numel;
    e.numel = t.numel();
    e.trainable = trainable.empty() || trainable[i];
    l.numel += e.numel;
    l.entries.push_back(std::move(e));
  }
  const int64_t multiple = world * row_align;
  l.padded_numel = std::max<int64_t>(1, (l.numel + multiple - 1) / multiple) * multiple;
  return l;
}

std::vector<FlatPiece> FlatLayout::pieces(int rank) const {
  std::vector<FlatPiece> out;
  const int64_t begin = shard_begin(rank), end = begin + shard_numel();
  for (size_t i = 0; i < entries.size(); ++i) {
    const FlatEntry& e = entries[i];
    const int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel);
    if (lo >= hi) continue;
    out.push_back(FlatPiece{static_cast<int>(i), lo - e.offset, lo - begin, hi - lo});
  }
  return out;
}

at::Tensor FlatLayout::flatten(const TensorList& named, const std::string& source, const std::string& suffix,
                               bool require_frozen) const {
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, t] : named) by_name[name] = &t;
  at::Tensor flat = at::zeros({padded_numel}, at::kFloat);
  for (const FlatEntry& e : entries) {
    auto it = by_name.find(e.name + suffix);
    if (it == by_name.end()) {
      if (!e.trainable && !require_frozen) continue;
      fail("{}: missing tensor '{}'", source, e.name + suffix);
    }
    if (it->second->numel() != e.numel) {
      fail("{}: tensor '{}' has {} elements, expected {} (shape {})", source, e.name + suffix, it->second->numel(),
           e.numel, fmt::format("{}", fmt::join(e.shape, "x")));
    }
    flat.narrow(0, e.offset, e.numel).copy_(it->second->detach().reshape({-1}));
  }
  return flat;
}

TensorList FlatLayout::unflatten(const at::Tensor& flat, const std::string& suffix, bool trainable_only) const {
  TensorList out;
  at::Tensor cpu = flat.detach().to(at::kCPU, at::kFloat);
  for (const FlatEntry& e : entries) {
    if (trainable_only && !e.trainable) continue;
    out.emplace_back(e.name + suffix, cpu.narrow(0, e.offset, e.numel).view(e.shape).clone());
  }
  return out;
}

std::string FlatLayout::to_json() const {
  nlohmann::json j;
  j["world"] = world;
  j["numel"] = numel;
  j["padded_numel"] = padded_numel;
  auto& es = j["entries"] = nlohmann::json::array();
  for (const auto& e : entries) {
    es.push_back({{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}, {"numel", e.numel},
                  {"trainable", e.trainable}});
  }
  return j.dump();
}

FlatLayout FlatLayout::from_json(const std::string& json, const std::string& source) {
  FlatLayout l;
  try {
    auto j = nlohmann::json::parse(json);
    l.world = j.at("world").get<int>();
    l.numel = j.at("numel").get<int64_t>();
    l.padded_numel = j.at("padded_numel").get<int64_t>();
    for (const auto& e : j.at("entries")) {
      l.entries.push_back(FlatEntry{e.at("name").get<std::string>(), e.at("shape").get<std::vector<int64_t>>(),
                                    e.at("offset").get<int64_t>(), e.at("numel").get<int64_t>(),
                                    e.at("trainable").get<bool>()});
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed flat layout ({})", source, e.what());
  }
  int64_t expect = 0;
  for (const auto& e : l.entries) {
    if (e.offset != expect) fail("{}: entry '{}' starts at {}, expected {}", source, e.name, e.offset, expect);
    expect += e.numel;
  }
  if (l.world < 1 || expect != l.numel || l.padded_numel < l.numel || l.padded_numel % l.world != 0) {
    fail("{}: inconsistent flat layout (world {}, numel {}, padded {})", source, l.world, l.numel, l.padded_numel);
  }
  return l;
}

// ---------------------------------------------------------------- GatherPool

at::DataPtr GatherPool::take(size_t nbytes, c10::Device device) {
  for (auto it = free_.lower_bound(nbytes); it != free_.end(); ++it) {
    if (it->second.device() != device) continue;
    at::DataPtr ptr = std::move(it->second);
    free_.erase(it);
    return ptr;
  }
  held_bytes_ += static_cast<int64_t>(nbytes);
  return at::DataPtr(nullptr, device);
}

void GatherPool::give(at::DataPtr ptr, size_t nbytes) {
  // A block seen for the first time was allocated for exactly `nbytes`.
  const size_t size = size_of_.emplace(ptr.get(), nbytes).first->second;
  free_.emplace(size, std::move(ptr));
}

// ---------------------------------------------------------------- FlatParam

FlatParam::FlatParam(int unit, const TensorList& params, const std::vector<bool>& trainable, int world, int rank,
                     bool params_sharded, GatherPool* pool, int64_t row_align)
    : unit_(unit), layout_(FlatLayout::build(params, world, trainable, row_align)), rank_(rank), sharded_(params_sharded),
      pool_(pool) {
  c10::NoGradGuard no_grad;
  const auto device = params.empty() ? c10::Device(c10::kCPU) : params.front().second.device();
  full_ = at::zeros({layout_.padded_numel}, at::TensorOptions().dtype(at::kFloat).device(device));
  for (size_t i = 0; i < params.size(); ++i) {
    const FlatEntry& e = layout_.entries[i];
    at::Tensor p = params[i].second;
    if (p.scalar_type() != at::kFloat) fail("flat param: '{}' is {}, expected fp32", e.name, c10::toString(p.scalar_type()));
    at::Tensor view = full_.narrow(0, e.offset, e.numel).view(e.shape);
    view.copy_(p.detach());
    p.set_data(view);
    params_.push_back(p);
  }
  at::Tensor chunk = full_.narrow(0, layout_.shard_begin(rank_), layout_.shard_numel());
  if (sharded_) {
    shard_ = chunk.clone();
    // Freed outright, not pooled: the pool is for the blocks that training
    // gathers, and would otherwise keep every unit's construction copy.
    free_storage(full_, nullptr);
    state_ = ShardedState::kSharded;
  } else {
    shard_ = chunk;
  }
}

void FlatParam::unshard(Comm& comm) {
  if (state_ != ShardedState::kSharded) return;
  alloc_storage(full_, layout_.padded_numel * 4, pool_);
  full_.narrow(0, layout_.shard_begin(rank_), layout_.shard_numel()).copy_(shard_);
  gather_ = comm.all_gather_inplace_async(full_);
  state_ = ShardedState::kUnsharding;
}

void FlatParam::wait_for_unshard(Comm& comm) {
  if (state_ == ShardedState::kSharded) unshard(comm);
  if (state_ != ShardedState::kUnsharding) return;
  gather_.wait();
  state_ = ShardedState::kUnsharded;
}

void FlatParam::reshard() {
  if (!sharded_) return;
  free_storage(full_, pool_);
  state_ = ShardedState::kSharded;
}

Work FlatParam::gather_from_shards_async(Comm& comm) {
  if (sharded_) fail("flat param {}: gather_from_shards_async is for replicated parameters", unit_);
  // shard_ is full_'s own chunk: the optimizer's update is already in place.
  return comm.all_gather_inplace_async(full_);
}

at::Tensor FlatParam::gather_copy(Comm& comm) const {
  if (!sharded_) return full_.clone();
  at::Tensor out = at::empty({layout_.padded_numel}, shard_.options());
  out.narrow(0, layout_.shard_begin(rank_), layout_.shard_numel()).copy_(shard_);
  comm.all_gather_inplace_async(out).wait();
  return out;
}

void FlatParam::load_full(const at::Tensor& flat) {
  c10::NoGradGuard no_grad;
  at::Tensor src = flat.to(full_.device(), at::kFloat);
  if (state_ == ShardedState::kUnsharded) full_.copy_(src);
  if (sharded_) shard_.copy_(src.narrow(0, layout_.shard_begin(rank_), layout_.shard_numel()));
}

int64_t FlatParam::full_bytes_held() const {
  return static_cast<int64_t>(full_.storage().nbytes());
}

}  // namespace ft
