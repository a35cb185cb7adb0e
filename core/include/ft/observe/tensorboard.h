// TensorBoard event files, written without a protobuf dependency.
//
// An event file is a sequence of TFRecords, each holding one serialized
// tensorflow.Event protobuf:
//   record = uint64 length (little-endian) | uint32 masked_crc32c(length bytes)
//          | data | uint32 masked_crc32c(data)
// The Events are hand-encoded (field numbers from tensorflow/core/util/event.proto
// and summary.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2"; every later one a
// single scalar. TensorBoard reads any file whose name contains "tfevents".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace ft {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
uint32_t crc32c(const void* data, std::size_t size);

/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, std::size_t size);

/// The serialized Event of one scalar (exposed for tests).
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

/// One event file. Not thread-safe; the EventLog (rank 0) owns it.
class TensorBoardWriter {
 public:
  /// Creates `dir` if needed and a new file
  /// events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n> in it (n: the
  /// first number not taken), starting with the file_version record.
  /// Throws ft::Error naming runtime.tensorboard_dir when it cannot.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Appends one scalar and flushes it to the OS, so a crash loses nothing
  /// already written. Throws ft::Error naming the file on a write error.
  void add_scalar(const std::string& tag, double value, int64_t step);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ft
