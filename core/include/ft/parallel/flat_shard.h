// Flat parameters: the ZeRO / FSDP storage layout.
//
// A *unit* of the model (embeddings, one encoder layer, the head; see
// ft/model/model.h) has its parameters laid end to end in ONE 1-D fp32 buffer, in
// model order, padded with zeros to a multiple of the shard world and split
// into EQUAL contiguous shards: rank r owns elements
// [r * shard_numel, (r + 1) * shard_numel). Shards are equal by
// construction (a 21 128 x 256 embedding is split like everything else),
// so the optimizer state per rank differs by at most the padding.
//
// FlatLayout is the pure arithmetic (who owns which element, flatten /
// unflatten by HF name); it is also what the sharded checkpoint metadata
// records, so `ft consolidate` can rebuild full tensors without the model.
// FlatParam is one unit's runtime storage with FSDP's three verbs
// unshard() / wait_for_unshard() / reshard().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include "ft/comm/comm.h"
#include "ft/base/types.h"

namespace ft {

/// Where one parameter sits in its unit's flat buffer.
struct FlatEntry {
  std::string name;            ///< HF parameter name
  std::vector<int64_t> shape;  ///< the parameter's shape
  int64_t offset = 0;          ///< first element in the flat buffer
  int64_t numel = 0;
  bool trainable = true;       ///< false: frozen, no grad, no optimizer state
};

/// The part of one entry that falls inside one rank's shard.
struct FlatPiece {
  int entry = 0;                ///< index into FlatLayout::entries
  int64_t offset_in_entry = 0;  ///< first element of the piece within the parameter
  int64_t offset_in_shard = 0;  ///< first element of the piece within the shard
  int64_t numel = 0;
};

/// One unit's flat layout. Invariants: entries are contiguous from offset 0
/// in order; numel = sum of entry numels; padded_numel is the smallest
/// positive multiple of `world` (times the row alignment it was built with)
/// >= numel; the padding holds zeros.
struct FlatLayout {
  std::vector<FlatEntry> entries;
  int64_t numel = 0;
  int64_t padded_numel = 0;
  int world = 1;

  /// Lays out `params` (model order) for `world` equal shards. `trainable`
  /// marks which names get grads/optimizer state (empty: all). `row_align`
  /// > 1 pads to a multiple of world * row_align, so a 2-D table of rows
  /// that wide splits on row boundaries (the vocabulary-sharded word table:
  /// rank r owns whole rows).
  static FlatLayout build(const TensorList& params, int world, const std::vector<bool>& trainable = {},
                          int64_t row_align = 1);

  int64_t shard_numel() const { return padded_numel / world; }
  int64_t shard_begin(int rank) const { return shard_numel() * rank; }
  int64_t padding() const { return padded_numel - numel; }

  /// Pieces of every entry inside `rank`'s shard, in entry order. A shard is
  /// contiguous, so each parameter contributes at most one piece.
  std::vector<FlatPiece> pieces(int rank) const;

  /// The full padded fp32 flat buffer from named tensors (`suffix` appended
  /// to each entry name, e.g. ".exp_avg"). Missing names or wrong sizes:
  /// ft::Error naming `source` and the tensor. Frozen entries may be absent
  /// when `require_frozen` is false (left zero).
  at::Tensor flatten(const TensorList& named, const std::string& source, const std::string& suffix = "",
                     bool require_frozen = true) const;
  /// Named fp32 CPU copies of every entry (or only trainable ones) out of a
  /// full flat buffer, names with `suffix` appended.
  TensorList unflatten(const at::Tensor& flat, const std::string& suffix = "", bool trainable_only = false) const;

