// ONNX graph -> BertModel weights and config (ft/model/onnx_import.h). The model
// is read with the ONNX project's own protobuf definitions (libonnx_proto,
// the copy Debian's LibTorch loads too).
#include "ft/model/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "ft/base/error.h"
#include "text_affix.h"

namespace ft {
namespace {

namespace fsys = std::filesystem;

// ONNX Runtime's contrib kernels: what its transformer optimizer fuses a
// BERT into. Their weights are packed (QKV in one matrix) and their
// semantics are ORT's, not transformers'.
const std::set<std::string> kFusedOps = {"Attention", "MultiHeadAttention", "PackedAttention", "PackedMultiHeadAttention",
                                         "GroupQueryAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
                                         "SkipSimplifiedLayerNormalization", "FastGelu", "BiasGelu", "BiasSoftmax"};
const std::set<std::string> kQuantOps = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                                         "QLinearMatMul", "MatMulNBits", "QAttention", "QGemm", "DynamicQuantizeMatMul",
                                         "MatMulIntegerToFloat", "QOrderedMatMul"};

class Graph {
 public:
  Graph(const onnx::ModelProto& model, std::string path) : g_(model.graph()), path_(std::move(path)) {
    for (const auto& t : g_.initializer()) init_[t.name()] = &t;
    for (const auto& n : g_.node()) {
      for (const auto& o : n.output()) producer_[o] = &n;
      for (const auto& i : n.input()) consumers_[i].push_back(&n);
    }
  }

  const onnx::GraphProto& proto() const { return g_; }
  const std::string& path() const { return path_; }
  const onnx::TensorProto* initializer(const std::string& name) const {
    auto it = init_.find(name);
    return it == init_.end() ? nullptr : it->second;
  }
  const onnx::NodeProto* producer(const std::string& value) const {
    auto it = producer_.find(value);
    return it == producer_.end() ? nullptr : it->second;
  }
  const std::vector<const onnx::NodeProto*>& consumers(const std::string& value) const {
    static const std::vector<const onnx::NodeProto*> none;
    auto it = consumers_.find(value);
    return it == consumers_.end() ? none : it->second;
  }
  const std::map<std::string, const onnx::TensorProto*>& initializers() const { return init_; }

  // A constant's tensor: an initializer, or a Constant node's value.
  const onnx::TensorProto* constant(const std::string& value) const {
    if (const auto* t = initializer(value)) return t;
    const auto* n = producer(value);
    if (!n || n->op_type() != "Constant") return nullptr;
    for (const auto& a : n->attribute())
      if (a.name() == "value" && a.has_t()) return &a.t();
    return nullptr;
  }
  // A constant's numbers (int64, int32, float or double), flattened.
  std::optional<std::vector<double>> numbers(const std::string& value) const;

  // The tensor's bytes, wherever they are (inline, typed fields, external file).
  at::Tensor tensor(const onnx::TensorProto& t) const;

 private:
  std::string external_bytes(const onnx::TensorProto& t) const;

  const onnx::GraphProto& g_;
  std::string path_;
  std::map<std::string, const onnx::TensorProto*> init_;
  std::map<std::string, const onnx::NodeProto*> producer_;
  std::map<std::string, std::vector<const onnx::NodeProto*>> consumers_;
};

std::string Graph::external_bytes(const onnx::TensorProto& t) const {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = std::stoll(kv.value());
    if (kv.key() == "length") length = std::stoll(kv.value());
  }
  const fsys::path file = fsys::path(path_).parent_path() / location;
  std::ifstream in(file, std::ios::binary);
  if (location.empty() || !in) {
    fail("{}: tensor '{}' keeps its data in external file '{}', which is not readable; keep the export's files together",
         path_, t.name(), file.string());
  }
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  if (length < 0) length = size - offset;
  if (offset < 0 || offset + length > size) {
    fail("{}: tensor '{}' reads bytes {}..{} of {}, which has {}; the export is incomplete", path_, t.name(), offset,
         offset + length, file.string(), size);
  }
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  return bytes;
}

