// BertForSequenceClassification::shard_tensor_parallel: Megatron's slicing of
// the encoder (strategies/tensor runs it; docs/model-parallel.md has the
// layout and its costs).
#include <string>

#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include "bert_modules.h"
#include "ft/error.h"
#include "ft/model.h"
#include "text_affix.h"

namespace ft {
using namespace model_detail;

namespace {

// The six Linears of a layer; column-parallel ones are cut by output rows,
// row-parallel ones by input columns.
struct CutLinear {
  const char* name;
  bool column;
};
const CutLinear kLinears[] = {{"attention.self.query", true},   {"attention.self.key", true},
                              {"attention.self.value", true},   {"intermediate.dense", true},
                              {"attention.output.dense", false}, {"output.dense", false}};

enum class Cut { kWhole, kRows, kColumns, kPartialGrad, kUnknown };

// How a layer parameter (name relative to the layer) is laid out across the group.
Cut cut_of(const std::string& name) {
  if (name == "attention.self.prefix_key" || name == "attention.self.prefix_value") return Cut::kColumns;  // by heads
  if (name == "attention.output.LayerNorm.weight" || name == "attention.output.LayerNorm.bias" ||
      name == "output.LayerNorm.weight" || name == "output.LayerNorm.bias") {
    return Cut::kWhole;
  }
  for (const auto& l : kLinears) {
    const std::string prefix = std::string(l.name) + ".";
    if (!starts_with(name, prefix)) continue;
    const std::string rest = name.substr(prefix.size());
    if (rest == "weight") return l.column ? Cut::kRows : Cut::kColumns;
    if (rest == "bias") return l.column ? Cut::kRows : Cut::kWhole;  // a row-parallel bias is added after the sum
    if (rest == "lora_A.weight") return l.column ? Cut::kPartialGrad : Cut::kColumns;
    if (rest == "lora_B.weight") return l.column ? Cut::kRows : Cut::kPartialGrad;
    // A bottleneck adapter on a row-parallel Linear reads the summed output.
    if (!l.column && starts_with(rest, "adapter_")) return Cut::kWhole;
    return Cut::kUnknown;
  }
  return Cut::kUnknown;
}

// Keeps this rank's part, in place: set_data() keeps every handle to the
// tensor (module members, LoRA closures) pointing at the slice.
void keep_part(const at::Tensor& t, const TensorCut& cut, const TensorParallelOps& ops) {
  t.set_data(take_part(t, cut, ops.rank, ops.size).clone());
}

// ModernBERT's layer, by transformers' names relative to the layer: the
// fused Wqkv and Wi are column-parallel by blocks (each rank's q, k and v of
// its heads; its share of the input and of the gate), both Wo row-parallel.
struct ModernCut {
  const char* name;
  TensorCut cut;
};
const ModernCut kModernLinears[] = {{"attn.Wqkv", {0, 3}}, {"mlp.Wi", {0, 2}}, {"attn.Wo", {1, 1}}, {"mlp.Wo", {1, 1}}};

// How a ModernBERT layer parameter is laid out; false: whole on every rank.
// Unknown names (not a norm, a Linear, LoRA or an adapter on Wo) fail.
bool modern_cut(const std::string& name, TensorCut& cut, bool& partial_grad) {
  partial_grad = false;
  if (ends_with(name, "norm.weight") || ends_with(name, "norm.bias")) return false;
  for (const auto& l : kModernLinears) {
    const std::string prefix = std::string(l.name) + ".";
    if (!starts_with(name, prefix)) continue;
    const std::string rest = name.substr(prefix.size());
    const bool column = l.cut.dim == 0;
    cut = l.cut;
    if (rest == "weight") return true;
    if (rest == "bias") return column;  // a row-parallel bias is added after the sum
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
  }
  fail("tensor parallelism cannot place '{}': it knows ModernBERT's layer weights, LoRA on its Linears and "
       "bottleneck adapters on attn.Wo and mlp.Wo; train it with pipeline, ddp or a zero/fsdp strategy",
       name);
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

std::string tensor_parallel_refusal(const BertConfig& c, int ranks) {
  const int64_t heads = c.num_attention_heads, head_dim = c.hidden_size / c.num_attention_heads;
  if (c.family().modern_layer && heads % ranks != 0) {  // RoPE rotates pairs across a head's dimensions
    return fmt::format("tensor parallelism over {} ranks: ModernBERT's {} attention heads must divide by {} (rotary "
                       "positions keep each head whole); pick another strategy.options.tp_size",
                       ranks, heads, ranks);
  }
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

TensorParallelSplit BertForSequenceClassification::shard_tensor_parallel(const TensorParallelOps& ops) {
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
  // Vocab-parallel word embeddings when the rows divide evenly; a tied MLM
  // decoder then reads this rank's rows and scores its slice of the vocabulary.
  auto& emb = *parts_->bert->embeddings;
  if (c.vocab_size % ops.size == 0 && (!parts_->mlm || ops.gather_columns)) {
    keep_part(emb.word_embeddings->weight, TensorCut{}, ops);
    emb.vocab_begin = ops.rank * (c.vocab_size / ops.size);
    emb.tp = shared;
    out.sliced[c.family().word_embeddings()] = TensorCut{};
    if (parts_->mlm) {
      parts_->mlm->tp = shared;
      if (parts_->mlm->bias.defined()) {
        keep_part(parts_->mlm->bias, TensorCut{}, ops);
        out.sliced[c.family().mlm_bias()] = TensorCut{};
      }
    }
  }
  if (c.family().modern_layer) {
    shard_modern_layers(ops, shared, out);
    return out;
  }
  for (size_t i = 0; i < parts_->bert->layers.size(); ++i) {
    auto& layer = dynamic_cast<LayerImpl&>(*parts_->bert->layers[i]);
    const std::string prefix = unit_prefix(static_cast<int>(i) + 1);
    for (const auto& p : layer.named_parameters()) {
      const std::string name = prefix + c.family().layer_name(p.key());  // p.key(): BERT's spelling, as cut_of reads
      switch (cut_of(p.key())) {
        case Cut::kWhole:
          break;
        case Cut::kRows:
          keep_part(p.value(), TensorCut{0, 1}, ops);
          out.sliced[name] = TensorCut{0, 1};
          break;
        case Cut::kColumns:
          keep_part(p.value(), TensorCut{1, 1}, ops);
          out.sliced[name] = TensorCut{1, 1};
          break;
        case Cut::kPartialGrad:
          out.partial_grads.insert(name);
          break;
        case Cut::kUnknown:
          fail("tensor parallelism cannot place '{}': it knows BERT's layer weights, LoRA on any of the layer's "
               "Linears, bottleneck adapters on attention.output.dense and output.dense, and prefixes; train it "
               "with pipeline, ddp or a zero/fsdp strategy",
               name);
      }
    }
    auto& self = *layer.attention->self;
    if (whole_heads) {
      self.heads /= ops.size;
    } else {
      self.heads = 1;
      self.head_dim /= per_head;
      self.tp = shared;
    }
    layer.attention->tp = layer.attention->output->tp = layer.tp = layer.output->tp = shared;
  }
  return out;
}

void BertForSequenceClassification::shard_modern_layers(const TensorParallelOps& ops,
                                                        const std::shared_ptr<const TensorParallelOps>& shared,
                                                        TensorParallelSplit& out) {
  for (size_t i = 0; i < parts_->bert->layers.size(); ++i) {
    auto& layer = dynamic_cast<ModernLayerImpl&>(*parts_->bert->layers[i]);
    const std::string prefix = unit_prefix(static_cast<int>(i) + 1);
    for (const auto& p : layer.named_parameters()) {
      TensorCut cut;
      bool partial = false;
      if (modern_cut(p.key(), cut, partial)) {
        keep_part(p.value(), cut, ops);
        out.sliced[prefix + p.key()] = cut;
      }
      if (partial) out.partial_grads.insert(prefix + p.key());
    }
    layer.attn->heads /= ops.size;
    layer.tp = layer.attn->tp = layer.mlp->tp = shared;
  }
}

}  // namespace ft