  /// JSON object for sharded-checkpoint metadata and its inverse (errors name `source`).
  std::string to_json() const;
  static FlatLayout from_json(const std::string& json, const std::string& source);
};

/// FSDP's ShardedState: whether a unit's full parameters are materialised.
enum class ShardedState {
  kSharded,     ///< only the local shard exists (full storage freed)
  kUnsharding,  ///< all-gather issued, not waited on
  kUnsharded,   ///< full parameters valid; module parameters usable
};

/// Storage for gathered units, kept for reuse instead of freed: ZeRO-3 /
/// FULL_SHARD gather and free every unit twice a step, and handing the same
/// blocks back means no allocation after the first step and no allocator
/// churn in RSS. A request takes the smallest free block that is big
/// enough, not only one of its exact size: a layer prefetched while the
/// embedding unit's block is free takes that block rather than a new one,
/// so the pool's footprint is the peak of units gathered at once (bench-mini,
/// zero3: the embedding unit and a layer), not every unit size seen.
/// Not thread-safe (see FlatParam).
class GatherPool {
 public:
  /// The smallest free block of at least `nbytes` on `device`, or an empty
  /// DataPtr when none fits (the caller allocates `nbytes`; it counts as held).
  at::DataPtr take(size_t nbytes, c10::Device device);
  /// Hands back a block taken (or allocated after an empty take) for `nbytes`.
  void give(at::DataPtr ptr, size_t nbytes);
  /// Bytes ever handed out for allocation: the pool's footprint.
  int64_t held_bytes() const { return held_bytes_; }

 private:
  std::multimap<size_t, at::DataPtr> free_;  // by block size
  std::map<const void*, size_t> size_of_;    // every block's real size, by address
  int64_t held_bytes_ = 0;
};

/// One unit's parameters as a flat buffer plus this rank's shard.
///
/// Invariants (fixed at construction):
///  - every module parameter of the unit is a view of `full()` (its
///    TensorImpl keeps its sizes; only the storage behind it comes and goes);
///  - when `params_sharded`, shard() is separate memory (the fp32 master
///    shard the optimizer updates) and full() storage is freed while
///    kSharded: touching a module parameter then is a bug;
///  - when not `params_sharded`, shard() is a view of full()'s own chunk
///    and the state is always kUnsharded (ZeRO-1/2, FSDP NO_SHARD).
/// Not thread-safe; used from the worker's main thread and autograd hooks
/// that run on it (CPU).
class FlatParam {
 public:
  /// `params` are the unit's module parameters (model order). Their current
  /// values become the flat buffer; this rank keeps chunk `rank` of it.
  /// `pool` (may be null; must outlive this) recycles gathered storage.
  /// `row_align`: as FlatLayout::build.
  FlatParam(int unit, const TensorList& params, const std::vector<bool>& trainable, int world, int rank,
            bool params_sharded, GatherPool* pool = nullptr, int64_t row_align = 1);

  int unit() const { return unit_; }
  const FlatLayout& layout() const { return layout_; }
  const std::vector<at::Tensor>& params() const { return params_; }  ///< module parameters (entry order)
  bool params_sharded() const { return sharded_; }
  ShardedState state() const { return state_; }

  /// This rank's shard (fp32, shard_numel elements); updated in place by the optimizer.
  const at::Tensor& shard() const { return shard_; }
  /// The full padded buffer; its storage is empty while kSharded.
  const at::Tensor& full() const { return full_; }

  /// Issues the all-gather of every rank's shard into full() (allocating its
  /// storage). No-op unless kSharded. Collective (async).
  void unshard(Comm& comm);
  /// Blocks until an issued unshard() is done. No-op if kUnsharded; calls
  /// unshard() first if kSharded. Throws like Comm::Work::wait().
  void wait_for_unshard(Comm& comm);
  /// Frees full() storage (params_sharded only; otherwise no-op).
  void reshard();

  /// Re-fills full() from the shards after the optimizer changed them
  /// (replicated-params mode: ZeRO-1/2). Returns the pending gather.
  Work gather_from_shards_async(Comm& comm);

  /// A full flat copy of the current values without changing state
  /// (all-gather when sharded). Collective when world > 1.
  at::Tensor gather_copy(Comm& comm) const;

  /// Loads full values (e.g. from a checkpoint): full() if materialised and
  /// this rank's chunk into shard().
  void load_full(const at::Tensor& flat);

  /// Bytes of full() storage currently allocated.
  int64_t full_bytes_held() const;
  int64_t shard_bytes() const { return shard_.numel() * 4; }

 private:
  int unit_;
  FlatLayout layout_;
  int rank_;
  bool sharded_;
  std::vector<at::Tensor> params_;
  at::Tensor full_;
  at::Tensor shard_;
  GatherPool* pool_;
  Work gather_;
  ShardedState state_ = ShardedState::kUnsharded;
};

}  // namespace ft
