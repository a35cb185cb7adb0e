// HorovodOptions: the `strategy.options.*` keys the horovod strategy takes.
#pragma once

#include <map>
#include <string>

namespace ft::horovod {

/// Parsed and validated strategy.options for horovod.
struct HorovodOptions {
  /// strategy.options.fusion_mb: the tensor-fusion threshold in MiB (>= 0;
  /// 0 turns fusion off: one ring per tensor). Horovod's default is 64.
  double fusion_mb = 64.0;
  /// strategy.options.cycle_ms: how long one cycle of the background thread
  /// collects ready gradients before they are negotiated and reduced
  /// together (>= 0). Matters only with overlap; see docs/dp-horovod.md.
  double cycle_ms = 5.0;
  /// strategy.options.compression: none | fp16 (what the ring puts on the wire).
  bool fp16_compression = false;
  /// strategy.options.overlap: false = reduce every gradient at step()
  /// (DistributedOptimizer's synchronize()); true = enqueue each gradient
  /// from its autograd hook as soon as it is ready, overlapping backward.
  bool overlap = false;

  /// Throws ft::Error naming `strategy.options.<key>` and what is allowed.
  static HorovodOptions parse(const std::map<std::string, std::string>& options);
};

}  // namespace ft::horovod