at::Tensor Graph::tensor(const onnx::TensorProto& t) const {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  at::ScalarType type;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: type = at::kFloat; break;
    case onnx::TensorProto::FLOAT16: type = at::kHalf; break;
    case onnx::TensorProto::BFLOAT16: type = at::kBFloat16; break;
    case onnx::TensorProto::DOUBLE: type = at::kDouble; break;
    case onnx::TensorProto::INT64: type = at::kLong; break;
    case onnx::TensorProto::INT32: type = at::kInt; break;
    default:
      fail("{}: tensor '{}' has ONNX data type {}; ft imports float32, float16 and bfloat16 weights", path_, t.name(),
           t.data_type());
  }
  at::Tensor out = at::empty(dims, at::TensorOptions().dtype(type));
  const size_t bytes = static_cast<size_t>(n) * out.element_size();
  const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  if (external || t.has_raw_data()) {
    const std::string data = external ? external_bytes(t) : t.raw_data();
    if (data.size() != bytes) {
      fail("{}: tensor '{}' holds {} bytes, its shape needs {}; the file is damaged", path_, t.name(), data.size(), bytes);
    }
    std::memcpy(out.data_ptr(), data.data(), bytes);  // ONNX stores little-endian, as x86 and ARM run
    return out;
  }
  auto fill = [&](const auto& field, auto cast) {
    if (field.size() != n) fail("{}: tensor '{}' holds {} values, its shape needs {}", path_, t.name(), field.size(), n);
    for (int64_t i = 0; i < n; ++i) cast(i, field.Get(static_cast<int>(i)));
  };
  switch (type) {
    case at::kFloat: fill(t.float_data(), [&](int64_t i, float v) { out.data_ptr<float>()[i] = v; }); break;
    case at::kDouble: fill(t.double_data(), [&](int64_t i, double v) { out.data_ptr<double>()[i] = v; }); break;
    case at::kLong: fill(t.int64_data(), [&](int64_t i, int64_t v) { out.data_ptr<int64_t>()[i] = v; }); break;
    case at::kInt: fill(t.int32_data(), [&](int64_t i, int32_t v) { out.data_ptr<int32_t>()[i] = v; }); break;
    default:  // float16 / bfloat16 bits, one per int32_data entry
      fill(t.int32_data(), [&](int64_t i, int32_t v) {
        const auto bits = static_cast<uint16_t>(v);
        std::memcpy(static_cast<char*>(out.data_ptr()) + 2 * i, &bits, 2);
      });
  }
  return out;
}

std::optional<std::vector<double>> Graph::numbers(const std::string& value) const {
  const auto* t = constant(value);
  if (!t) return std::nullopt;
  const at::Tensor v = tensor(*t).to(at::kDouble).contiguous();
  return std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
}

// The refusals that do not depend on names.
void refuse_unmappable(const Graph& g) {
  for (const auto& n : g.proto().node()) {
    if (kQuantOps.count(n.op_type())) {
      fail("{}: a quantised graph (node {} '{}'); ft imports float exports: export the model again without "
           "quantisation",
           g.path(), n.op_type(), n.name());
    }
    if (kFusedOps.count(n.op_type()) || n.domain() == "com.microsoft") {
      fail("{}: node {} '{}' is a fused ONNX Runtime kernel (the transformer optimizer's output); import the "
           "unoptimised export",
           g.path(), n.op_type(), n.name());
    }
    if (n.op_type() == "CumSum") {
      fail("{}: its position ids are computed from the input (CumSum), as RoBERTa's are; ft import onnx maps BERT "
           "exports",
           g.path());
    }
  }
  // UINT4 / INT4 are 21 / 22 (ONNX 1.16), newer than Debian's onnx.proto.
  constexpr int kUint4 = 21, kInt4 = 22;
  for (const auto& [name, t] : g.initializers()) {
    const int type = t->data_type();
    const bool nibble = type == kUint4 || type == kInt4;
    if (type == onnx::TensorProto::INT8 || type == onnx::TensorProto::UINT8 || nibble) {
      fail("{}: a quantised graph (weight '{}' is {}-bit integer); ft imports float exports: export the model again "
           "without quantisation",
           g.path(), name, nibble ? 4 : 8);
    }
  }
}

