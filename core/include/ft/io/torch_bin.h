// Best-effort reader for PyTorch `pytorch_model.bin` / torch.save files.
//
// LibTorch 1.13's unpickler only understands part of what Python's
// torch.save writes (see design/LIBTORCH-NOTES.md "Reading PyTorch files"):
// the zip format holding a plain dict of two or more tensors. Everything else
// fails with one ft::Error line naming the file and saying how to convert it;
// model.safetensors is the supported format.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ft {

/// Named tensors in a stable order (same type as ft::TensorList, ft/base/types.h).
using TensorList = std::vector<std::pair<std::string, at::Tensor>>;

/// Tensors of a torch.save zip file holding a flat {str: tensor} dict, in the
/// dict's order (CPU, contiguous). Throws ft::Error "<path>: ..." for a
/// missing/unreadable file, the legacy non-zip format, anything LibTorch
/// cannot unpickle (OrderedDict state_dict(), one-entry dicts, nn.Parameter),
/// and non-tensor or non-string-keyed entries.
TensorList load_pytorch_bin(const std::string& path);

/// Writes `tensors` as a zip-format dict readable by load_pytorch_bin and by
/// Python's torch.load (via torch::pickle_save). Atomic (ft::fs). For tests
/// and tools; model exports use safetensors.
void save_pytorch_bin(const std::string& path, const TensorList& tensors);

}  // namespace ft
