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
    return std::vector<EncoderFamily>{bert, roberta, xlmr, camembert, electra};
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
