#include "ft/encoder_family.h"

#include <fmt/ranges.h>

#include "ft/error.h"

namespace ft {
namespace {

const std::vector<EncoderFamily>& families() {
  // A function-local constant, not a mutable global: built once, read only.
  static const std::vector<EncoderFamily> all = [] {
    EncoderFamily bert{"bert", "Bert", "bert", false, ClassifierStyle::kPooler, "cls.predictions", {"cls."}, false};
    EncoderFamily roberta{"roberta", "Roberta", "roberta", true, ClassifierStyle::kDenseTanh, "lm_head", {"lm_head."},
                          false};
    // ELECTRA's masked LM is the generator, another model; the discriminator
    // checkpoints people fine-tune carry discriminator_predictions.*.
    EncoderFamily electra{"electra", "Electra", "electra", false, ClassifierStyle::kDenseGelu, "",
                          {"discriminator_predictions.", "generator_predictions.", "generator_lm_head."}, true};
    // Same modules and names as RoBERTa (transformers copies the classes);
    // only the class names and model_type differ.
    EncoderFamily xlmr = roberta, camembert = roberta;
    xlmr.model_type = "xlm-roberta", xlmr.class_prefix = "XLMRoberta";
    camembert.model_type = "camembert", camembert.class_prefix = "Camembert";
    // DistilBERT: BERT's post-norm layer under its own names, no token types
    // and no pooler; its masked LM is top-level modules.
    EncoderFamily distilbert{"distilbert", "DistilBert", "distilbert", false, ClassifierStyle::kPreClassifier,
                             "vocab_projector", {"vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "pre_classifier."},
                             false};
    distilbert.token_types = false;
    distilbert.layers = "transformer.layer";
    distilbert.layer_names = {{"attention.self.query", "attention.q_lin"},     {"attention.self.key", "attention.k_lin"},
                              {"attention.self.value", "attention.v_lin"},     {"attention.output.dense", "attention.out_lin"},
                              {"attention.output.LayerNorm", "sa_layer_norm"}, {"intermediate.dense", "ffn.lin1"},
                              {"output.dense", "ffn.lin2"},                    {"output.LayerNorm", "output_layer_norm"}};
    distilbert.config_keys = {{"hidden_size", "dim"},
                              {"num_hidden_layers", "n_layers"},
                              {"num_attention_heads", "n_heads"},
                              {"intermediate_size", "hidden_dim"},
                              {"hidden_dropout_prob", "dropout"},
                              {"attention_probs_dropout_prob", "attention_dropout"},
                              {"hidden_act", "activation"},
                              {"classifier_dropout", "seq_classif_dropout"}};
    electra.embedding_unit_modules = {"embeddings_project."};
    // DeBERTa-v2 and v3: BERT's post-norm layer with disentangled attention
    // (its own q/k/v names), a ContextPooler head, and the legacy masked LM
    // (cls.predictions, BERT's layout). Pretrained files may carry the
    // replaced-token-detection head and unused absolute positions.
    EncoderFamily deberta{"deberta-v2", "DebertaV2", "deberta", false, ClassifierStyle::kContextPooler,
                          "cls.predictions",
                          {"cls.", "pooler.", "lm_predictions.", "mask_predictions.", "deberta.embeddings.position_embeddings."},
                          false};
    deberta.disentangled_attention = true;
    deberta.embedding_unit_modules = {"encoder.rel_embeddings.", "encoder.LayerNorm."};
    deberta.layer_names = {{"attention.self.query", "attention.self.query_proj"},
                           {"attention.self.key", "attention.self.key_proj"},
                           {"attention.self.value", "attention.self.value_proj"},
                           {"attention.output.dense", "attention.output.dense"},
                           {"attention.output.LayerNorm", "attention.output.LayerNorm"},
                           {"intermediate.dense", "intermediate.dense"},
                           {"output.dense", "output.dense"},
                           {"output.LayerNorm", "output.LayerNorm"}};
    // ModernBERT: its own layer and names, no token types; the masked LM's
    // head.dense and head.norm are the classifier's too, so a masked-LM
    // checkpoint leaves only the classifier new (and the reverse only the decoder).
    EncoderFamily modernbert{"modernbert", "ModernBert", "model", false, ClassifierStyle::kPredictionHead, "decoder",
                             {"decoder."}, false};
    modernbert.token_types = false;
    modernbert.modern_layer = true;
    modernbert.layers = "layers";
    // Only where bottleneck adapters sit (the two output projections); the
    // layer itself is ModernBERT's own, registered under its own names.
    modernbert.layer_names = {{"attention.output.dense", "attn.Wo"}, {"output.dense", "mlp.Wo"}};
    modernbert.config_keys = {{"hidden_act", "hidden_activation"},
                              {"layer_norm_eps", "norm_eps"},
                              {"hidden_dropout_prob", "mlp_dropout"},
                              {"attention_probs_dropout_prob", "attention_dropout"}};
    return std::vector<EncoderFamily>{bert, roberta, xlmr, camembert, electra, distilbert, deberta, modernbert};
  }();
  return all;
}

}  // namespace

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& f : families()) out.push_back(f.model_type);
  return out;
}

const EncoderFamily& encoder_family(const std::string& model_type, const std::string& source) {
  for (const auto& f : families())
    if (f.model_type == model_type) return f;
  fail("{}: model_type '{}' is not supported; ft builds {}", source, model_type,
       fmt::join(supported_model_types(), ", "));
}

}  // namespace ft
