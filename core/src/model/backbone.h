// The seam between the model and its families, private to core/src/model:
// a Backbone is one family (backbones/<family>/), registered by model_type
// in backbones/backbones.cpp. It owns its config.json keys, defaults and
// refusals, builds its embeddings and layers (HF's <Family>Model, BaseModel
// here), initialises them as transformers does, and declares how tensor
// parallelism cuts its Linears. What other code may read about it is its
// EncoderFamily (ft/model/encoder_family.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "ft/model/encoder_family.h"
#include "ft/base/error.h"
#include "ft/model/model.h"
#include "model/embeddings.h"
#include "model/module_parts.h"

namespace ft {
namespace model_detail {

// The encoder a backbone builds, registered at "<base>": embeddings (unit 0),
// the layers (units 1..L) and, where the family has one, the norm after the
// last layer, which the head's unit owns and applies.
struct BaseModelImpl : torch::nn::Module {
  std::shared_ptr<EmbeddingsImpl> embeddings;
  torch::nn::ModuleList layer;  // at the family's `layers` path
  std::vector<std::shared_ptr<EncoderLayer>> layers;
  Norm final_norm{nullptr};
  // A renamed layer registers only the modules with parameters; its dropouts
  // hear train()/eval() through the computing layer itself.
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    for (auto& l : layers) l->train(on);
  }
};

class Backbone {
 public:
  explicit Backbone(EncoderFamily family) : family_(std::move(family)) {}
  virtual ~Backbone() = default;
  const EncoderFamily& family() const { return family_; }

  // config.json: the family's defaults, set before BERT's keys are read
  // (with the family's own spellings already renamed to BERT's in `j`);
  // the family's own keys, read after them; the checks of a whole config;
  // and the keys written back beyond BERT's.
  virtual void set_defaults(const nlohmann::json& j, BertConfig& c, const std::string& source) const {
    (void)j, (void)c, (void)source;
  }
  virtual void read(const nlohmann::json& j, BertConfig& c, const std::string& source) const {
    (void)j, (void)c, (void)source;
  }
  virtual void validate(const BertConfig& c, const std::string& source) const;
  virtual void write(nlohmann::json& j, const BertConfig& c) const { (void)j, (void)c; }
  // The position row of the first token: RoBERTa's start after padding.
  virtual int64_t first_position(const BertConfig& c) const {
    (void)c;
    return 0;
  }

  virtual std::shared_ptr<BaseModelImpl> build(const BertConfig& c) const = 0;
  // After the generic initialisation (ft/model/model.h, init_weights), in the
  // model's parameter order: a family that starts otherwise.
  virtual void init(const torch::OrderedDict<std::string, at::Tensor>& params, const BertConfig& c) const {
    (void)params, (void)c;
  }

  // Tensor parallelism: every layer's Linears with their cuts, and why
  // `ranks` cannot split this family's layers beyond the general rules.
  virtual std::vector<ParallelLinear> parallel_linears(const BertConfig& c) const = 0;
  virtual std::string tensor_parallel_refusal(const BertConfig& c, int ranks) const {
    (void)c, (void)ranks;
    return "";
  }
  // Other layer tensors it cuts (prefix tuning's keys and values, by heads).
  virtual std::vector<std::pair<std::string, TensorCut>> parallel_tensors() const { return {}; }
  // What tensor parallelism knows of this family's layer, for the error on
  // a parameter it cannot place.
  virtual std::string tensor_parallel_knows() const = 0;

 protected:
  EncoderFamily family_;
};

// The backbone of a config.json model_type; anything else fails with one
// line naming `source` and listing supported_model_types().
const Backbone& backbone_of(const std::string& model_type, const std::string& source);

template <typename T>
void read_key(const nlohmann::json& j, const char* key, T& out, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: key '{}' has the wrong type ({})", source, key, it->type_name());
  }
}

}  // namespace model_detail
}  // namespace ft