// The weight of each Linear: MatMul(x, W[in, out]) + b, or Gemm, or MatMul
// with a Transpose of an [out, in] weight. Named by its HF-named bias (or its
// own HF name); returned in HF's [out, in] layout.
std::map<std::string, at::Tensor> linear_weights(const Graph& g, const std::string& prefix) {
  std::map<std::string, at::Tensor> out;
  for (const auto& n : g.proto().node()) {
    const bool gemm = n.op_type() == "Gemm";
    if ((n.op_type() != "MatMul" && !gemm) || n.input_size() < 2) continue;
    const onnx::TensorProto* w = g.initializer(n.input(1));
    bool out_in = false;  // stored as [out, in] already
    if (!w) {
      const auto* t = g.producer(n.input(1));
      if (!t || t->op_type() != "Transpose" || !g.initializer(t->input(0))) continue;  // activations: attention's products
      w = g.initializer(t->input(0));
      out_in = true;
    }
    if (gemm) {
      for (const auto& a : n.attribute())
        if (a.name() == "transB" && a.i() == 1) out_in = true;
    }
    std::string bias;
    if (gemm && n.input_size() > 2) bias = n.input(2);
    for (const auto* c : g.consumers(n.output(0))) {
      if (!gemm && c->op_type() == "Add") {
        for (const auto& in : c->input())
          if (ends_with(in, ".bias") && g.initializer(in)) bias = in;
      }
    }
    std::string name;
    if (ends_with(w->name(), ".weight")) {
      name = w->name();
    } else if (ends_with(bias, ".bias")) {
      name = bias.substr(0, bias.size() - 5) + ".weight";
    } else {
      fail("{}: {} '{}' multiplies by weight '{}', which neither carries an HF name nor is added to an HF-named bias; "
           "ft import onnx maps exports that keep transformers' names (torch.onnx, optimum, transformers.js)",
           g.path(), n.op_type(), n.name(), w->name());
    }
    if (!starts_with(name, prefix)) {
      fail("{}: weight '{}' is outside the BERT encoder; ft import onnx reads base-model exports (AutoModel, "
           "feature-extraction), not task heads",
           g.path(), name);
    }
    at::Tensor t = g.tensor(*w);
    if (t.dim() != 2) fail("{}: weight '{}' of {} '{}' is not a matrix", g.path(), w->name(), n.op_type(), n.name());
    out[name.substr(prefix.size())] = out_in ? t : t.t().contiguous();
  }
  return out;
}

// eps is a float32 in the graph: its shortest decimal is what config.json said.
double shortest_decimal(float f) { return std::stod(fmt::format("{}", f)); }

// The Add that feeds `sqrt` its epsilon (decomposed LayerNorm), or a
// LayerNormalization node's attribute.
std::optional<double> layer_norm_eps(const Graph& g) {
  for (const auto& n : g.proto().node()) {
    if (n.op_type() == "LayerNormalization") {
      for (const auto& a : n.attribute())
        if (a.name() == "epsilon") return shortest_decimal(a.f());
      return 1e-5;  // the operator's default
    }
    if (n.op_type() != "Sqrt") continue;
    const auto* add = g.producer(n.input(0));
    if (!add || add->op_type() != "Add") continue;
    for (const auto& in : add->input()) {
      auto v = g.numbers(in);
      if (v && v->size() == 1) return shortest_decimal(static_cast<float>((*v)[0]));
    }
  }
  return std::nullopt;
}

