// Fuzz target: the safetensors reader (ft/io/safetensors.h) on arbitrary bytes.
//
// Every input goes through load_bytes and, written to a temp file, through
// load(path): both must agree (same tensors or the same ft::Error line).
// What loads must survive serialize -> load_bytes unchanged, and serialize
// must be idempotent (the writer's layout is canonical).
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <ATen/ATen.h>

#include "ft/base/error.h"
#include "ft/io/safetensors.h"
#include "fuzz_util.h"

namespace st = ft::safetensors;

namespace {

// tmpfs when there is one: one small file per input, rewritten each time.
const std::string& temp_path() {
  static const std::string path = [] {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::is_directory("/dev/shm", ec)
                                          ? std::filesystem::path("/dev/shm")
                                          : std::filesystem::temp_directory_path();
    return (dir / ("ft_fuzz_safetensors_" + std::to_string(::getpid()) + ".safetensors")).string();
  }();
  return path;
}

struct Outcome {
  bool ok = false;
  std::string error;
  st::TensorList tensors;
};

template <typename F>
Outcome attempt(F&& f) {
  Outcome o;
  try {
    o.tensors = f();
    o.ok = true;
  } catch (const ft::Error& e) {
    ft_fuzz::rejected(e);
    o.error = e.what();
  }
  return o;
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

void check_same(const st::TensorList& a, const st::TensorList& b, const char* what) {
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, t] : a) by_name.emplace(name, t);
  ft_fuzz::check(by_name.size() == a.size() && a.size() == b.size(), what);
  for (const auto& [name, t] : b) {
    const auto it = by_name.find(name);
    ft_fuzz::check(it != by_name.end() && same_bytes(it->second, t), what);
  }
}

int one_input(const uint8_t* data, size_t size) {
  const std::string bytes(ft_fuzz::as_view(data, size));
  const std::string& path = temp_path();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) ft_fuzz::bug("cannot write " + path);
  }
  const Outcome from_bytes = attempt([&] { return st::load_bytes(bytes, path); });
  const Outcome from_file = attempt([&] { return st::load(path); });
  std::filesystem::remove(path);
  if (from_bytes.ok != from_file.ok || from_bytes.error != from_file.error)
    ft_fuzz::bug("load_bytes and load disagree: '" + from_bytes.error + "' vs '" + from_file.error + "'");
  if (!from_bytes.ok) return 0;
  check_same(from_bytes.tensors, from_file.tensors, "load_bytes and load return different tensors");

  // Accepted input: the header is valid, so the length prefix is in range.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const st::Header header = st::parse_header(bytes.substr(8, n), bytes.size() - 8 - n, path);
  ft_fuzz::check(header.entries.size() == from_bytes.tensors.size(), "header and load disagree on the count");
  for (const auto& [name, t] : from_bytes.tensors) {
    const st::Entry* e = header.find(name);
    ft_fuzz::check(e != nullptr && e->end - e->begin == t.nbytes() && t.is_contiguous(),
                   "a loaded tensor does not match its header entry");
  }

  std::string written;
  try {
    written = st::serialize(from_bytes.tensors, header.metadata);
  } catch (const ft::Error& e) {
    ft_fuzz::bug(std::string("serialize rejects what load accepted: ") + e.what());
  }
  const Outcome again = attempt([&] { return st::load_bytes(written, "rewritten"); });
  if (!again.ok) ft_fuzz::bug("load_bytes rejects what serialize wrote: " + again.error);
  check_same(from_bytes.tensors, again.tensors, "serialize -> load_bytes changed the tensors");
  ft_fuzz::check(st::serialize(again.tensors, header.metadata) == written, "serialize is not idempotent");
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ft_fuzz::run_input(ft_fuzz::kSmallStack, [&] { one_input(data, size); });
  return 0;
}
