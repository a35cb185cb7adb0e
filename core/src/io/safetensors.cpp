// safetensors: validating reader, reference-compatible writer (see ft/io/safetensors.h).
#include "ft/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <system_error>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/base/fs.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; add byte swapping");

namespace ft::safetensors {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit

struct DtypeInfo {
  const char* name;
  int rank;  // the reference's Dtype enum order; the writer sorts by it, descending
  c10::ScalarType type;
  std::size_t size;
};

// Supported dtypes (all LibTorch 1.13 has a matching type for).
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 0, at::kBool, 1}, {"U8", 1, at::kByte, 1},      {"I8", 2, at::kChar, 1},
    {"I16", 5, at::kShort, 2}, {"F16", 7, at::kHalf, 2},     {"BF16", 8, at::kBFloat16, 2},
    {"I32", 9, at::kInt, 4},   {"F32", 11, at::kFloat, 4},   {"F64", 12, at::kDouble, 8},
    {"I64", 13, at::kLong, 8},
};
// Valid safetensors dtypes that LibTorch 1.13 cannot represent.
constexpr const char* kUnsupportedDtypes[] = {"U16", "U32", "U64", "F8_E5M2", "F8_E4M3"};

const DtypeInfo* dtype_by_name(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeInfo* dtype_by_type(c10::ScalarType type) {
  for (const auto& d : kDtypes)
    if (type == d.type) return &d;
  return nullptr;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A header value for an error message: short, and never a deep recursion
// (dump() recurses once per nesting level; a 100 MB header can nest
// millions deep and overflow the stack).
bool within_depth(const json& v, int depth) {
  if (!v.is_structured()) return true;
  if (depth == 0) return false;
  for (const json& item : v)
    if (!within_depth(item, depth - 1)) return false;
  return true;
}

std::string brief(const json& v) {
  if (!within_depth(v, 3)) return fmt::format("a deeply nested {}", v.type_name());
  std::string s = v.dump();
  if (s.size() > 80) {
    std::size_t cut = 77;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    s = s.substr(0, cut) + "...";
  }
  return s;
}

// Non-negative JSON integer that fits in int64 (torch's size type), or fail.
uint64_t as_offset_or_dim(const json& v, const std::string& file, const std::string& tensor, const char* what) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor '{}': {} value {} is too large", file, tensor, what, u);
    return u;
  }
  if (v.is_number_integer()) fail("{}: tensor '{}': {} value {} is negative", file, tensor, what, v.get<int64_t>());
  fail("{}: tensor '{}': {} must hold integers, got {}", file, tensor, what, brief(v));
}

Entry parse_entry(const std::string& name, const json& value, uint64_t buffer_size, const std::string& file) {
  if (!value.is_object())
    fail("{}: tensor '{}': expected an object with dtype, shape, data_offsets, got {}", file, name, brief(value));
  for (const auto& item : value.items()) {
    const std::string& key = item.key();
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail("{}: tensor '{}': unknown key '{}' (expected dtype, shape, data_offsets)", file, name, key);
  }
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) fail("{}: tensor '{}': missing '{}'", file, name, key);

  Entry e;
  e.name = name;
  const json& dtype = value["dtype"];
  if (!dtype.is_string()) fail("{}: tensor '{}': dtype must be a string, got {}", file, name, brief(dtype));
  e.dtype = dtype.get<std::string>();
  const DtypeInfo* info = dtype_by_name(e.dtype);
  if (!info) {
    for (const char* u : kUnsupportedDtypes)
      if (e.dtype == u) fail("{}: tensor '{}': dtype {} is not supported by LibTorch 1.13", file, name, e.dtype);
    fail("{}: tensor '{}': unknown dtype '{}' (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)", file, name,
         e.dtype);
  }
  e.scalar_type = info->type;

  const json& shape = value["shape"];
  if (!shape.is_array()) fail("{}: tensor '{}': shape must be a list of integers, got {}", file, name, brief(shape));
  uint64_t numel = 1;
  for (const json& dim : shape) {
    const uint64_t d = as_offset_or_dim(dim, file, name, "shape");
    if (__builtin_mul_overflow(numel, d, &numel) || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor '{}': shape {} has more elements than can be addressed", file, name, brief(shape));
    e.shape.push_back(static_cast<int64_t>(d));
  }

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail("{}: tensor '{}': data_offsets must be [begin, end], got {}", file, name, brief(offsets));
  e.begin = as_offset_or_dim(offsets[0], file, name, "data_offsets");
  e.end = as_offset_or_dim(offsets[1], file, name, "data_offsets");
  if (e.end < e.begin) fail("{}: tensor '{}': data_offsets end {} is before begin {}", file, name, e.end, e.begin);
  if (e.end > buffer_size)
    fail("{}: tensor '{}': data_offsets end {} is past the end of the data buffer ({} bytes); the file is truncated "
         "or corrupt",
         file, name, e.end, buffer_size);
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(info->size), &nbytes) || nbytes != e.end - e.begin)
    fail("{}: tensor '{}': data_offsets span {} bytes but {} {} needs {} x {}", file, name, e.end - e.begin, e.dtype,
         brief(shape), numel, info->size);
  return e;
}