// Heads: the query is reshaped to [batch, seq, heads, head_dim]; the shape's
// known entries end with heads and head_dim (the rest come from Shape ops).
// transformers 5 reshapes to [..., -1, head_dim]: heads = hidden / head_dim.
std::optional<int64_t> attention_heads(const Graph& g, const std::string& query_bias, int64_t hidden) {
  std::vector<std::string> frontier;
  for (const auto* n : g.consumers(query_bias))
    if (n->op_type() == "Add") frontier.push_back(n->output(0));
  for (const auto& value : frontier) {
    for (const auto* r : g.consumers(value)) {
      if (r->op_type() != "Reshape" || r->input_size() < 2) continue;
      std::vector<double> dims;
      if (auto v = g.numbers(r->input(1))) {
        dims = *v;
      } else if (const auto* cat = g.producer(r->input(1)); cat && cat->op_type() == "Concat") {
        for (const auto& in : cat->input()) {
          const onnx::NodeProto* p = g.producer(in);
          auto v = g.numbers(in);
          if (!v && p && p->op_type() == "Unsqueeze") v = g.numbers(p->input(0));
          if (v) dims.insert(dims.end(), v->begin(), v->end());
        }
      }
      for (size_t i = 1; i < dims.size(); ++i) {
        const auto heads = static_cast<int64_t>(dims[i - 1]), head_dim = static_cast<int64_t>(dims[i]);
        if (heads > 0 && head_dim > 1 && heads * head_dim == hidden) return heads;
        if (heads == -1 && head_dim > 1 && hidden % head_dim == 0 && i + 1 == dims.size()) return hidden / head_dim;
      }
    }
  }
  return std::nullopt;
}

// The ops between the intermediate dense's bias and the next MatMul.
std::set<std::string> activation_ops(const Graph& g, const std::string& bias) {
  std::set<std::string> ops;
  std::vector<std::string> frontier;
  for (const auto* n : g.consumers(bias)) frontier.push_back(n->output(0));
  std::set<std::string> seen;
  while (!frontier.empty() && seen.size() < 32) {
    const std::string v = frontier.back();
    frontier.pop_back();
    if (!seen.insert(v).second) continue;
    for (const auto* c : g.consumers(v)) {
      if (c->op_type() == "MatMul" || c->op_type() == "Gemm") continue;
      ops.insert(c->op_type());
      for (const auto& o : c->output()) frontier.push_back(o);
    }
  }
  return ops;
}

}  // namespace

