// The masked LM: the masked tokens' states -> vocabulary logits, through a
// transform (dense, gelu, norm) and a decoder tied to the word embeddings,
// in the form HF gives the backbone's family (EncoderFamily::mlm_head).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/heads/head.h"

namespace ft {
namespace model_detail {
namespace {

// HF's <Family>ForMaskedLM head: transform, then the decoder, whose weight
// is the word embeddings (tied) and whose bias is this module's "bias".
struct MaskedLmHeadImpl : torch::nn::Module {
  Linear dense{nullptr};
  Norm norm{nullptr};
  at::Tensor bias;
  // The backbone's final norm (ModernBERT's model.final_norm), which this
  // unit owns and applies first; registered by the base model.
  Norm final_norm{nullptr};
  // Not registered: the weight belongs to unit 0. Read at call time, so it
  // is whatever tensor the embeddings hold then (a gathered shard, a replica's).
  std::shared_ptr<EmbeddingsImpl> embeddings;
  // Vocab-parallel under tensor parallelism: this rank's rows of the tied
  // table (and of the bias) score its slice of the vocabulary; f sums the
  // transform's partial input gradients, and the slices are gathered.
  std::shared_ptr<const TensorParallelOps> tp;

  // hidden: [M, hidden] states of the masked tokens -> [M, vocab].
  at::Tensor forward(const at::Tensor& tokens) {
    const at::Tensor hidden = final_norm ? final_norm(tokens) : tokens;
    // LayerNorm in fp32, as autocast runs it: under bf16 the dense output is
    // bf16 and, with no fp32 residual to promote it, LibTorch's CPU kernel
    // refuses mixed input/weight dtypes. A no-op in fp32.
    const at::Tensor h = norm(at::gelu(dense(hidden)).to(at::kFloat));
    if (!tp) return at::linear(h, embeddings->word_embeddings->weight, bias);
    return tp->gather_columns(at::linear(tp->enter(h), embeddings->word_embeddings->weight, bias).to(at::kFloat));
  }
};

// One form, by the head module's name (EncoderFamily::mlm_head): where its
// decoder is, and where the transform's dense and norm are registered.
struct MaskedLmForm {
  const char* module;
  const char* decoder;
  std::function<void(torch::nn::Module& root, MaskedLmHeadImpl& head, const BertConfig& c)> transform;
  bool (*decoder_bias)(const BertConfig& c) = [](const BertConfig&) { return true; };
};

const std::vector<MaskedLmForm>& masked_lm_forms() {
  // A function-local constant, not a mutable global: built once, read only.
  static const std::vector<MaskedLmForm> all = {
      // BERT (and DeBERTa's legacy head): cls.predictions.transform.{dense,LayerNorm}.
      {"cls.predictions", "cls.predictions.decoder",
       [](torch::nn::Module&, MaskedLmHeadImpl& head, const BertConfig& c) {
         auto transform = head.register_module("transform", std::make_shared<torch::nn::Module>());
         head.dense = transform->register_module("dense", Linear(c.hidden_size, c.hidden_size));
         head.norm = transform->register_module("LayerNorm", make_layer_norm(c));
       }},
      // RoBERTa: lm_head holds dense and layer_norm itself.
      {"lm_head", "lm_head.decoder",
       [](torch::nn::Module&, MaskedLmHeadImpl& head, const BertConfig& c) {
         head.dense = head.register_module("dense", Linear(c.hidden_size, c.hidden_size));
         head.norm = head.register_module("layer_norm", make_layer_norm(c));
       }},
      // DistilBERT: the model's own top-level vocab_transform and
      // vocab_layer_norm (DistilBertForMaskedLM's order); the head module, at
      // vocab_projector, is the decoder and holds only the bias.
      {"vocab_projector", "vocab_projector",
       [](torch::nn::Module& root, MaskedLmHeadImpl& head, const BertConfig& c) {
         head.dense = root.register_module("vocab_transform", Linear(c.hidden_size, c.hidden_size));
         head.norm = root.register_module("vocab_layer_norm", make_layer_norm(c));
       }},
      // ModernBERT: head.dense and head.norm (the classifier's names too),
      // then the decoder (ModernBertForMaskedLM's order).
      {"decoder", "decoder",
       [](torch::nn::Module& root, MaskedLmHeadImpl& head, const BertConfig& c) {
         head.dense = register_at(root, "head.dense", Linear(c.hidden_size, c.hidden_size, c.modern.classifier_bias).ptr());
         head.norm = register_at(root, "head.norm", make_layer_norm(c, c.hidden_size, c.modern.norm_bias).ptr());
       },
       [](const BertConfig& c) { return c.modern.decoder_bias; }},
  };
  return all;
}

const MaskedLmForm* masked_lm_form_of(const BertConfig& c) {
  for (const auto& f : masked_lm_forms())
    if (c.family().mlm_head == f.module) return &f;
  return nullptr;
}

class MaskedLmTask : public Head {
 public:
  MaskedLmTask(std::shared_ptr<MaskedLmHeadImpl> head, std::shared_ptr<torch::nn::Module> unit, std::string bias_name)
      : head_(std::move(head)), unit_(std::move(unit)), bias_name_(std::move(bias_name)) {}
  std::shared_ptr<torch::nn::Module> unit() const override { return unit_; }
  std::vector<int64_t> logits_shape(const Batch& batch, const BertConfig& c) const override {
    return {batch.positions.size(0), c.vocab_size};
  }
  void check(const Batch& batch) const override {
    if (!batch.positions.defined()) {
      fail("this is a masked-LM model (config.json: BertForMaskedLM); fine-tune it with `ft run --set model.weights=DIR`, "
           "or continue pretraining with `ft pretrain`");
    }
  }
  // Only the masked tokens reach the vocabulary projection, the largest matmul of a small BERT.
  at::Tensor forward(const at::Tensor& tokens, const Batch& batch, const TokenLayout& layout) override {
    return head_->forward(tokens.index_select(0, layout.token_index(batch.positions)));
  }
  void check_features() const override {
    fail("a masked-LM model has no classification head; fine-tune it first (ft run --set model.weights=DIR)");
  }
  bool reads_word_embeddings() const override { return true; }
  bool follows_vocab_parallel(const TensorParallelOps& ops) const override { return static_cast<bool>(ops.gather_columns); }
  std::vector<std::pair<std::string, at::Tensor>> vocab_parallel(const std::shared_ptr<const TensorParallelOps>& tp) override {
    head_->tp = tp;
    if (!head_->bias.defined()) return {};
    return {{bias_name_, head_->bias}};
  }

