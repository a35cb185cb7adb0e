#include "ft/observe/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "ft/base/error.h"

namespace ft {
namespace {

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf wire format: a key is (field << 3) | wire type.
enum WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, WireType type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

template <typename T>
void put_little_endian(std::string& out, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 Linux are little-endian
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_little_endian(e, wall_time);
  put_key(e, 2, kVarint);
  put_varint(e, static_cast<uint64_t>(step));  // int64: negatives as 10-byte two's complement
  return e;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, std::size_t size) {
  const auto& table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, std::size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, kFixed32);
  put_little_endian(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("runtime.tensorboard_dir {}: cannot create it: {}", dir.string(), ec.message());
  const double now = unix_seconds();
  const std::string base = fmt::format("events.out.tfevents.{}.{}.{}", static_cast<int64_t>(now), hostname(), ::getpid());
  // O_EXCL: two writers in one process and second never share a file.
  for (int n = 0; !file_; ++n) {
    path_ = dir / fmt::format("{}.{}", base, n);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && n < 1000) continue;
    if (fd < 0) fail("runtime.tensorboard_dir {}: cannot create {}: {}", dir.string(), path_.string(), std::strerror(errno));
    file_ = ::fdopen(fd, "wb");
    if (!file_) {
      ::close(fd);
      fail("runtime.tensorboard_dir {}: cannot open {}", dir.string(), path_.string());
    }
  }
  std::string first = event_header(now, 0);
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  write_record(encode_scalar_event(unix_seconds(), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_little_endian(record, static_cast<uint64_t>(data.size()));
  put_little_endian(record, masked_crc32c(record.data(), 8));
  record += data;
  put_little_endian(record, masked_crc32c(data.data(), data.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    fail("{}: cannot write TensorBoard event: {}", path_.string(), std::strerror(errno));
  }
}

}  // namespace ft
