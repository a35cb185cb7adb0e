// EncoderModel -> ONNX graph (ft/model/onnx_export.h), from the model's HF-named
// parameters and its family's declarations (ft/model/encoder_family.h): the names
// the checkpoints carry, computed as the family's modules compute them in
// eval mode, over a padded [batch, sequence] batch.
#include "ft/model/onnx_export.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "ft/model/encoder_family.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/base/problem_type.h"
#include "model/backbone.h"
#include "model/backbones/deberta/relative_attention.h"
#include "model/backbones/modernbert/modern_layer.h"
#include "model/onnx_graph.h"

namespace ft {
namespace {

namespace fsys = std::filesystem;
using model_detail::OnnxAttr;
using model_detail::OnnxGraphBuilder;
using Attr = OnnxAttr;

constexpr int kOpset = 17;  // LayerNormalization; ReduceMax and ReduceL2 still take axes as an attribute

void add_value(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name, int elem_type,
               const std::vector<std::string>& dims) {
  onnx::ValueInfoProto* v = list->Add();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  for (const auto& d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

// The encoder and its head, node by node, over the model's parameters.
class Exporter {
 public:
  Exporter(EncoderModel& model, onnx::GraphProto& g, bool fp16) : c_(model.config()), f_(c_.family()), b_(g, fp16) {
    for (const auto& p : model.named_parameters(/*recurse=*/true)) params_.emplace(p.key(), p.value());
  }

  bool has(const std::string& name) const { return params_.count(name) > 0; }
  const at::Tensor& param(const std::string& name) const {
    auto it = params_.find(name);
    if (it == params_.end()) fail("ft export --onnx: the model has no parameter '{}'", name);
    return it->second;
  }
  OnnxGraphBuilder& builder() { return b_; }

  // A parameter as an initializer, once however many nodes read it.
  std::string init(const std::string& name, bool transposed = false) {
    const std::string key = transposed ? name + ".T" : name;
    if (added_.insert(key).second) b_.tensor(key, transposed ? param(name).t() : param(name));
    return key;
  }

  // Linear: x [.., in] @ W^T (+ b), W stored as [in, out].
  std::string linear(const std::string& x, const std::string& module) {
    std::string y = b_.node("MatMul", {x, init(module + ".weight", true)}, module + ".matmul");
    if (has(module + ".bias")) y = b_.node("Add", {y, init(module + ".bias")}, module);
    return y;
  }

  std::string layer_norm(const std::string& x, const std::string& module) {
    std::vector<std::string> in = {x, init(module + ".weight")};
    if (has(module + ".bias")) in.push_back(init(module + ".bias"));
    return b_.node("LayerNormalization", in, module,
                   {Attr::integer("axis", -1), Attr::real("epsilon", static_cast<float>(c_.layer_norm_eps))});
  }

  // gelu(x) = x (1 + erf(x / sqrt 2)) / 2, transformers' exact form.
  std::string gelu(const std::string& x, const std::string& hint) {
    const std::string e = b_.node("Erf", {b_.node("Mul", {x, b_.real(0.70710678118654752F)}, hint)}, hint);
    const std::string y = b_.node("Mul", {x, b_.node("Add", {e, b_.real(1.0F)}, hint)}, hint);
    return b_.node("Mul", {y, b_.real(0.5F)}, hint + ".gelu");
  }

  // The sequence length (int64 scalar) and the positions 0..S-1 [S].
  std::string seq_len() {
    if (seq_len_.empty()) {
      seq_len_ = b_.node("Gather", {b_.node("Shape", {"input_ids"}, "shape"), b_.int_scalar(1)}, "seq_len",
                         {Attr::integer("axis", 0)});
    }
    return seq_len_;
  }
  std::string positions() {
    if (positions_.empty()) positions_ = b_.node("Range", {b_.int_scalar(0), seq_len(), b_.int_scalar(1)}, "positions");
    return positions_;
  }
  // p_i - p_j [S, S].
  std::string distances() {
    return b_.node("Sub", {b_.node("Unsqueeze", {positions(), b_.ints({1})}, "p_i"),
                           b_.node("Unsqueeze", {positions(), b_.ints({0})}, "p_j")},
                   "distances");
  }

  // [B, S] ids -> [B, S, width]: words, absolute positions (RoBERTa's from
  // padding_idx + 1: ft numbers a right-padded row's tokens as transformers
  // numbers them), token types, the norm, ELECTRA's projection.
  std::string embeddings(bool token_type_input) {
    const std::string e = f_.prefix() + "embeddings.";
    std::string x = b_.node("Gather", {init(f_.word_embeddings()), "input_ids"}, e + "words");
    if (has(e + "position_embeddings.weight")) {
      const int64_t first = model_detail::backbone_of(c_.model_type, "ft export --onnx").first_position(c_);
      const std::string ids = first ? b_.node("Add", {positions(), b_.int_scalar(first)}, "position_ids") : positions();
      x = b_.node("Add", {x, b_.node("Gather", {init(e + "position_embeddings.weight"), ids}, e + "positions")}, "embed");
    }
    const std::string types = e + "token_type_embeddings.weight";
    if (has(types)) {
      if (token_type_input) {
        x = b_.node("Add", {x, b_.node("Gather", {init(types), "token_type_ids"}, e + "token_types")}, "embed");
      } else {  // one type (RoBERTa): every token adds row 0
        x = b_.node("Add", {x, b_.tensor(types + ".row0", param(types)[0])}, "embed");
      }
    }
    x = layer_norm(x, has(e + "LayerNorm.weight") ? e + "LayerNorm" : e + "norm");
    if (has(f_.prefix() + "embeddings_project.weight")) x = linear(x, f_.prefix() + "embeddings_project");
    return x;
  }

  // What masked scores get: the lowest float32 (transformers' eager mask);
  // in float16 -1e4, which scores can be added to without reaching -inf (a
  // row of -inf would give NaNs that padding's zero weights still spread).
  std::string masked() { return b_.real(b_.fp16() ? -1e4F : std::numeric_limits<float>::lowest()); }
  std::string to_float(const std::string& x, const std::string& hint) {
    return b_.node("Cast", {x}, hint, {Attr::integer("to", b_.float_type())});
  }

  // attention_mask [B, S] -> additive [B, 1, 1, S]: 0 where attended,
  // masked() where not.
  std::string key_mask() {
    const std::string m = to_float("attention_mask", "mask_float");
    const std::string off = b_.node("Sub", {b_.real(1.0F), m}, "mask_off");
    const std::string add = b_.node("Mul", {off, masked()}, "mask_add");
    return b_.node("Unsqueeze", {add, b_.ints({1, 2})}, "key_mask");
  }

  // [B, S, H*d] -> [B, H, S, d].
  std::string heads(const std::string& x, const std::string& hint) {
    const int64_t h = c_.num_attention_heads, d = c_.hidden_size / h;
    const std::string r = b_.node("Reshape", {x, b_.ints({0, 0, h, d})}, hint + ".split");
    return b_.node("Transpose", {r}, hint, {Attr::list("perm", {0, 2, 1, 3})});
  }
  // softmax(scores * scale + mask) @ v, heads merged back: [B, S, H*d].
  std::string attend(const std::string& scores, double scale, const std::string& mask, const std::string& v,
                     const std::string& p) {
    const std::string s = b_.node("Mul", {scores, b_.real(static_cast<float>(scale))}, p + "scaled");
    const std::string probs = b_.node("Softmax", {b_.node("Add", {s, mask}, p + "masked")}, p + "probs",
                                      {Attr::integer("axis", -1)});
    const std::string ctx = b_.node("Transpose", {b_.node("MatMul", {probs, v}, p + "context")}, p + "context.t",
                                    {Attr::list("perm", {0, 2, 1, 3})});
    return b_.node("Reshape", {ctx, b_.ints({0, 0, -1})}, p + "context.merged");
  }
  std::string transpose_last(const std::string& x, const std::string& hint) {
    return b_.node("Transpose", {x}, hint, {Attr::list("perm", {0, 1, 3, 2})});
  }

  // DeBERTa: the rows of the relative table each pair (i, j) reads, [S, S]
  // for c2p and p2c, from tables over distances made with ft's own
  // bucketing; and the table itself, normalised. Beyond max(max_relative,
  // span) every distance reads an edge row, so distances are clipped to
  // twice that and the tables stay small whatever the sequence length.
  struct Relative {
    std::string c2p_rows, p2c_rows, table;
  };
  Relative relative() {
    const model_detail::RelativeAttention ra(c_);
    const int64_t span = ra.span, reach = 2 * std::max(ra.max_relative, span) + 1;
    const at::Tensor b = ra.bucket(at::arange(-(reach - 1), reach, at::kLong));
    const std::string clipped =
        b_.node("Clip", {distances(), b_.int_scalar(-(reach - 1)), b_.int_scalar(reach - 1)}, "relative_distance");
    const std::string index = b_.node("Add", {clipped, b_.int_scalar(reach - 1)}, "relative_index");
    Relative r;
    r.c2p_rows = b_.node("Gather", {b_.tensor("relative_rows.c2p", (b + span).clamp(0, 2 * span - 1)), index}, "c2p_rows");
    r.p2c_rows = b_.node("Gather", {b_.tensor("relative_rows.p2c", (-b + span).clamp(0, 2 * span - 1)), index}, "p2c_rows");
    r.table = init(f_.prefix() + "encoder.rel_embeddings.weight");
    if (c_.deberta.norm_rel) r.table = layer_norm(r.table, f_.prefix() + "encoder.LayerNorm");
    return r;
  }
  // The table projected by a layer's query or key: [H, d, 2 span].
  std::string table_heads(const Relative& r, const std::string& module) {
    const int64_t h = c_.num_attention_heads, d = c_.hidden_size / h;
    const std::string t = b_.node("Reshape", {linear(r.table, module), b_.ints({-1, h, d})}, module + ".table");
    return b_.node("Transpose", {t}, module + ".table.t", {Attr::list("perm", {1, 2, 0})});
  }
  // by_row [B, H, S, 2 span] read at rows [S, S] -> [B, H, S, S].
  std::string gather_rows(const std::string& by_row, const std::string& rows, const std::string& hint) {
    const std::string bhs = b_.node("Slice", {b_.node("Shape", {by_row}, hint + ".shape"), b_.ints({0}), b_.ints({3})},
                                    hint + ".bhs");
    const std::string shape = b_.node("Concat", {bhs, b_.node("Unsqueeze", {seq_len(), b_.ints({0})}, hint + ".s")},
                                      hint + ".bhss", {Attr::integer("axis", 0)});
    return b_.node("GatherElements", {by_row, b_.node("Expand", {rows, shape}, hint + ".rows")}, hint,
                   {Attr::integer("axis", -1)});
  }

  // BERT's post-norm layer under the family's names; DeBERTa's with its
  // relative terms added to the scores.
  std::string bert_layer(const std::string& x, int64_t i, const std::string& mask, const Relative* rel) {
    const std::string p = f_.layer_prefix(i);
    const auto name = [&](const char* bert) { return p + f_.layer_name(bert); };
    const int64_t d = c_.hidden_size / c_.num_attention_heads;
    const std::string q = heads(linear(x, name("attention.self.query")), p + "q");
    const std::string k = heads(linear(x, name("attention.self.key")), p + "k");
    const std::string v = heads(linear(x, name("attention.self.value")), p + "v");
    std::string scores = b_.node("MatMul", {q, transpose_last(k, p + "k.t")}, p + "scores");
    const auto& dd = c_.deberta;
    // DeBERTa's scale counts its relative terms even where the table is off, as transformers' does.
    double scale_dim = static_cast<double>(d);
    if (f_.model_type == "deberta-v2") scale_dim *= 1.0 + (dd.c2p ? 1 : 0) + (dd.p2c ? 1 : 0);
    if (rel) {
      if (dd.c2p) {
        const std::string by_row = b_.node("MatMul", {q, table_heads(*rel, name("attention.self.key"))}, p + "c2p.by_row");
        scores = b_.node("Add", {scores, gather_rows(by_row, rel->c2p_rows, p + "c2p")}, p + "scores.c2p");
      }
      if (dd.p2c) {
        const std::string by_row = b_.node("MatMul", {k, table_heads(*rel, name("attention.self.query"))}, p + "p2c.by_row");
        const std::string term = transpose_last(gather_rows(by_row, rel->p2c_rows, p + "p2c"), p + "p2c.t");
        scores = b_.node("Add", {scores, term}, p + "scores.p2c");
      }
    }
    const std::string ctx = attend(scores, 1.0 / std::sqrt(scale_dim), mask, v, p);
    const std::string a = layer_norm(b_.node("Add", {linear(ctx, name("attention.output.dense")), x}, p + "attn_residual"),
                                     name("attention.output.LayerNorm"));
    const std::string h = gelu(linear(a, name("intermediate.dense")), p + "intermediate");
    return layer_norm(b_.node("Add", {linear(h, name("output.dense")), a}, p + "ffn_residual"), name("output.LayerNorm"));
  }

  // ModernBERT's rotary angles for one base: cos and sin [S, d].
  struct Rope {
    std::string cos, sin;
  };
  // In float32 whatever the graph's type, as transformers computes them
  // (float16 holds integer positions exactly only up to 2048).
  Rope rope(double base, const std::string& hint) {
    const int64_t d = c_.hidden_size / c_.num_attention_heads;
    const std::string inv = b_.tensor(hint + ".inv_freq", model_detail::Rotary(base, d).inv_freq, /*keep_fp32=*/true);
    const std::string p32 = b_.node("Cast", {positions()}, hint + ".p", {Attr::integer("to", onnx::TensorProto::FLOAT)});
    const std::string freqs = b_.node("Mul", {b_.node("Unsqueeze", {p32, b_.ints({1})}, hint + ".p1"), inv}, hint + ".freqs");
    const std::string emb = b_.node("Concat", {freqs, freqs}, hint + ".emb", {Attr::integer("axis", -1)});
    return {to_float(b_.node("Cos", {emb}, hint + ".cos32"), hint + ".cos"),
            to_float(b_.node("Sin", {emb}, hint + ".sin32"), hint + ".sin")};
  }
  // x [B, H, S, d]: pairs (j, j + d/2) rotated.
  std::string rotate(const std::string& x, const Rope& r, const std::string& hint) {
    const int64_t d = c_.hidden_size / c_.num_attention_heads, half = d / 2;
    const std::string lo = b_.node("Slice", {x, b_.ints({0}), b_.ints({half}), b_.ints({-1})}, hint + ".lo");
    const std::string hi = b_.node("Slice", {x, b_.ints({half}), b_.ints({d}), b_.ints({-1})}, hint + ".hi");
    const std::string turned = b_.node("Concat", {b_.node("Neg", {hi}, hint + ".neg"), lo}, hint + ".turned",
                                       {Attr::integer("axis", -1)});
    return b_.node("Add", {b_.node("Mul", {x, r.cos}, hint + ".xcos"), b_.node("Mul", {turned, r.sin}, hint + ".xsin")},
                   hint + ".rotated");
  }
  // [B, 1, S, S]: the key mask, and keys beyond the window masked too.
  std::string local_mask(const std::string& mask) {
    const std::string far = b_.node("Abs", {distances()}, "local_distance");
    const std::string near = b_.node("LessOrEqual", {far, b_.int_scalar(c_.modern.local_attention / 2)}, "local_near");
    return b_.node("Where", {near, mask, masked()}, "local_mask");
  }

  // ModernBERT's pre-norm layer: rotary attention (global or windowed), GeGLU.
  std::string modern_layer(const std::string& x, int64_t i, const std::string& mask, const Rope& rope) {
    const std::string p = f_.layer_prefix(i);
    const int64_t h = c_.num_attention_heads, d = c_.hidden_size / h, inter = c_.intermediate_size;
    const std::string a = i > 0 ? layer_norm(x, p + "attn_norm") : x;
    const std::string qkv = b_.node("Reshape", {linear(a, p + "attn.Wqkv"), b_.ints({0, 0, 3, h, d})}, p + "qkv");
    const auto part = [&](int64_t which, const char* tag) {
      const std::string one = b_.node("Gather", {qkv, b_.int_scalar(which)}, p + tag, {Attr::integer("axis", 2)});
      return b_.node("Transpose", {one}, p + tag + ".t", {Attr::list("perm", {0, 2, 1, 3})});
    };
    const std::string q = rotate(part(0, "q"), rope, p + "q"), k = rotate(part(1, "k"), rope, p + "k");
    const std::string scores = b_.node("MatMul", {q, transpose_last(k, p + "k.t")}, p + "scores");
    const std::string ctx = attend(scores, 1.0 / std::sqrt(static_cast<double>(d)), mask, part(2, "v"), p);
    const std::string hidden = b_.node("Add", {x, linear(ctx, p + "attn.Wo")}, p + "attn_residual");
    const std::string wi = linear(layer_norm(hidden, p + "mlp_norm"), p + "mlp.Wi");
    const std::string in = b_.node("Slice", {wi, b_.ints({0}), b_.ints({inter}), b_.ints({-1})}, p + "mlp.input");
    const std::string gate = b_.node("Slice", {wi, b_.ints({inter}), b_.ints({2 * inter}), b_.ints({-1})}, p + "mlp.gate");
    const std::string act = b_.node("Mul", {gelu(in, p + "mlp"), gate}, p + "mlp.geglu");
    return b_.node("Add", {hidden, linear(act, p + "mlp.Wo")}, p + "mlp_residual");
  }

  // The encoder: [B, S, hidden], after the family's final norm where it has one.
  std::string encoder(bool token_type_input) {
    std::string x = embeddings(token_type_input);
    const std::string mask = key_mask();
    if (f_.model_type == "modernbert") {
      const Rope global = rope(c_.modern.global_theta, "rope_global");
      const Rope local = rope(c_.modern.local_theta, "rope_local");
      const std::string windowed = local_mask(mask);
      for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
        const bool g = c_.modern.is_global(i);
        x = modern_layer(x, i, g ? mask : windowed, g ? global : local);
      }
    } else {
      Relative rel;
      if (c_.deberta.relative_attention) rel = relative();
      for (int64_t i = 0; i < c_.num_hidden_layers; ++i) x = bert_layer(x, i, mask, c_.deberta.relative_attention ? &rel : nullptr);
    }
    if (has(f_.prefix() + "final_norm.weight")) x = layer_norm(x, f_.prefix() + "final_norm");
    return x;
  }

  std::string first_token(const std::string& h) {
    return b_.node("Gather", {h, b_.int_scalar(0)}, "first_token", {Attr::integer("axis", 1)});
  }
  // The attended tokens' states summed [B, hidden] and their count [B, 1].
  std::pair<std::string, std::string> attended_sums(const std::string& h) {
    const std::string m = to_float("attention_mask", "mask_f");
    const std::string m3 = b_.node("Unsqueeze", {m, b_.ints({2})}, "mask_f3");
    const std::string sums = b_.node("ReduceSum", {b_.node("Mul", {h, m3}, "masked_h"), b_.ints({1})}, "sums",
                                     {Attr::integer("keepdims", 0)});
    return {sums, b_.node("ReduceSum", {m3, b_.ints({1})}, "counts", {Attr::integer("keepdims", 0)})};
  }
  // ModernBERT's head transform: norm(gelu(dense(x))).
  std::string prediction_head(const std::string& x) { return layer_norm(gelu(linear(x, "head.dense"), "head"), "head.norm"); }

  std::string sequence_classification(const std::string& h) {
    const std::string& form = f_.classification_head;
    if (form == "prediction_head") {
      std::string pooled = first_token(h);
      if (c_.modern.mean_pooling) {
        const auto [sums, counts] = attended_sums(h);
        pooled = b_.node("Div", {sums, counts}, "mean_pooled");
      }
      return linear(prediction_head(pooled), "classifier");
    }
    const std::string first = first_token(h);
    if (form == "pooler") {
      return linear(b_.node("Tanh", {linear(first, f_.prefix() + "pooler.dense")}, "pooler_output"), "classifier");
    }
    if (form == "pre_classifier") return linear(b_.node("Relu", {linear(first, "pre_classifier")}, "pre_classifier.relu"), "classifier");
    if (form == "context_pooler") return linear(gelu(linear(first, "pooler.dense"), "pooler"), "classifier");
    if (form != "dense_tanh" && form != "dense_gelu") fail("ft export --onnx: classification head '{}' is not exported", form);
    const std::string dense = linear(first, "classifier.dense");
    const std::string act = form == "dense_gelu" ? gelu(dense, "classifier") : b_.node("Tanh", {dense}, "classifier.tanh");
    return linear(act, "classifier.out_proj");
  }

  std::string token_classification(const std::string& h) {
    return linear(f_.token_classification_head == "prediction_head" ? prediction_head(h) : h, "classifier");
  }

  // The transform, then the decoder tied to the word table (read through a
  // Transpose: no second copy of the largest tensor).
  std::string masked_lm(const std::string& h) {
    std::string t, bias;
    if (f_.mlm_head == "cls.predictions") {
      t = layer_norm(gelu(linear(h, "cls.predictions.transform.dense"), "mlm"), "cls.predictions.transform.LayerNorm");
      bias = "cls.predictions.bias";
    } else if (f_.mlm_head == "lm_head") {
      t = layer_norm(gelu(linear(h, "lm_head.dense"), "mlm"), "lm_head.layer_norm"), bias = "lm_head.bias";
    } else if (f_.mlm_head == "vocab_projector") {
      t = layer_norm(gelu(linear(h, "vocab_transform"), "mlm"), "vocab_layer_norm"), bias = "vocab_projector.bias";
    } else if (f_.mlm_head == "decoder") {
      t = prediction_head(h), bias = "decoder.bias";
    } else {
      fail("ft export --onnx: {} has no masked-LM head in ft", c_.model_type);
    }
    const std::string decoder = b_.node("Transpose", {init(f_.word_embeddings())}, "decoder.weight.T", {Attr::list("perm", {1, 0})});
    const std::string logits = b_.node("MatMul", {t, decoder}, "decoder");
    return has(bias) ? b_.node("Add", {logits, init(bias)}, "decoder.bias") : logits;
  }

  // sentence-transformers' Pooling, Dense and Normalize over the attended tokens.
  std::string sentence_embedding(const std::string& h) {
    const auto& s = c_.sentence;
    std::string e;
    if (s.pooling == "cls") {
      e = first_token(h);
    } else if (s.pooling == "max") {  // unattended states set to -1e9 first, as sentence-transformers does
      const std::string m = b_.node("Cast", {"attention_mask"}, "attended", {Attr::integer("to", onnx::TensorProto::BOOL)});
      const std::string kept = b_.node("Where", {b_.node("Unsqueeze", {m, b_.ints({2})}, "attended3"), h,
                                                  b_.real(b_.fp16() ? -65504.0F : -1e9F)},
                                       "max_input");
      e = b_.node("ReduceMax", {kept}, "max_pooled", {Attr::list("axes", {1}), Attr::integer("keepdims", 0)});
    } else {
      auto [sums, counts] = attended_sums(h);
      counts = b_.node("Max", {counts, b_.real(1e-9F)}, "counts_clamped");
      if (s.pooling == "mean_sqrt_len_tokens") counts = b_.node("Sqrt", {counts}, "counts_sqrt");
      e = b_.node("Div", {sums, counts}, "mean_pooled");
    }
    if (s.dense_out > 0) {
      e = linear(e, "sentence_dense.linear");
      if (s.dense_activation != "torch.nn.modules.linear.Identity") e = b_.node("Tanh", {e}, "dense_tanh");
    }
    if (s.normalize) {
      // In float32, as ft normalises (the losses read cosine similarities).
      if (b_.fp16()) e = b_.node("Cast", {e}, "embedding32", {Attr::integer("to", onnx::TensorProto::FLOAT)});
      const std::string n = b_.node("ReduceL2", {e}, "l2", {Attr::list("axes", {1}), Attr::integer("keepdims", 1)});
      e = b_.node("Div", {e, b_.node("Max", {n, b_.real(1e-12F, /*keep_fp32=*/true)}, "l2_clamped")}, "normalized");
      fp32_value_ = e;
    }
    return e;
  }

  // The whole graph; returns the output value (float32 whatever the graph
  // computes in) and its dimensions.
  std::pair<std::string, std::vector<std::string>> build(bool hidden_states, bool token_type_input) {
    auto [value, dims] = head_output(hidden_states, token_type_input);
    if (b_.fp16() && value != fp32_value_) value = b_.node("Cast", {value}, "output32", {Attr::integer("to", onnx::TensorProto::FLOAT)});
    return {value, dims};
  }

  std::pair<std::string, std::vector<std::string>> head_output(bool hidden_states, bool token_type_input) {
    const std::string x = encoder(token_type_input);
    if (hidden_states) return {x, {"batch_size", "sequence_length", std::to_string(c_.hidden_size)}};
    switch (c_.head) {
      case BertHead::kSequenceClassification:
        return {sequence_classification(x), {"batch_size", std::to_string(c_.num_labels)}};
      case BertHead::kTokenClassification:
        return {token_classification(x), {"batch_size", "sequence_length", std::to_string(c_.num_labels)}};
      case BertHead::kMaskedLM:
        return {masked_lm(x), {"batch_size", "sequence_length", std::to_string(c_.vocab_size)}};
      case BertHead::kSentenceEmbedding:
        return {sentence_embedding(x), {"batch_size", std::to_string(c_.sentence_dimension())}};
    }
    fail("ft export --onnx: unknown head");
  }

 private:
  const BertConfig& c_;
  const EncoderFamily& f_;
  OnnxGraphBuilder b_;
  std::map<std::string, at::Tensor> params_;
  std::set<std::string> added_;
  std::string seq_len_, positions_;
  std::string fp32_value_;  // a value already cast back to float32 (a normalised embedding)
};

// The value `from` renamed `to` where its node writes it (the graph's output
// gets its public name; nothing else reads it).
void rename_output(onnx::GraphProto& g, const std::string& from, const std::string& to) {
  for (int n = g.node_size() - 1; n >= 0; --n) {
    auto* node = g.mutable_node(n);
    for (int o = 0; o < node->output_size(); ++o) {
      if (node->output(o) == from) {
        node->set_output(o, to);
        return;
      }
    }
  }
  fail("ft export --onnx: internal error: no node writes '{}'", from);
}

}  // namespace

OnnxExportSummary write_onnx(EncoderModel& model, const fsys::path& out, const OnnxExportOptions& options) {
  const BertConfig& c = model.config();
  if (model.prompt_length() > 0 || model.prefix_length() > 0) {
    fail("ft export --onnx: the model has prompt or prefix tuning's virtual tokens, which no plain graph input carries");
  }
  for (const auto& p : model.named_parameters()) {
    if (p.key().find(".lora_") != std::string::npos || p.key().find(".adapter_") != std::string::npos) {
      fail("ft export --onnx: the model carries adapter weights ({}); fold LoRA in first (merge_lora), a graph has no "
           "place for them",
           p.key());
    }
  }
  onnx::ModelProto proto;
  proto.set_ir_version(8);  // the IR version opset 17 came with (ONNX 1.12)
  proto.set_producer_name("ft");
  proto.set_producer_version(options.producer_version);
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  onnx::GraphProto& g = *proto.mutable_graph();
  g.set_name(c.family().class_prefix + " (ft export --onnx)");

  Exporter ex(model, g, options.fp16);
  // Token types are an input where the family has a table of more than one row.
  const std::string types = c.family().prefix() + "embeddings.token_type_embeddings.weight";
  const bool type_input = ex.has(types) && ex.param(types).size(0) > 1;
  OnnxExportSummary summary;
  summary.inputs = {"input_ids", "attention_mask"};
  if (type_input) summary.inputs.push_back("token_type_ids");
  for (const auto& name : summary.inputs) {
    add_value(g.mutable_input(), name, onnx::TensorProto::INT64, {"batch_size", "sequence_length"});
  }
  auto [value, dims] = ex.build(options.hidden_states, type_input);
  const std::string output = options.hidden_states ? "last_hidden_state"
                             : c.head == BertHead::kSentenceEmbedding ? "sentence_embedding"
                                                                      : "logits";
  rename_output(g, value, output);
  add_value(g.mutable_output(), output, onnx::TensorProto::FLOAT, dims);
  summary.outputs = {output};

  // What a consumer needs to read the output: the labels, and how their scores are meant.
  const auto meta = [&](const std::string& key, const std::string& v) {
    auto* p = proto.add_metadata_props();
    p->set_key(key);
    p->set_value(v);
  };
  meta("model_type", c.model_type);
  if (!options.hidden_states && (c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification)) {
    nlohmann::json labels = nlohmann::json::object();  // config.json's form
    for (size_t i = 0; i < c.id2label.size(); ++i) labels[std::to_string(i)] = c.id2label[i];
    meta("id2label", labels.dump());
    // What transformers assumes where config.json names none (num_labels 1: regression).
    if (c.head == BertHead::kSequenceClassification) meta("problem_type", problem_type_name(c.problem()));
  }

  summary.nodes = g.node_size();
  summary.initializers = g.initializer_size();
  // protobuf's limit on one message; external data would lift it.
  constexpr int64_t kLimit = (int64_t{2} << 30) - (int64_t{64} << 20);
  if (ex.builder().bytes() > kLimit) {
    fail("ft export --onnx: the weights take {:.1f} GB, above the 2 GB one ONNX file holds without external data",
         static_cast<double>(ex.builder().bytes()) / 1e9);
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) fail("ft export --onnx: the graph could not be serialised");
  summary.bytes = static_cast<int64_t>(bytes.size());
  fs::write_file_atomic(out, bytes);
  return summary;
}

}  // namespace ft
