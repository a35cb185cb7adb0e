// Where each tensor of model or optimizer state lives among the ranks of one
// group, and the one code path that gathers it into full, HF-named tensors
// (for ordinary checkpoints, written under any strategy) and takes this
// rank's part back out of full state saved by any strategy.
//
// A strategy that splits state describes each tensor once (its name, full
// shape, this rank's part and its Placement); ZeRO/FSDP, pipeline and tensor
// parallelism all save and load through this, so a checkpoint written by one
// loads under every other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ft/base/types.h"
#include "ft/model/model.h"

namespace ft {

class Comm;
class SavedTensors;

struct Placement {
  enum class Kind {
    kReplicated,  // every rank holds the whole tensor (the same values)
    kRows,        // a contiguous run of the flattened tensor (a flat shard's piece); the ranks' runs tile it
    kCut,         // one equal part along a TensorCut per rank (tensor parallelism), in rank order
    kStage,       // whole on the ranks that hold it; `owner`'s copy is the one saved (a pipeline stage)
  };
  Kind kind = Kind::kReplicated;
  int64_t offset = 0;  // kRows: first element of this rank's run
  TensorCut cut;       // kCut
  int owner = 0;       // kStage: rank in the group

  static Placement replicated() { return {}; }
  static Placement rows(int64_t offset) { return {Kind::kRows, offset, {}, 0}; }
  static Placement cut_by(TensorCut cut) { return {Kind::kCut, 0, cut, 0}; }
  static Placement stage(int owner) { return {Kind::kStage, 0, {}, owner}; }
};

/// How parts() checks a saved tensor against the model's: model weights by
/// shape; optimizer buffers by element count (some writers keep them flat).
enum class ShapeCheck { kShape, kElements };

class StatePlacement {
 public:
  /// Over `group` (its ranks are the ones the placements name).
  explicit StatePlacement(Comm& group);

  /// One tensor: its checkpoint key (HF weight name, or "<weight>.<buffer>"),
  /// its full shape, this rank's part (undefined where this rank holds none:
  /// another stage's unit, a run of no elements) and where the parts are.
  /// Every rank adds the same keys in the same order.
  void add(std::string name, std::vector<int64_t> shape, at::Tensor local, Placement where);
  bool empty() const { return placed_.empty(); }

  /// Full fp32 CPU tensors on every rank, in the order added. Collective
  /// over the group: one all-gather of the runs (after one of their
  /// offsets), one of the cut parts, one broadcast per stage owner.
  TensorList gather() const;

  /// This rank's part of each tensor it holds, read from `full` (errors
  /// name `what` and the tensor), keyed and ordered as added. Local: no
  /// communication.
  TensorList parts(const SavedTensors& full, const std::string& what, ShapeCheck check) const;

  /// parts() copied into the local tensors, which are views of the
  /// strategy's own storage (a shard, a slice, a stage's parameters).
  void load(const SavedTensors& full, const std::string& what, ShapeCheck check) const;

 private:
  struct Placed {
    std::string name;
    std::vector<int64_t> shape;
    at::Tensor local;
    Placement where;
  };
  void gather_rows(std::vector<at::Tensor>& full) const;
  void gather_cuts(std::vector<at::Tensor>& full) const;
  void gather_stages(std::vector<at::Tensor>& full) const;

  Comm* group_;
  std::vector<Placed> placed_;
};

}  // namespace ft
