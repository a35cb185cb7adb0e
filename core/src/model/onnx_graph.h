// An ONNX graph under construction, private to core/src/model
// (onnx_export.cpp): nodes with unique output names, weights and constants
// as initializers, over the ONNX project's own protobuf classes. In fp16
// mode float weights and constants are stored as float16, so the graph
// computes in half precision.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/onnx_pb.h>

namespace ft {
namespace model_detail {

// An attribute of a node: an int, a float or a list of ints.
struct OnnxAttr {
  std::string name;
  enum Kind { kInt, kFloat, kInts } kind = kInt;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
  static OnnxAttr integer(std::string n, int64_t v) { return {std::move(n), kInt, v, 0, {}}; }
  static OnnxAttr real(std::string n, float v) { return {std::move(n), kFloat, 0, v, {}}; }
  static OnnxAttr list(std::string n, std::vector<int64_t> v) { return {std::move(n), kInts, 0, 0, std::move(v)}; }
};

class OnnxGraphBuilder {
 public:
  OnnxGraphBuilder(onnx::GraphProto& g, bool fp16) : g_(g), fp16_(fp16) {}
  bool fp16() const { return fp16_; }
  // The element type of the graph's float values.
  int float_type() const { return fp16_ ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT; }

  // One node with one output, named after `hint`; returns the output's name.
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& hint,
                   const std::vector<OnnxAttr>& attrs = {}) {
    onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    const std::string out = fmt::format("{}_{}", hint, counter_++);
    n->set_name(out);
    for (const auto& i : inputs) n->add_input(i);
    n->add_output(out);
    for (const auto& a : attrs) {
      onnx::AttributeProto* p = n->add_attribute();
      p->set_name(a.name);
      if (a.kind == OnnxAttr::kInt) {
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(a.i);
      } else if (a.kind == OnnxAttr::kFloat) {
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(a.f);
      } else {
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : a.ints) p->add_ints(v);
      }
    }
    return out;
  }

  // `t` as an initializer named `name`, raw little-endian data: int64 as
  // such, floats in the graph's float type (float32 with `keep_fp32`).
  std::string tensor(const std::string& name, const at::Tensor& t, bool keep_fp32 = false) {
    const bool integral = t.scalar_type() == at::kLong;
    const bool half = !integral && fp16_ && !keep_fp32;
    const at::Tensor c = t.detach().to(at::kCPU, integral ? at::kLong : half ? at::kHalf : at::kFloat).contiguous();
    onnx::TensorProto* p = g_.add_initializer();
    p->set_name(name);
    p->set_data_type(integral ? onnx::TensorProto::INT64 : half ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT);
    for (int64_t d : c.sizes()) p->add_dims(d);
    const auto size = static_cast<size_t>(c.numel()) * c.element_size();
    p->set_raw_data(std::string(static_cast<const char*>(c.data_ptr()), size));
    bytes_ += static_cast<int64_t>(size);
    return name;
  }

  // int64 constants (a 1-D list, or a scalar), shared by value.
  std::string ints(const std::vector<int64_t>& v, bool scalar = false) {
    const std::string key = fmt::format("i{}{}", scalar ? "s" : "", fmt::join(v, "_"));
    if (auto it = constants_.find(key); it != constants_.end()) return it->second;
    onnx::TensorProto* p = g_.add_initializer();
    const std::string name = fmt::format("const_int64_{}", constants_.size());
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) p->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) p->add_int64_data(x);
    return constants_[key] = name;
  }
  std::string int_scalar(int64_t v) { return ints({v}, true); }

  // A scalar constant in the graph's float type (float32 with
  // `keep_fp32`), shared by value.
  std::string real(float v, bool keep_fp32 = false) {
    const std::string key = fmt::format("f{}{}", keep_fp32 ? "32_" : "", v);
    if (auto it = constants_.find(key); it != constants_.end()) return it->second;
    const std::string name = fmt::format("const_float_{}", constants_.size());
    tensor(name, at::scalar_tensor(v, at::kFloat), keep_fp32);
    return constants_[key] = name;
  }

  int64_t bytes() const { return bytes_; }

 private:
  onnx::GraphProto& g_;
  bool fp16_;
  int64_t counter_ = 0, bytes_ = 0;
  std::map<std::string, std::string> constants_;
};

}  // namespace model_detail
}  // namespace ft