 private:
  std::shared_ptr<MaskedLmHeadImpl> head_;
  std::shared_ptr<torch::nn::Module> unit_;
  std::string bias_name_;
};

}  // namespace

std::unique_ptr<Head> make_masked_lm(torch::nn::Module& root, BaseModelImpl& base, const BertConfig& c) {
  const MaskedLmForm* form = masked_lm_form_of(c);
  if (!form) {
    fail("model config: ft builds no masked-LM head for {} ({}); fine-tune it as a classifier, or pretrain a bert, "
         "roberta, distilbert, deberta-v2 or modernbert model",
         c.model_type, masked_lm_names(c).architecture);
  }
  auto head = std::make_shared<MaskedLmHeadImpl>();
  head->embeddings = base.embeddings;
  form->transform(root, *head, c);
  if (form->decoder_bias(c)) head->bias = head->register_parameter("bias", at::zeros({c.vocab_size}));
  register_at(root, form->module, head);  // "cls.predictions": a holder, then the head
  const std::string bias_name = masked_lm_names(c).output_bias;
  if (!base.final_norm) return std::make_unique<MaskedLmTask>(head, head, bias_name);
  // The unit also owns the base model's final norm, which the head applies.
  head->final_norm = base.final_norm;
  auto unit = std::make_shared<torch::nn::Module>();
  unit->register_module("final_norm", base.final_norm);
  unit->register_module("mlm", head);
  return std::make_unique<MaskedLmTask>(head, unit, bias_name);
}

HeadNames masked_lm_names(const BertConfig& c) {
  HeadNames names;
  names.architecture = c.family().class_prefix + "ForMaskedLM";
  if (const MaskedLmForm* form = masked_lm_form_of(c)) {
    names.output_weight = std::string(form->decoder) + ".weight";
    names.output_bias = std::string(form->module) + ".bias";
    names.tied_bias = std::string(form->decoder) + ".bias";
  }
  return names;
}

}  // namespace model_detail
}  // namespace ft
