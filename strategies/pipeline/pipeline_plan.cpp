// strategy.options for pipeline, and the contiguous stage split.
#include <algorithm>
#include <limits>

#include "ft/base/error.h"
#include "ft/config/options.h"
#include "pipeline_strategy.h"

namespace ft {

PipelineOptions pipeline_options_from(const std::map<std::string, std::string>& options, int world_size) {
  const OptionReader r(options, "pipeline", {"stages", "schedule", "balance"});
  PipelineOptions o;
  o.stages = r.get_int("stages", world_size, {1}, "pipeline stages, e.g. 2");
  if (world_size % o.stages != 0) {
    fail("strategy.options.stages: {} stages do not divide the {} ranks into whole pipelines; pick a divisor of {}",
         o.stages, world_size, world_size);
  }
  o.schedule = r.get_choice("schedule", "1f1b", {"1f1b", "gpipe"}) == "gpipe" ? PipeSchedule::kGPipe
                                                                               : PipeSchedule::kOneFOneB;
  const std::string balance = r.get_choice("balance", "compute", {"compute", "time", "parameters", "units"});
  o.balance = balance == "units"        ? StageBalance::kUnits
              : balance == "parameters" ? StageBalance::kParameters
              : balance == "time"       ? StageBalance::kTime
                                        : StageBalance::kCompute;
  return o;
}

std::vector<int64_t> unit_costs(const std::vector<TensorList>& units, StageBalance balance) {
  std::vector<int64_t> out;
  for (size_t u = 0; u < units.size(); ++u) {
    int64_t n = 0;
    for (const auto& [name, t] : units[u]) {
      // Forward and backward cost ~6 FLOPs per matmul weight per token; an
      // embedding table is a lookup, and vectors (biases, LayerNorm) are noise.
      const bool matmul = u > 0 && t.dim() == 2;
      if (balance == StageBalance::kParameters || matmul) n += t.numel();
    }
    out.push_back(balance == StageBalance::kUnits ? 1 : n);
  }
  return out;
}

// Linear partition by dynamic programming: best[k][i] is the smallest
// possible largest part when units 0..i-1 form k stages. A few dozen
// units, so O(stages * units^2) is nothing.
std::vector<int> balance_stages(const std::vector<int64_t>& sizes, int stages) {
  const int n = static_cast<int>(sizes.size());
  if (stages < 1 || stages > n) fail("pipeline: {} stages for a model of {} units; use 1 to {} stages", stages, n, n);
  std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + sizes[static_cast<size_t>(i)];
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  const auto N = static_cast<size_t>(n) + 1;
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(stages) + 1, std::vector<int64_t>(N, kInf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(stages) + 1, std::vector<int>(N, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {  // the last stage is units j..i-1
        const int64_t prev = best[static_cast<size_t>(k) - 1][static_cast<size_t>(j)];
        if (prev == kInf) continue;
        const int64_t cost = std::max(prev, prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(j)]);
        // Ties go to the later cut: earlier stages hold the embeddings.
        if (cost <= best[static_cast<size_t>(k)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(i)] = cost;
          cut[static_cast<size_t>(k)][static_cast<size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<int> bounds(static_cast<size_t>(stages) + 1, n);
  int i = n;
  for (int k = stages; k >= 1; --k) {
    i = cut[static_cast<size_t>(k)][static_cast<size_t>(i)];
    bounds[static_cast<size_t>(k) - 1] = i;
  }
  return bounds;
}

}  // namespace ft
