// Bottleneck adapters (Houlsby et al. 2019, "Parameter-Efficient Transfer
// Learning for NLP"): in each chosen encoder layer, after the attention
// output projection and after the FFN output projection, before their
// dropout, residual and LayerNorm,
//
//     h <- h + up(act(down(h))),   down: d -> m,  up: m -> d.
//
// up starts at zero, so a fresh adapter leaves the model's function
// unchanged. The base model is frozen; the adapters and the head (pooler +
// classifier) train. Trainable parameters: 2 sites x layers x (2 d m + m + d)
// plus the head.
//
// The adapter of "bert.encoder.layer.0.output.dense" is
// "bert.encoder.layer.0.output.dense.adapter_down.{weight,bias}" and
// ".adapter_up.{weight,bias}", registered under that Linear: they are in
// model.weights() and in the same unit as the layer (ZeRO/FSDP shard them
// with it).
//
// PEFT has no bottleneck adapter (AdapterHub's adapters library does, in its
// own format), so the files are ft's: bottleneck_adapter.safetensors (the
// adapters and the head, HF names) and bottleneck_adapter_config.json. The
// adapters cannot be folded into the base weights (the bottleneck is
// non-linear), so there is no merged export.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/base/types.h"

namespace ft {

class EncoderModel;
struct BertConfig;

// "<module>.adapter_down.weight" / ".bias", "<module>.adapter_up.weight" / ".bias".
bool is_bottleneck_param(const std::string& hf_name);

// What trains with adapters on: the adapters, bert.pooler.* and classifier.*.
bool is_bottleneck_trainable(const std::string& hf_name);

// The encoder layers adapter.layers names (all when empty), checked against
// the model's depth; ft::Error naming adapter.layers otherwise.
std::vector<int64_t> adapter_layers(const AdapterConfig& adapter, int64_t num_layers);

// Adds adapters to the chosen layers; `down` is drawn from a generator seeded
// with `seed` (normal, std = initializer_range), `up` and the biases are zero.
// Returns the adapted module names.
std::vector<std::string> apply_bottleneck_adapters(EncoderModel& model, const AdapterConfig& adapter,
                                                   uint64_t seed);

// Gives `to` (a fresh model of the same config) the adapters `from` has,
// values copied: for strategies that build extra replicas (dp).
void replicate_bottleneck_adapters(const EncoderModel& from, EncoderModel& to);

// Adapter parameters alone: 2 x layers x (2 d m + m + d).
int64_t bottleneck_parameter_count(const BertConfig& config, const AdapterConfig& adapter);

// `weights` without adapter tensors (what model.safetensors of an adapter
// checkpoint holds).
TensorList without_bottleneck_adapters(const TensorList& weights);

// --- Adapter files ---------------------------------------------------------

bool has_bottleneck_adapter(const std::filesystem::path& dir);

// Writes bottleneck_adapter.safetensors (adapters + head, HF names) and
// bottleneck_adapter_config.json into `dir`, each file atomically.
void save_bottleneck_adapter(const std::filesystem::path& dir, const TensorList& weights, const AdapterConfig& adapter,
                             int64_t hidden_size);

// The config of `dir`'s adapter, with `path` set to `dir`. Errors name the
// file and field.
AdapterConfig read_bottleneck_adapter_config(const std::filesystem::path& dir);

// bottleneck_adapter.safetensors (HF names).
TensorList read_bottleneck_adapter_weights(const std::filesystem::path& dir);

// Copies `dir`'s adapter (and head) tensors into a model adapted with the
// same config; every adapter must be there with its shape.
void load_bottleneck_adapter(EncoderModel& model, const std::filesystem::path& dir);

}  // namespace ft
