// safetensors reader/writer (https://github.com/huggingface/safetensors format).
//
// File layout: u64 little-endian header length N, N bytes of UTF-8 JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {str: str}}, then the byte buffer. Nothing in a file is
// trusted: every size, offset and name is validated before any byte is used,
// and every problem is reported as one ft::Error line naming the file.
//
// Writing is byte-identical to the fixtures in ../shared/fixtures (produced by
// the reference writer): tensors ordered by dtype (the reference's enum order,
// descending: I64 F64 F32 I32 BF16 F16 I16 I8 U8 BOOL) then by name, compact
// JSON with keys "dtype","shape","data_offsets", "__metadata__" (keys sorted)
// after the tensors, the header padded with spaces to a multiple of 8.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ft::safetensors {

/// Named tensors in a stable order; the same type as ft::TensorList (ft/base/types.h).
using TensorList = std::vector<std::pair<std::string, at::Tensor>>;

/// One tensor's header entry. Offsets are relative to the buffer start.
struct Entry {
  std::string name;
  std::string dtype;            ///< as in the file: "F32", "I64", ...
  c10::ScalarType scalar_type;  ///< the matching torch dtype
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t numel() const;
};

/// A validated header.
struct Header {
  std::vector<Entry> entries;                  ///< in buffer order (by begin offset)
  std::map<std::string, std::string> metadata;  ///< "__metadata__", empty when absent
  uint64_t data_start = 0;                     ///< 8 + N: file offset of the buffer
  uint64_t buffer_size = 0;                    ///< bytes after data_start
  /// The entry called `name`, or nullptr.
  const Entry* find(const std::string& name) const;
};

/// Reads and validates the header of `path` without reading the tensor bytes.
/// Rejects (ft::Error "<path>: ..."): files shorter than 8 bytes, N past the
/// end of the file or above 100 MB, non-UTF-8 / non-JSON / non-object
/// headers, unknown dtypes, bad shapes (negative dims, element-count
/// overflow), bad data_offsets (not two non-negative integers, end < begin,
/// past the buffer end, size != numel * dtype size), overlapping tensors,
/// holes (the buffer must be exactly covered, as the format requires),
/// duplicate names, non-string metadata values, unknown entry keys.
Header read_header(const std::string& path);

/// Validates a header already in memory: `header_json` is the N header bytes,
/// `buffer_size` the number of bytes after them. For readers of other sources.
Header parse_header(const std::string& header_json, uint64_t buffer_size, const std::string& name_for_errors);

/// All tensors of `path` (CPU, contiguous, owning memory) in buffer order.
TensorList load(const std::string& path);

/// Same as load() for a whole file already in memory.
TensorList load_bytes(const std::string& bytes, const std::string& name_for_errors);

/// The "__metadata__" map of `path` (empty when absent).
std::map<std::string, std::string> metadata(const std::string& path);

/// The file bytes for `tensors` (any device; copied to CPU). Throws ft::Error
/// on duplicate names, undefined tensors or dtypes safetensors cannot hold.
std::string serialize(const TensorList& tensors, const std::map<std::string, std::string>& metadata = {});

/// Writes serialize(tensors, metadata) to `path` atomically (ft::fs), streaming
/// tensor bytes instead of building the whole file in memory.
void save(const std::string& path, const TensorList& tensors,
          const std::map<std::string, std::string>& metadata = {});

/// "F32" for at::kFloat etc.; throws ft::Error for dtypes safetensors lacks.
std::string dtype_name(c10::ScalarType type);

}  // namespace ft::safetensors