OnnxEncoder read_onnx_encoder(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the ONNX file", path);
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in) || !model.has_graph()) {
    fail("{}: not a readable ONNX model (truncated, or not an .onnx file); fetch or export it again", path);
  }
  const Graph g(model, path);
  refuse_unmappable(g);

  // The encoder's prefix: "" for a BertModel export, "bert." under a task model.
  std::string prefix;
  const onnx::TensorProto* words = nullptr;
  for (const auto& [name, t] : g.initializers()) {
    if (ends_with(name, "embeddings.word_embeddings.weight")) {
      words = t;
      prefix = name.substr(0, name.size() - std::string("embeddings.word_embeddings.weight").size());
    }
  }
  if (!words || (!prefix.empty() && prefix != "bert.")) {
    fail("{}: not a BERT encoder export (no '{}' tensor named embeddings.word_embeddings.weight); ft import onnx "
         "maps BERT graphs whose tensors keep transformers' names",
         path, words ? words->name() : std::string("(none)"));
  }

  std::map<std::string, at::Tensor> found = linear_weights(g, prefix);
  for (const auto& [name, t] : g.initializers()) {
    const bool hf = ends_with(name, ".weight") || ends_with(name, ".bias");
    const std::string local = starts_with(name, prefix) ? name.substr(prefix.size()) : name;
    if (!hf || found.count(local)) continue;
    const bool encoder = starts_with(name, prefix) && (starts_with(local, "embeddings.") ||
                                                       starts_with(local, "encoder.") || starts_with(local, "pooler."));
    if (!encoder) {
      fail("{}: weight '{}' is outside the BERT encoder; ft import onnx reads base-model exports (AutoModel, "
           "feature-extraction), not task heads",
           path, name);
    }
    found[local] = g.tensor(*t);
  }

  OnnxEncoder out;
  BertConfig& c = out.config;
  auto shape = [&](const std::string& name) -> std::vector<int64_t> {
    auto it = found.find(name);
    if (it == found.end()) fail("{}: the graph has no tensor for {}{} (a BERT encoder has one)", path, prefix, name);
    return it->second.sizes().vec();
  };
  c.vocab_size = shape("embeddings.word_embeddings.weight")[0];
  c.hidden_size = shape("embeddings.word_embeddings.weight")[1];
  c.max_position_embeddings = shape("embeddings.position_embeddings.weight")[0];
  c.type_vocab_size = shape("embeddings.token_type_embeddings.weight")[0];
  c.intermediate_size = shape("encoder.layer.0.intermediate.dense.bias")[0];
  c.num_hidden_layers = 0;
  while (found.count(fmt::format("encoder.layer.{}.attention.self.query.bias", c.num_hidden_layers))) ++c.num_hidden_layers;
  const auto heads = attention_heads(g, prefix + "encoder.layer.0.attention.self.query.bias", c.hidden_size);
  if (!heads) {
    fail("{}: cannot find the attention heads (no Reshape of the query to [batch, seq, heads, head_dim] with "
         "constant heads); ft import onnx maps the unfused BERT attention of torch.onnx exports",
         path);
  }
  c.num_attention_heads = *heads;
  const auto eps = layer_norm_eps(g);
  if (!eps) fail("{}: cannot find the LayerNorm epsilon (no LayerNormalization, no Sqrt of variance + eps)", path);
  c.layer_norm_eps = *eps;
  const std::set<std::string> act = activation_ops(g, prefix + "encoder.layer.0.intermediate.dense.bias");
  const bool erf_gelu = act.count("Erf") && !act.count("Tanh");
  if (!erf_gelu && !act.count("Gelu")) {
    std::string ops;
    for (const auto& o : act) ops += (ops.empty() ? "" : ", ") + o;
    fail("{}: the activation after intermediate.dense runs {{{}}}, not erf GELU; ft's BERT runs hidden_act gelu", path,
         ops);
  }
  for (const auto& n : g.proto().node()) {
    if (n.op_type() != "Gelu") continue;
    for (const auto& a : n.attribute())
      if (a.name() == "approximate" && a.s() == "tanh")
        fail("{}: node Gelu '{}' is the tanh approximation (gelu_new); ft's BERT runs hidden_act gelu (erf)", path,
             n.name());
  }
  c.hidden_act = "gelu";
  c.head = BertHead::kSequenceClassification;
  c.validate(path);

  // BertModel's state-dict order; anything left over is not BERT's.
  std::vector<std::string> order = {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                                    "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
                                    "embeddings.LayerNorm.bias"};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                          "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"}) {
      for (const char* p : {"weight", "bias"}) order.push_back(fmt::format("encoder.layer.{}.{}.{}", l, m, p));
    }
  }
  const bool pooler = found.count("pooler.dense.weight") > 0;
  if (pooler) order.insert(order.end(), {"pooler.dense.weight", "pooler.dense.bias"});
  std::set<std::string> taken;
  bool widened = false;
  for (const auto& name : order) {
    auto it = found.find(name);
    if (it == found.end()) fail("{}: the graph has no tensor for {}{} (a BERT encoder has one)", path, prefix, name);
    widened |= it->second.scalar_type() != at::kFloat;
    out.weights.emplace_back(name, it->second.to(at::kFloat).contiguous());
    taken.insert(name);
  }
  for (const auto& [name, t] : found) {
    if (!taken.count(name) && !ends_with(name, "position_ids") && !ends_with(name, "token_type_ids")) {
      fail("{}: tensor '{}{}' is not part of a {}-layer BERT encoder", path, prefix, name, c.num_hidden_layers);
    }
  }
  if (widened) out.notes.push_back("16-bit weights widened to float32");
  if (!pooler) out.notes.push_back("no pooler in the graph (its output is last_hidden_state): a classifier fine-tuned "
                                   "from it starts its pooler afresh, as transformers does");
  return out;
}

}  // namespace ft
