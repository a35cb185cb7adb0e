#include "ft/model/adapter.h"

#include <algorithm>
#include <map>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "text_affix.h"

namespace ft {
namespace fsys = std::filesystem;
using nlohmann::json;

namespace {

const char kAdapterWeightsFile[] = "bottleneck_adapter.safetensors";
const char kAdapterConfigFile[] = "bottleneck_adapter_config.json";
const char* const kSites[] = {"attention.output.dense", "output.dense"};

// The classifier, and BERT's pooler, which transformers' head-only training
// leaves trainable too ("<base>.pooler.*" in every family that has one).
bool is_head(const std::string& name) {
  return is_classifier_parameter(name) || name.find(".pooler.") != std::string::npos;
}

// The non-linearity, kept beside the adapter's Linears (no parameters) so
// replicate_bottleneck_adapters() can rebuild the same function.
struct AdapterAct : torch::nn::Module {
  explicit AdapterAct(bool r) : relu(r) {}
  bool relu;
};

// Routes `linear`'s output through its adapter; the closure holds the
// modules, whose parameters follow set_data() as LinearImpl's own do.
void attach(AdaptableLinearImpl& linear, torch::nn::Linear down, torch::nn::Linear up, bool relu) {
  linear.register_module("adapter_down", down);
  linear.register_module("adapter_up", up);
  linear.register_module("adapter_act", std::make_shared<AdapterAct>(relu));
  linear.output_adapter = [down, up, relu](const at::Tensor& h) mutable {
    const at::Tensor z = down(h);
    return up(relu ? at::relu(z) : at::gelu(z));
  };
}

std::vector<std::pair<std::string, std::shared_ptr<AdaptableLinearImpl>>> sites(EncoderModel& model,
                                                                                const AdapterConfig& adapter) {
  const auto modules = model.named_modules("", /*include_self=*/false);
  std::vector<std::pair<std::string, std::shared_ptr<AdaptableLinearImpl>>> out;
  for (int64_t layer : adapter_layers(adapter, model.config().num_hidden_layers)) {
    for (const char* site : kSites) {
      const EncoderFamily& family = model.config().family();
      const std::string name = family.layer_prefix(layer) + family.layer_name(site);
      const auto* found = modules.find(name);
      auto linear = found ? std::dynamic_pointer_cast<AdaptableLinearImpl>(*found) : nullptr;
      if (!linear) fail("adapter: the model has no Linear '{}'", name);
      if (linear->output_adapter) fail("adapter: '{}' already has an adapter (applied twice)", name);
      out.emplace_back(name, std::move(linear));
    }
  }
  return out;
}

}  // namespace

bool is_bottleneck_param(const std::string& hf_name) {
  for (const char* p : {".adapter_down.weight", ".adapter_down.bias", ".adapter_up.weight", ".adapter_up.bias"})
    if (ends_with(hf_name, p)) return true;
  return false;
}

bool is_bottleneck_trainable(const std::string& hf_name) { return is_bottleneck_param(hf_name) || is_head(hf_name); }

std::vector<int64_t> adapter_layers(const AdapterConfig& adapter, int64_t num_layers) {
  std::vector<int64_t> out;
  if (adapter.layers.empty()) {
    for (int64_t i = 0; i < num_layers; ++i) out.push_back(i);
    return out;
  }
  for (const auto& text : adapter.layers) {
    int64_t layer = -1;
    try {
      std::size_t used = 0;
      layer = std::stoll(text, &used);
      if (used != text.size()) layer = -1;
    } catch (const std::exception&) {
    }
    if (layer < 0 || layer >= num_layers) {
      fail("adapter.layers: '{}' is not an encoder layer of this model (0 to {})", text, num_layers - 1);
    }
    if (std::find(out.begin(), out.end(), layer) != out.end()) fail("adapter.layers: layer {} is listed twice", layer);
    out.push_back(layer);
  }
  return out;
}

std::vector<std::string> apply_bottleneck_adapters(EncoderModel& model, const AdapterConfig& adapter,
                                                   uint64_t seed) {
  if (adapter.size <= 0) fail("adapter.size: must be > 0 to add adapters, got {}", adapter.size);
  auto chosen = sites(model, adapter);
  // One generator, in model order: the same seed gives the same adapters on every rank.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double std_dev = model.config().initializer_range;
  const bool relu = adapter.non_linearity == "relu";
  std::vector<std::string> names;
  torch::NoGradGuard no_grad;
  for (auto& [name, linear] : chosen) {
    const int64_t d = linear->weight.size(0);
    const auto opts = linear->weight.options();
    torch::nn::Linear down(torch::nn::LinearOptions(d, adapter.size)), up(torch::nn::LinearOptions(adapter.size, d));
    down->weight.set_data(at::empty({adapter.size, d}, at::kFloat).normal_(0.0, std_dev, gen).to(opts));
    down->bias.set_data(at::zeros({adapter.size}, opts));
    up->weight.set_data(at::zeros({d, adapter.size}, opts));
    up->bias.set_data(at::zeros({d}, opts));
    attach(*linear, down, up, relu);
    names.push_back(name);
  }
  return names;
}

void replicate_bottleneck_adapters(const EncoderModel& from, EncoderModel& to) {
  const auto targets = to.named_modules("", /*include_self=*/false);
  torch::NoGradGuard no_grad;
  for (const auto& item : from.named_modules("", /*include_self=*/false)) {
    auto linear = std::dynamic_pointer_cast<AdaptableLinearImpl>(item.value());
    if (!linear || !linear->output_adapter) continue;
    const auto children = linear->named_children();
    auto down = std::dynamic_pointer_cast<torch::nn::LinearImpl>(children["adapter_down"]);
    auto up = std::dynamic_pointer_cast<torch::nn::LinearImpl>(children["adapter_up"]);
    auto act = std::dynamic_pointer_cast<AdapterAct>(children["adapter_act"]);
    const auto* dst = targets.find(item.key());
    auto twin = dst ? std::dynamic_pointer_cast<AdaptableLinearImpl>(*dst) : nullptr;
    if (!down || !up || !act || !twin || twin->output_adapter) {
      fail("adapter: cannot replicate the adapter of '{}'", item.key());
    }
    torch::nn::Linear d2(torch::nn::LinearOptions(down->weight.size(1), down->weight.size(0)));
    torch::nn::Linear u2(torch::nn::LinearOptions(up->weight.size(1), up->weight.size(0)));
    d2->weight.set_data(down->weight.detach().clone());
    d2->bias.set_data(down->bias.detach().clone());
    u2->weight.set_data(up->weight.detach().clone());
    u2->bias.set_data(up->bias.detach().clone());
    attach(*twin, d2, u2, act->relu);
  }
}

int64_t bottleneck_parameter_count(const BertConfig& config, const AdapterConfig& adapter) {
  const int64_t d = config.hidden_size, m = adapter.size;
  const auto layers = static_cast<int64_t>(adapter_layers(adapter, config.num_hidden_layers).size());
  return 2 * layers * (2 * d * m + m + d);
}

TensorList without_bottleneck_adapters(const TensorList& weights) {
  TensorList out;
  for (const auto& [name, t] : weights)
    if (!is_bottleneck_param(name)) out.emplace_back(name, t);
  return out;
}

bool has_bottleneck_adapter(const fsys::path& dir) { return fsys::exists(dir / kAdapterConfigFile); }

void save_bottleneck_adapter(const fsys::path& dir, const TensorList& weights, const AdapterConfig& adapter,
                             int64_t hidden_size) {
  TensorList picked;
  for (const auto& [name, t] : weights)
    if (is_bottleneck_trainable(name)) picked.emplace_back(name, t);
  safetensors::save((dir / kAdapterWeightsFile).string(), picked, {{"format", "pt"}});
  json j;
  j["adapter_type"] = "bottleneck";
  j["architecture"] = "houlsby";  // after attention output and FFN output, before residual + LayerNorm
  j["hidden_size"] = hidden_size;
  j["bottleneck_size"] = adapter.size;
  j["layers"] = adapter.layers;
  j["non_linearity"] = adapter.non_linearity;
  j["sites"] = {kSites[0], kSites[1]};
  j["trainable"] = "adapters, bert.pooler, classifier";
  fs::write_file_atomic(dir / kAdapterConfigFile, j.dump(2) + "\n");
}

AdapterConfig read_bottleneck_adapter_config(const fsys::path& dir) {
  const fsys::path file = dir / kAdapterConfigFile;
  AdapterConfig a;
  try {
    const json j = json::parse(fs::read_file(file));
    if (j.value("adapter_type", "") != "bottleneck") fail("{}: adapter_type must be \"bottleneck\"", file.string());
    a.size = j.at("bottleneck_size").get<int64_t>();
    a.layers = j.value("layers", std::vector<std::string>{});
    a.non_linearity = j.value("non_linearity", std::string("gelu"));
  } catch (const json::exception& e) {
    fail("{}: malformed adapter config ({})", file.string(), e.what());
  }
  if (a.size <= 0) fail("{}: bottleneck_size must be > 0, got {}", file.string(), a.size);
  if (a.non_linearity != "gelu" && a.non_linearity != "relu") {
    fail("{}: non_linearity must be gelu or relu, got '{}'", file.string(), a.non_linearity);
  }
  a.path = dir.string();
  return a;
}

TensorList read_bottleneck_adapter_weights(const fsys::path& dir) {
  return safetensors::load((dir / kAdapterWeightsFile).string());
}

void load_bottleneck_adapter(EncoderModel& model, const fsys::path& dir) {
  std::map<std::string, at::Tensor> file;
  for (auto& [name, t] : read_bottleneck_adapter_weights(dir)) file[name] = t;
  const std::string source = (dir / kAdapterWeightsFile).string();
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const bool adapter = is_bottleneck_param(name);
    if (!adapter && !is_head(name)) continue;
    auto it = file.find(name);
    if (it == file.end()) {
      if (adapter) fail("{}: adapter tensor '{}' is missing (adapter.size or adapter.layers differ?)", source, name);
      continue;
    }
    if (it->second.sizes() != item.value().sizes()) {
      fail("{}: '{}' is {}, the model's is {}", source, name, fmt::join(it->second.sizes(), "x"),
           fmt::join(item.value().sizes(), "x"));
    }
    item.value().copy_(it->second);
  }
}

}  // namespace ft
