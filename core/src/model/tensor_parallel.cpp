// EncoderModel::shard_tensor_parallel: Megatron's slicing of the encoder
// (strategies/tensor runs it; docs/model-parallel.md has the layout and its
// costs), by the cuts each backbone declares for its layer's Linears.
#include <string>

#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "model/encoder_parts.h"
#include "text_affix.h"

namespace ft {
using namespace model_detail;

namespace {

// How a layer parameter (name relative to the layer, in the computing
// layer's spelling) is laid out across the group: true and `cut` when this
// rank keeps a part; `partial_grad` when it stays whole but its gradient is
// this rank's share. Norms stay whole. A Linear's weight follows its cut;
// a column-parallel bias is cut with the rows, a row-parallel one is added
// after the sum; LoRA's B rows on a column-parallel Linear and A's columns
// on a row-parallel one are cut (the other matrix stays whole); a
// bottleneck adapter on a row-parallel Linear reads the summed output.
bool layer_cut(const Backbone& backbone, const std::vector<ParallelLinear>& linears, const std::string& name,
               const std::string& full_name, TensorCut& cut, bool& partial_grad) {
  partial_grad = false;
  for (const auto& [tensor, tensor_cut] : backbone.parallel_tensors()) {
    if (name == tensor) {
      cut = tensor_cut;
      return true;
    }
  }
  if (is_layer_norm_parameter(name)) return false;
  for (const auto& l : linears) {
    const std::string prefix = l.name + ".";
    if (!starts_with(name, prefix)) continue;
    const std::string rest = name.substr(prefix.size());
    const bool column = l.cut.dim == 0;
    cut = l.cut;
    if (rest == "weight") return true;
    if (rest == "bias") return column;
    if (rest == "lora_A.weight") {
      partial_grad = column;
      return !column;
    }
    if (rest == "lora_B.weight") {
      cut.dim = 0;
      partial_grad = !column;
      return column;
    }
    if (!column && starts_with(rest, "adapter_")) return false;
    break;
  }
  fail("tensor parallelism cannot place '{}': it knows {}; train it with pipeline, ddp or a zero/fsdp strategy",
       full_name, backbone.tensor_parallel_knows());
}

// Keeps this rank's part, in place: set_data() keeps every handle to the
// tensor (module members, LoRA closures) pointing at the slice.
void keep_part(const at::Tensor& t, const TensorCut& cut, const TensorParallelOps& ops) {
  t.set_data(take_part(t, cut, ops.rank, ops.size).clone());
}

}  // namespace

at::Tensor take_part(const at::Tensor& full, const TensorCut& cut, int rank, int size) {
  const int64_t block = full.size(cut.dim) / cut.blocks, n = block / size;
  if (cut.blocks == 1) return full.narrow(cut.dim, rank * n, n);
  std::vector<at::Tensor> parts;
  for (int b = 0; b < cut.blocks; ++b) parts.push_back(full.narrow(cut.dim, b * block + rank * n, n));
  return at::cat(parts, cut.dim);
}

at::Tensor join_parts(const std::vector<at::Tensor>& parts, const TensorCut& cut) {
  if (cut.blocks == 1) return at::cat(parts, cut.dim);
  std::vector<at::Tensor> pieces;  // block-major: every rank's piece of block 0, then of block 1, ...
  for (int b = 0; b < cut.blocks; ++b) {
    for (const auto& p : parts) {
      const int64_t n = p.size(cut.dim) / cut.blocks;
      pieces.push_back(p.narrow(cut.dim, b * n, n));
    }
  }
  return at::cat(pieces, cut.dim);
}

std::vector<ParallelLinear> tensor_parallel_linears(const BertConfig& c) {
  return backbone_of(c.model_type, "model config").parallel_linears(c);
}

std::string tensor_parallel_refusal(const BertConfig& c, int ranks) {
  const std::string own = backbone_of(c.model_type, "model config").tensor_parallel_refusal(c, ranks);
  if (!own.empty()) return own;
  const int64_t heads = c.num_attention_heads, head_dim = c.hidden_size / c.num_attention_heads;
  const bool heads_split = heads % ranks == 0 || (ranks % heads == 0 && head_dim % (ranks / heads) == 0);
  if (!heads_split) {
    return fmt::format("tensor parallelism over {} ranks: the {} attention heads must divide by {}, or {} by the "
                       "heads with the head dimension ({}) divisible by the ranks per head; pick another "
                       "strategy.options.tp_size",
                       ranks, heads, ranks, ranks, head_dim);
  }
  if (c.intermediate_size % ranks != 0) {
    return fmt::format("tensor parallelism over {} ranks needs intermediate_size ({}) divisible by {}; pick another "
                       "strategy.options.tp_size",
                       ranks, c.intermediate_size, ranks);
  }
  return "";
}

TensorParallelSplit EncoderModel::shard_tensor_parallel(const TensorParallelOps& ops) {
  const auto& c = config_;
  const std::string refusal = tensor_parallel_refusal(c, ops.size);
  if (!refusal.empty()) fail("{}", refusal);
  const bool whole_heads = c.num_attention_heads % ops.size == 0;
  const int64_t per_head = whole_heads ? 1 : ops.size / c.num_attention_heads;  // ranks sharing one head
  if (!whole_heads && !ops.head_sum) {
    fail("tensor parallelism over {} ranks on {} heads: ranks share heads, which needs TensorParallelOps::head_sum",
         ops.size, c.num_attention_heads);
  }
  auto shared = std::make_shared<const TensorParallelOps>(ops);
  c10::NoGradGuard no_grad;
  TensorParallelSplit out;
  // Vocab-parallel word embeddings when the rows divide evenly; a head that
  // reads them (a tied decoder) then follows with its own rows.
  auto& emb = *parts_->base->embeddings;
  Head& head = *parts_->head;
  if (c.vocab_size % ops.size == 0 && head.follows_vocab_parallel(ops)) {
    keep_part(emb.word_embeddings->weight, TensorCut{}, ops);
    emb.vocab_begin = ops.rank * (c.vocab_size / ops.size);
    emb.tp = shared;
    out.sliced[c.family().word_embeddings()] = TensorCut{};
    for (const auto& [name, t] : head.vocab_parallel(shared)) {
      keep_part(t, TensorCut{}, ops);
      out.sliced[name] = TensorCut{};
    }
  }
  const Backbone& backbone = *parts_->backbone;
  const std::vector<ParallelLinear> linears = backbone.parallel_linears(c);
  for (size_t i = 0; i < parts_->base->layers.size(); ++i) {
    auto& layer = *parts_->base->layers[i];
    const std::string prefix = unit_prefix(static_cast<int>(i) + 1);
    for (const auto& p : layer.named_parameters()) {
      const std::string name = prefix + c.family().layer_name(p.key());  // p.key(): the computing layer's spelling
      TensorCut cut;
      bool partial = false;
      if (layer_cut(backbone, linears, p.key(), name, cut, partial)) {
        keep_part(p.value(), cut, ops);
        out.sliced[name] = cut;
      }
      if (partial) out.partial_grads.insert(name);
    }
    layer.set_tensor_parallel(shared, per_head);
  }
  return out;
}

}  // namespace ft