// Fills `dst` with `size` bytes at `offset` of the source.
using ReadAt = std::function<void(uint64_t offset, void* dst, std::size_t size)>;

Header read_header_from(const std::string& file, uint64_t file_size, const ReadAt& read_at) {
  if (file_size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", file, file_size);
  unsigned char len_bytes[8];
  read_at(0, len_bytes, 8);
  const uint64_t n = read_u64_le(len_bytes);
  if (n > kMaxHeaderBytes)
    fail("{}: not a safetensors file: header length {} is larger than the 100 MB limit", file, n);
  if (n > file_size - 8)
    fail("{}: truncated or not a safetensors file: header length {} runs past the end of the file ({} bytes)", file, n,
         file_size);
  std::string header(n, '\0');
  read_at(8, header.data(), n);
  return parse_header(header, file_size - 8 - n, file);
}

at::Tensor read_tensor(const Entry& e, uint64_t data_start, const std::string& file, const ReadAt& read_at) {
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.scalar_type));
  const uint64_t size = e.end - e.begin;
  if (size > 0) read_at(data_start + e.begin, t.data_ptr(), size);
  if (e.scalar_type == at::kBool) {
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    for (uint64_t i = 0; i < size; ++i)
      if (p[i] > 1) fail("{}: tensor '{}': BOOL byte {} has value {} (must be 0 or 1)", file, e.name, i, int(p[i]));
  }
  return t;
}

class File {
 public:
  explicit File(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) fail("cannot read {}: {}", path, errno_text(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot read {}: {}", path, errno_text(errno));
    if (S_ISDIR(st.st_mode)) fail("cannot read {}: {}", path, errno_text(EISDIR));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  uint64_t size() const { return size_; }
  ReadAt reader() const {
    return [this](uint64_t offset, void* dst, std::size_t size) {
      auto* p = static_cast<char*>(dst);
      while (size > 0) {
        const ssize_t n = ::pread(fd_, p, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("cannot read {}: {}", path_, errno_text(errno));
        if (n == 0) fail("{}: file shrank while being read", path_);
        p += n;
        offset += static_cast<uint64_t>(n);
        size -= static_cast<std::size_t>(n);
      }
    };
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

ReadAt bytes_reader(const std::string& bytes) {
  return [&bytes](uint64_t offset, void* dst, std::size_t size) { std::memcpy(dst, bytes.data() + offset, size); };
}

// JSON string the way serde_json writes it (the reference writer): raw UTF-8,
// short escapes for \b \f \n \r \t, \u00xx for other control characters.
void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  out += '"';
}

// What serialize/save write: the 8-byte length + padded header, then the
// tensors' bytes in `ordered`.
struct Plan {
  std::string prefix;
  std::vector<at::Tensor> ordered;  // CPU, contiguous
};

Plan make_plan(const TensorList& tensors, const std::map<std::string, std::string>& metadata) {
  struct Item {
    const std::string* name;
    const DtypeInfo* dtype;
    at::Tensor tensor;
  };
  std::vector<Item> items;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    if (!seen.insert(name).second) fail("safetensors: duplicate tensor name '{}'", name);
    if (name == "__metadata__") fail("safetensors: '__metadata__' is reserved and cannot name a tensor");
    if (!tensor.defined()) fail("safetensors: tensor '{}' is undefined", name);
    const DtypeInfo* dtype = dtype_by_type(tensor.scalar_type());
    if (!dtype) fail("safetensors: tensor '{}' has dtype {} which safetensors cannot store", name, c10::toString(tensor.scalar_type()));
    items.push_back({&name, dtype, tensor.to(at::kCPU).contiguous()});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.dtype->rank != b.dtype->rank) return a.dtype->rank > b.dtype->rank;
    return *a.name < *b.name;
  });

  Plan plan;
  std::string header = "{";
  uint64_t offset = 0;
  for (const Item& item : items) {
    if (header.size() > 1) header += ',';
    append_json_string(header, *item.name);
    header += ":{\"dtype\":\"";
    header += item.dtype->name;
    header += "\",\"shape\":[";
    for (int64_t i = 0; i < item.tensor.dim(); ++i) {
      if (i) header += ',';
      header += std::to_string(item.tensor.size(i));
    }
    const uint64_t nbytes = item.tensor.nbytes();
    header += fmt::format("],\"data_offsets\":[{},{}]}}", offset, offset + nbytes);
    offset += nbytes;
    plan.ordered.push_back(item.tensor);
  }
  if (!metadata.empty()) {
    if (header.size() > 1) header += ',';
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      first = false;
      append_json_string(header, key);
      header += ':';
      append_json_string(header, value);
    }
    header += '}';
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');

  uint64_t n = header.size();
  plan.prefix.resize(8);
  for (int i = 0; i < 8; ++i, n >>= 8) plan.prefix[i] = static_cast<char>(n & 0xff);
  plan.prefix += header;
  return plan;
}

}  // namespace

