// pytorch_model.bin via LibTorch's unpickler, with clear errors for what it cannot read.
#include "ft/io/torch_bin.h"

#include <cstring>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"

namespace ft {
namespace {

constexpr const char* kConvertHint =
    "convert it in Python with safetensors.torch.save_file({k: v.contiguous() for k, v in sd.items()}, "
    "'model.safetensors')";

// c10::Error messages carry a backtrace and several lines; keep the first.
std::string first_line(const char* message) {
  std::string s = message ? message : "";
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

}  // namespace

TensorList load_pytorch_bin(const std::string& path) {
  const std::string bytes = fs::read_file(path);
  // A zip archive starts with a local file header (or, when empty, the end record).
  const bool zip = bytes.size() >= 4 && (std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0 ||
                                         std::memcmp(bytes.data(), "PK\x05\x06", 4) == 0);
  if (!zip) {
    // The legacy format is a pickle stream: protocol opcode 0x80 first.
    if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80)
      fail("{}: legacy (non-zip) torch.save format, which LibTorch cannot read; re-save it with "
           "torch.save(sd, path, _use_new_zipfile_serialization=True) or {}",
           path, kConvertHint);
    fail("{}: not a PyTorch checkpoint (no zip or pickle signature); expected a torch.save file or use "
         "model.safetensors",
         path);
  }

  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    fail("{}: LibTorch cannot read this torch.save file ({}); it reads only a plain dict of two or more tensors, "
         "not an OrderedDict state_dict(), a one-entry dict or nn.Parameter values; {}",
         path, first_line(e.what_without_backtrace()), kConvertHint);
  } catch (const std::exception& e) {
    fail("{}: LibTorch cannot read this torch.save file ({}); {}", path, first_line(e.what()), kConvertHint);
  }

  if (!value.isGenericDict())
    fail("{}: expected a dict of tensors, found a {}; {}", path, value.tagKind(), kConvertHint);
  TensorList out;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString())
      fail("{}: expected string keys, found a {} key; {}", path, item.key().tagKind(), kConvertHint);
    const std::string name = item.key().toStringRef();
    if (!item.value().isTensor())
      fail("{}: entry '{}' is a {}, not a tensor (nested state dicts are not supported); {}", path, name,
           item.value().tagKind(), kConvertHint);
    out.emplace_back(name, item.value().toTensor().to(at::kCPU).contiguous());
  }
  return out;
}

void save_pytorch_bin(const std::string& path, const TensorList& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) {
    if (dict.contains(name)) fail("{}: duplicate tensor name '{}'", path, name);
    dict.insert(name, tensor.to(at::kCPU).contiguous());
  }
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  fs::write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

}  // namespace ft
