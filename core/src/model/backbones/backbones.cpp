// The registry of backbones by model_type: one line per family.
#include <fmt/ranges.h>

#include "ft/model/encoder_family.h"
#include "ft/base/error.h"
#include "model/backbones/backbones.h"

namespace ft {
namespace model_detail {
namespace {

const std::vector<std::unique_ptr<Backbone>>& backbones() {
  // A function-local constant, not a mutable global: built once, read only.
  static const std::vector<std::unique_ptr<Backbone>> all = [] {
    std::vector<std::unique_ptr<Backbone>> out;
    out.push_back(make_bert());
    out.push_back(make_roberta("roberta", "Roberta"));
    out.push_back(make_roberta("xlm-roberta", "XLMRoberta"));
    out.push_back(make_roberta("camembert", "Camembert"));
    out.push_back(make_electra());
    out.push_back(make_distilbert());
    out.push_back(make_deberta());
    out.push_back(make_modernbert());
    return out;
  }();
  return all;
}

}  // namespace

const Backbone& backbone_of(const std::string& model_type, const std::string& source) {
  for (const auto& b : backbones())
    if (b->family().model_type == model_type) return *b;
  fail("{}: model_type '{}' is not supported; ft builds {}", source, model_type,
       fmt::join(supported_model_types(), ", "));
}

void Backbone::validate(const BertConfig& c, const std::string& source) const {
  if (c.type_vocab_size <= 0) fail("{}: type_vocab_size must be positive, got {}", source, c.type_vocab_size);
}

}  // namespace model_detail

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& b : model_detail::backbones()) out.push_back(b->family().model_type);
  return out;
}

const EncoderFamily& encoder_family(const std::string& model_type, const std::string& source) {
  return model_detail::backbone_of(model_type, source).family();
}

}  // namespace ft
