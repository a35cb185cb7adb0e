#include "ft/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "ft/base/error.h"

namespace ft {
namespace {

// Uniform integer in [0, bound) by rejection: no modulo bias, and unlike
// std::uniform_int_distribution the same sequence on every standard library.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  if (n < 0) fail("seeded_permutation: negative size {}", n);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

std::vector<int64_t> group_by_length(const std::vector<int64_t>& perm, const std::vector<int64_t>& lengths,
                                     int64_t global_batch, uint64_t seed) {
  if (global_batch <= 0) fail("group_by_length: global batch is {}; it must be >= 1", global_batch);
  const auto n = static_cast<int64_t>(perm.size());
  const auto length_of = [&](int64_t row) { return lengths[static_cast<size_t>(row)]; };
  std::vector<int64_t> sorted = perm;
  const int64_t mega = 50 * global_batch;
  for (int64_t begin = 0; begin < n; begin += mega) {
    const auto first = sorted.begin() + begin, last = sorted.begin() + std::min(n, begin + mega);
    std::stable_sort(first, last, [&](int64_t a, int64_t b) { return length_of(a) > length_of(b); });
  }
  const int64_t full = n / global_batch;
  // Batch order: the one holding the longest row first, the rest shuffled.
  int64_t longest = 0;
  for (int64_t b = 0; b < full; ++b)
    if (length_of(sorted[static_cast<size_t>(b * global_batch)]) >
        length_of(sorted[static_cast<size_t>(longest * global_batch)]))
      longest = b;
  std::vector<int64_t> order = seeded_permutation(full, seed);
  std::iter_swap(order.begin(), std::find(order.begin(), order.end(), longest));
  std::vector<int64_t> out;
  out.reserve(perm.size());
  for (int64_t b : order)
    out.insert(out.end(), sorted.begin() + b * global_batch, sorted.begin() + (b + 1) * global_batch);
  out.insert(out.end(), sorted.begin() + full * global_batch, sorted.end());
  return out;
}

DistributedSampler::DistributedSampler(SamplerOptions options) : options_(options) {
  const auto& o = options_;
  if (!o.lengths.empty() && static_cast<int64_t>(o.lengths.size()) != o.dataset_size)
    fail("sampler: {} row lengths for {} rows (group_by_length needs one per row)", o.lengths.size(),
         o.dataset_size);
  if (o.dataset_size <= 0)
    fail("sampler: dataset_size is {}; the training set has no rows, check the data source",
         o.dataset_size);
  if (o.per_rank_batch <= 0)
    fail("sampler: per_rank_batch is {}; set a batch size >= 1", o.per_rank_batch);
  if (o.world < 1) fail("sampler: world is {}; it must be >= 1", o.world);
  if (o.rank < 0 || o.rank >= o.world)
    fail("sampler: rank {} is outside [0, {}); check RANK and WORLD_SIZE", o.rank, o.world);
  if (o.accum < 1) fail("sampler: accum is {}; gradient accumulation must be >= 1", o.accum);
  if (o.drop_last && o.dataset_size < global_batch_size())
    fail(
        "sampler: {} rows are fewer than one global batch of {} (batch {} x world {} x "
        "accum {}) with drop_last; lower the batch size or turn drop_last off",
        o.dataset_size, global_batch_size(), o.per_rank_batch, o.world, o.accum);
}

int64_t DistributedSampler::global_batch_size() const {
  return options_.per_rank_batch * options_.world * options_.accum;
}

int64_t DistributedSampler::steps_per_epoch() const {
  const int64_t g = global_batch_size();
  return options_.drop_last ? options_.dataset_size / g : ceil_div(options_.dataset_size, g);
}

int64_t DistributedSampler::step_rows(int64_t step) const {
  check_step(0, step);
  const int64_t g = global_batch_size();
  return std::min(g, options_.dataset_size - step * g);
}

void DistributedSampler::check_step(int64_t epoch, int64_t step) const {
  if (epoch < 0) fail("sampler: epoch {} is negative", epoch);
  if (step < 0 || step >= steps_per_epoch())
    fail("sampler: step {} is outside [0, {}) steps per epoch", step, steps_per_epoch());
}

const std::vector<int64_t>& DistributedSampler::permutation(int64_t epoch) const {
  if (cached_epoch_ != epoch || cached_permutation_.empty()) {
    if (options_.shuffle) {
      cached_permutation_ =
          seeded_permutation(options_.dataset_size, options_.seed + static_cast<uint64_t>(epoch));
    } else {
      cached_permutation_.resize(static_cast<size_t>(options_.dataset_size));
      std::iota(cached_permutation_.begin(), cached_permutation_.end(), int64_t{0});
    }
    if (!options_.lengths.empty()) {
      // Its own stream: the row permutation above stays what it is without grouping.
      const uint64_t batch_seed = (options_.seed + static_cast<uint64_t>(epoch)) ^ 0x9e3779b97f4a7c15ULL;
      cached_permutation_ = group_by_length(cached_permutation_, options_.lengths, global_batch_size(), batch_seed);
    }
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

std::vector<int64_t> DistributedSampler::global_batch(int64_t epoch, int64_t step) const {
  check_step(epoch, step);
  const auto& perm = permutation(epoch);
  const int64_t n = options_.dataset_size;
  const int64_t slices = options_.world * options_.accum;
  const int64_t begin = step * global_batch_size();
  const int64_t real = std::min(global_batch_size(), n - begin);
  const int64_t padded = ceil_div(real, slices) * slices;
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(padded));
  for (int64_t i = 0; i < real; ++i) rows.push_back(perm[static_cast<size_t>(begin + i)]);
  // Wrap-around padding of the last batch (see the class comment).
  for (int64_t i = 0; i < padded - real; ++i) rows.push_back(perm[static_cast<size_t>(i % n)]);
  return rows;
}

std::vector<int64_t> DistributedSampler::micro_batch(int64_t epoch, int64_t step,
                                                     int64_t micro) const {
  return micro_batch(epoch, step, micro, options_.rank);
}

std::vector<int64_t> DistributedSampler::micro_batch(int64_t epoch, int64_t step, int64_t micro,
                                                     int64_t rank) const {
  if (micro < 0 || micro >= options_.accum)
    fail("sampler: micro-batch {} is outside [0, {})", micro, options_.accum);
  if (rank < 0 || rank >= options_.world)
    fail("sampler: rank {} is outside [0, {})", rank, options_.world);
  const int64_t slices = options_.world * options_.accum;
  if (cached_step_ != std::make_pair(epoch, step)) {
    cached_sliced_ = global_batch(epoch, step);
    if (options_.tokens && options_.world > 1) {
      const std::vector<int64_t> tokens = options_.tokens(cached_sliced_);
      if (!tokens.empty()) cached_sliced_ = balance_slices(cached_sliced_, tokens, slices);
    }
    cached_step_ = {epoch, step};
  }
  const std::vector<int64_t>& global = cached_sliced_;
  const int64_t size = static_cast<int64_t>(global.size()) / slices;
  const int64_t k = micro * options_.world + rank;
  return {global.begin() + k * size, global.begin() + (k + 1) * size};
}

std::vector<int64_t> balance_slices(const std::vector<int64_t>& rows, const std::vector<int64_t>& tokens,
                                    int64_t slices) {
  if (slices <= 0 || rows.size() % static_cast<size_t>(slices) != 0)
    fail("balance_slices: {} rows do not split into {} equal slices", rows.size(), slices);
  if (tokens.size() != rows.size()) fail("balance_slices: {} token counts for {} rows", tokens.size(), rows.size());
  const size_t size = rows.size() / static_cast<size_t>(slices);
  std::vector<size_t> order(rows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tokens[a] > tokens[b]; });
  std::vector<int64_t> load(static_cast<size_t>(slices), 0);
  std::vector<std::vector<size_t>> members(static_cast<size_t>(slices));
  for (size_t i : order) {
    size_t best = 0;
    bool found = false;
    for (size_t s = 0; s < members.size(); ++s) {
      if (members[s].size() == size) continue;
      if (!found || load[s] < load[best]) best = s, found = true;
    }
    members[best].push_back(i);
    load[best] += tokens[i];
  }
  std::vector<int64_t> out;
  out.reserve(rows.size());
  for (auto& m : members) {
    std::sort(m.begin(), m.end());
    for (size_t i : m) out.push_back(rows[i]);
  }
  return out;
}

std::vector<EvalBatchIndices> eval_batches(int64_t n, int64_t batch, int world, int rank) {
  if (n < 0) fail("eval_batches: negative dataset size {}", n);
  if (batch <= 0) fail("eval_batches: eval batch size is {}; set it >= 1", batch);
  if (world < 1 || rank < 0 || rank >= world)
    fail("eval_batches: rank {} is outside [0, {})", rank, world);
  std::vector<EvalBatchIndices> out;
  if (n == 0) return out;
  const int64_t base = n / world;
  const int64_t extra = n % world;
  const int64_t shard = base + (rank < extra ? 1 : 0);
  const int64_t shard_begin = rank * base + std::min<int64_t>(rank, extra);
  const int64_t max_shard = base + (extra > 0 ? 1 : 0);
  const int64_t filler = shard > 0 ? shard_begin + shard - 1 : 0;
  const int64_t num_batches = ceil_div(max_shard, batch);
  out.reserve(static_cast<size_t>(num_batches));
  for (int64_t j = 0; j < num_batches; ++j) {
    // Batch j has the size of the largest shard's batch j on every rank.
    const int64_t size = std::min(batch, max_shard - j * batch);
    EvalBatchIndices b;
    b.rows.reserve(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      const int64_t local = j * batch + i;
      if (local < shard) {
        b.rows.push_back(shard_begin + local);
        ++b.num_valid;
      } else {
        b.rows.push_back(filler);
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace ft
