// DdpOptions: the `strategy.options.*` keys the ddp / ddp_amp strategies take.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ft::ddp {

/// What travels on the wire for gradients (c10d's FP16CompressCommHook idea).
enum class Compression { None, FP16, BF16 };

/// Parsed and validated strategy.options for ddp / ddp_amp.
struct DdpOptions {
  /// strategy.options.bucket_mb: target gradient bucket size, given in MiB
  /// (> 0), held in bytes. Smaller buckets start communication earlier in
  /// backward but pay more per-collective latency; 25 MiB is c10d's default.
  int64_t bucket_bytes = 25LL << 20;
  /// strategy.options.compression: none | fp16 | bf16. Casts each bucket to
  /// 16 bits for the all-reduce; saves bandwidth on NCCL only (ft::Comm
  /// widens 16-bit tensors to fp32 for Gloo), always costs precision.
  Compression compression = Compression::None;
  /// strategy.options.sparse_embedding: average the word-embedding gradient
  /// over the rows some rank looked up only (ft::row_sparse_allreduce_hook;
  /// exact). Its bucket fills last in backward, so it is the communication
  /// backward cannot hide; the rows a step touches are a small part of it.
  bool sparse_embedding = true;

  /// Throws ft::Error naming `strategy.options.<key>` and the allowed values
  /// for a bad value, or naming an unknown key and listing the known ones.
  static DdpOptions parse(const std::map<std::string, std::string>& options);
};

}  // namespace ft::ddp
