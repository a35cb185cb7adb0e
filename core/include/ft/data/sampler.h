// Which dataset rows each rank and micro-batch sees: training and evaluation.
//
// Training: optimizer step s of an epoch consumes one *global batch* of
// G = per_rank_batch * world * accum consecutive entries of that epoch's
// permutation. With shuffling off the permutation is the identity, so global
// batch s is exactly rows [G*s, G*s + G) whatever the world size and
// accumulation count: 2 ranks of 16, or 1 rank x 2 micro-batches of 16, cover
// the same 32 rows as one batch of 32 (the parity fixtures rely on this).
//
// Everything is a pure function of (options, epoch, step, micro, rank), so a
// resumed run asks for its batches directly, and every rank computes the same
// permutation locally without communication.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace ft {

/// A permutation of [0, n) drawn by a seeded Fisher-Yates shuffle over
/// std::mt19937_64 with our own unbiased bounded draw. Unlike std::shuffle or
/// std::uniform_int_distribution (implementation-defined), the result is the
/// same on every platform and standard library, which resumable runs and
/// multi-rank agreement need.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

/// Sampler configuration; the constructor validates it and names the field.
struct SamplerOptions {
  int64_t dataset_size = 0;    ///< rows in the training set (> 0)
  int64_t per_rank_batch = 0;  ///< micro-batch rows per rank (> 0)
  int64_t world = 1;           ///< number of ranks (>= 1)
  int64_t rank = 0;            ///< this rank, in [0, world)
  int64_t accum = 1;           ///< micro-batches per optimizer step (>= 1)
  bool shuffle = true;         ///< reshuffle every epoch with seed + epoch
  bool drop_last = false;      ///< drop the last incomplete global batch
  uint64_t seed = 0;
  /// Tokens of each row (dataset_size entries) for group_by_length; empty =
  /// off. See group_by_length() below.
  std::vector<int64_t> lengths;
  /// Tokens of the given rows (Dataset::lengths_of). Set with world > 1 and
  /// padding-free batches: each global batch is then dealt to the ranks by
  /// balance_slices() below, so that no rank waits at the gradient
  /// all-reduce for one that drew more tokens. Unset, or an empty answer:
  /// contiguous slices.
  std::function<std::vector<int64_t>(const std::vector<int64_t>&)> tokens;
};

/// Deals a global batch `rows` to `slices` slices of rows.size() / slices
/// rows each, longest row first to the slice with the fewest tokens so far
/// that still has room (ties to the lower slice), and returns the batch
/// reordered so that slice k is entries [k * size, (k + 1) * size), each
/// slice in its rows' batch order. The same rows, so the same global
/// gradient (to summation order).
std::vector<int64_t> balance_slices(const std::vector<int64_t>& rows, const std::vector<int64_t>& tokens,
                                    int64_t slices);

/// HF Trainer's group_by_length on an epoch's permutation `perm`: cut into
/// mega-batches of 50 global batches, sort each by length (longest first,
/// ties in permutation order), cut into global batches of `global_batch`
/// rows, then serve the full batches in an order shuffled with `seed`,
/// except that the batch holding the longest row goes first (HF's rule: an
/// out-of-memory error shows at once). An incomplete last batch stays last.
/// Returns a permutation of the same rows.
std::vector<int64_t> group_by_length(const std::vector<int64_t>& perm, const std::vector<int64_t>& lengths,
                                     int64_t global_batch, uint64_t seed);

/// Training-set sampler: maps (epoch, step, micro, rank) to row indices.
///
/// Within a global batch, micro-batch m of rank r is slice k = m * world + r
/// (micro-major: the rows all ranks see in micro-batch m are contiguous in
/// the global batch), after balance_slices() where options.tokens is set.
///
/// The last, incomplete global batch (when dataset_size is not a multiple of
/// G) is kept unless drop_last. Its b rows are split as evenly as possible
/// into world * accum slices of ceil(b / (world * accum)) rows; when b does
/// not divide evenly, the batch is padded by wrapping around to the start of
/// the epoch's permutation, so every rank and micro-batch of that step has
/// the same size (a few rows are then seen twice in that epoch; step_rows()
/// reports the real count for throughput figures).
///
/// Not thread-safe: micro_batch() caches the last epoch's permutation.
class DistributedSampler {
 public:
  /// Throws ft::Error naming the bad field (or, with drop_last, when the
  /// dataset is smaller than one global batch).
  explicit DistributedSampler(SamplerOptions options);

  /// Optimizer steps in one epoch: ceil(n / G), or floor(n / G) with drop_last.
  int64_t steps_per_epoch() const;

  /// G = per_rank_batch * world * accum.
  int64_t global_batch_size() const;

  /// Distinct real rows consumed by `step` (G, except possibly the last step).
  int64_t step_rows(int64_t step) const;

  /// Rows of micro-batch `micro` of this rank (options.rank) at (epoch, step).
  std::vector<int64_t> micro_batch(int64_t epoch, int64_t step, int64_t micro) const;

  /// Same for any rank: what a single-process strategy (DP) or a test needs.
  std::vector<int64_t> micro_batch(int64_t epoch, int64_t step, int64_t micro,
                                   int64_t rank) const;

  /// The whole global batch of (epoch, step), padded as described above when
  /// it is the incomplete last one; micro-batches are slices of it.
  std::vector<int64_t> global_batch(int64_t epoch, int64_t step) const;

  const SamplerOptions& options() const { return options_; }

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;
  void check_step(int64_t epoch, int64_t step) const;

  SamplerOptions options_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_permutation_;
  // The last (epoch, step)'s global batch as sliced (micro_batch() is asked
  // once per micro-batch of a step; balancing reads the rows' tokens).
  mutable std::pair<int64_t, int64_t> cached_step_{-1, -1};
  mutable std::vector<int64_t> cached_sliced_;
};

/// One evaluation batch of a rank: `rows` starts with `num_valid` real rows;
/// the rest repeat a real row only so that shapes line up and must be
/// ignored by metrics.
struct EvalBatchIndices {
  std::vector<int64_t> rows;
  int64_t num_valid = 0;
};

/// Evaluation sharding: every one of the n rows is evaluated exactly once
/// across ranks (unlike PyTorch's DistributedSampler, which counts padded
/// duplicates), yet every rank gets the SAME number of batches, and batch j
/// has the same size on every rank, because sharded strategies run
/// collectives inside forward.
///
/// Rank r gets a contiguous shard of n / world rows, the first n % world
/// ranks one more; the shard is cut into batches of `batch` rows. A rank
/// whose shard is one row shorter pads its last batch by repeating its last
/// real row (or row 0 when its shard is empty, n < world). n == 0 gives no
/// batches on any rank. Throws ft::Error on batch <= 0 or a bad rank/world.
std::vector<EvalBatchIndices> eval_batches(int64_t n, int64_t batch, int world, int rank);

}  // namespace ft