uint64_t Entry::numel() const {
  uint64_t n = 1;
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

const Entry* Header::find(const std::string& name) const {
  for (const Entry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

Header parse_header(const std::string& header_json, uint64_t buffer_size, const std::string& file) {
  // nlohmann keeps one of two equal keys silently; track keys per open object.
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t check_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second) {
        if (depth <= 1) fail("{}: duplicate tensor name '{}' in the header", file, key);
        fail("{}: duplicate key '{}' in the header", file, key);
      }
    }
    return true;
  };
  json root;
  try {
    root = json::parse(header_json, check_duplicates);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON ({})", file, e.what());
  }
  if (!root.is_object()) fail("{}: header must be a JSON object, got {}", file, root.type_name());

  Header h;
  h.buffer_size = buffer_size;
  h.data_start = 8 + header_json.size();
  for (const auto& item : root.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) fail("{}: __metadata__ must be an object of strings, got {}", file, brief(item.value()));
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string())
          fail("{}: __metadata__ value of '{}' must be a string, got {}", file, m.key(), brief(m.value()));
        h.metadata.emplace(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    h.entries.push_back(parse_entry(item.key(), item.value(), buffer_size, file));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The format requires the tensors to tile the buffer exactly: no overlap, no hole.
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : h.entries) {
    if (e.begin < covered)
      fail("{}: tensors '{}' and '{}' overlap (bytes {}..{} and {}..{})", file, previous->name, e.name, previous->begin,
           previous->end, e.begin, e.end);
    if (e.begin > covered)
      fail("{}: hole in the data buffer: bytes {}..{} before tensor '{}' belong to no tensor", file, covered, e.begin,
           e.name);
    covered = e.end;
    previous = &e;
  }
  if (covered != buffer_size)
    fail("{}: hole in the data buffer: the last {} bytes ({}..{}) belong to no tensor", file, buffer_size - covered,
         covered, buffer_size);
  return h;
}

Header read_header(const std::string& path) {
  const File file(path);
  return read_header_from(path, file.size(), file.reader());
}

TensorList load(const std::string& path) {
  const File file(path);
  const ReadAt read_at = file.reader();
  const Header h = read_header_from(path, file.size(), read_at);
  TensorList out;
  out.reserve(h.entries.size());
  for (const Entry& e : h.entries) out.emplace_back(e.name, read_tensor(e, h.data_start, path, read_at));
  return out;
}

TensorList load_bytes(const std::string& bytes, const std::string& name_for_errors) {
  const ReadAt read_at = bytes_reader(bytes);
  const Header h = read_header_from(name_for_errors, bytes.size(), read_at);
  TensorList out;
  out.reserve(h.entries.size());
  for (const Entry& e : h.entries) out.emplace_back(e.name, read_tensor(e, h.data_start, name_for_errors, read_at));
  return out;
}

std::map<std::string, std::string> metadata(const std::string& path) { return read_header(path).metadata; }

std::string serialize(const TensorList& tensors, const std::map<std::string, std::string>& metadata) {
  const Plan plan = make_plan(tensors, metadata);
  std::size_t total = plan.prefix.size();
  for (const at::Tensor& t : plan.ordered) total += t.nbytes();
  std::string out;
  out.reserve(total);
  out += plan.prefix;
  for (const at::Tensor& t : plan.ordered)
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

void save(const std::string& path, const TensorList& tensors, const std::map<std::string, std::string>& metadata) {
  const Plan plan = make_plan(tensors, metadata);
  fs::write_file_atomic(path, [&](const fs::ByteSink& sink) {
    sink(plan.prefix.data(), plan.prefix.size());
    for (const at::Tensor& t : plan.ordered)
      if (t.nbytes() > 0) sink(t.data_ptr(), t.nbytes());
  });
}

std::string dtype_name(c10::ScalarType type) {
  const DtypeInfo* d = dtype_by_type(type);
  if (!d) fail("safetensors cannot store dtype {}", c10::toString(type));
  return d->name;
}

}  // namespace ft::safetensors
