// Reading and writing sentence-transformers' module files (see
// ft/tasks/sentence_transformers.h).
#include "ft/tasks/sentence_transformers.h"

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/io/safetensors.h"
#include "ft/io/torch_bin.h"

namespace ft {
namespace fsys = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr char kModules[] = "modules.json";
// The module types ft writes (the names every sentence-transformers release
// reads); 6.x writes them under new paths (sentence_transformers.base.
// modules.dense.Dense, ...), so reading goes by the class name alone.
constexpr char kTransformer[] = "sentence_transformers.models.Transformer";
constexpr char kPooling[] = "sentence_transformers.models.Pooling";
constexpr char kDense[] = "sentence_transformers.models.Dense";
constexpr char kNormalize[] = "sentence_transformers.models.Normalize";

std::string class_name(const std::string& type) { return type.substr(type.rfind('.') + 1); }
constexpr char kIdentity[] = "torch.nn.modules.linear.Identity";
constexpr char kTanh[] = "torch.nn.modules.activation.Tanh";

// The pooling modes ft computes, by 1_Pooling/config.json's key.
const std::vector<std::pair<std::string, std::string>>& pooling_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"pooling_mode_cls_token", "cls"},
      {"pooling_mode_mean_tokens", "mean"},
      {"pooling_mode_max_tokens", "max"},
      {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"},
  };
  return keys;
}

json read_json(const fsys::path& file) {
  if (!fsys::exists(file)) fail("{}: missing; the directory's modules.json names it", file.string());
  try {
    return json::parse(fs::read_file(file));
  } catch (const json::exception& e) {
    fail("{}: malformed JSON ({})", file.string(), e.what());
  }
}

bool flag(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

std::string read_pooling(const fsys::path& file, int64_t hidden) {
  const json j = read_json(file);
  // 6.x: {"embedding_dimension", "pooling_mode": "mean"}; before: a flag per mode.
  if (j.contains("pooling_mode")) {
    const json& m = j["pooling_mode"];
    const std::string mode = m.is_string() ? m.get<std::string>() : m.dump();
    bool known = false;
    for (const auto& entry : pooling_keys()) known |= entry.second == mode;
    if (!known) fail("{}: pooling_mode {} is not a pooling ft computes (cls, mean, max, mean_sqrt_len_tokens)", file.string(), mode);
    if (j.contains("embedding_dimension") && j["embedding_dimension"] != hidden) {
      fail("{}: embedding_dimension {} but the encoder's hidden_size is {}", file.string(), j["embedding_dimension"].dump(),
           hidden);
    }
    return mode;
  }
  std::string mode;
  for (const auto& [key, name] : pooling_keys()) {
    if (!flag(j, key.c_str())) continue;
    if (!mode.empty()) {
      fail("{}: pools by both {} and {} (concatenated); ft computes one pooling mode per model", file.string(), mode,
           name);
    }
    mode = name;
  }
  for (const char* other : {"pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"}) {
    if (flag(j, other)) fail("{}: {} is not a pooling ft computes (cls, mean, max, mean_sqrt_len_tokens)", file.string(), other);
  }
  if (mode.empty()) fail("{}: no pooling mode is true; set one of pooling_mode_mean_tokens, _cls_token, _max_tokens", file.string());
  if (j.contains("word_embedding_dimension") && j["word_embedding_dimension"] != hidden) {
    fail("{}: word_embedding_dimension {} but the encoder's hidden_size is {}", file.string(),
         j["word_embedding_dimension"].dump(), hidden);
  }
  return mode;
}

void read_dense(const fsys::path& file, const BertConfig& c, BertConfig::SentenceModules& s) {
  const json j = read_json(file);
  if (!j.contains("out_features") || !j["out_features"].is_number_integer() || j["out_features"].get<int64_t>() < 1) {
    fail("{}: out_features must be a positive integer", file.string());
  }
  if (j.contains("in_features") && j["in_features"] != c.hidden_size) {
    fail("{}: in_features {} but the pooled embedding has {} (the encoder's hidden_size)", file.string(),
         j["in_features"].dump(), c.hidden_size);
  }
  s.dense_out = j["out_features"].get<int64_t>();
  s.dense_bias = !j.contains("bias") || flag(j, "bias");
  s.dense_activation = j.value("activation_function", std::string(kTanh));
  if (s.dense_activation != kTanh && s.dense_activation != kIdentity) {
    fail("{}: activation_function {} is not one ft computes ({} or {})", file.string(), s.dense_activation, kTanh,
         kIdentity);
  }
}

// The module folder of entry `m` of modules.json.
fsys::path module_dir(const fsys::path& dir, const json& m) { return dir / m.value("path", std::string()); }

}  // namespace

bool has_sentence_modules(const fsys::path& dir) { return fsys::exists(dir / kModules); }

void read_sentence_modules(const fsys::path& dir, BertConfig& c) {
  const fsys::path file = dir / kModules;
  const json modules = read_json(file);
  if (!modules.is_array() || modules.empty()) fail("{}: expected a list of modules", file.string());
  BertConfig::SentenceModules s;
  // The order sentence-transformers gives such a model: each next module may
  // only come after the ones before it.
  const std::vector<std::string> order = {"Transformer", "Pooling", "Dense", "Normalize"};
  size_t at = 0;
  bool pooled = false;
  for (const auto& m : modules) {
    const std::string full = m.is_object() ? m.value("type", std::string()) : std::string();
    const std::string type = class_name(full);
    size_t k = at;
    while (k < order.size() && order[k] != type) ++k;
    if (k == order.size()) {
      const bool known = std::find(order.begin(), order.end(), type) != order.end();
      fail("{}: module '{}' {}; ft reads Transformer, Pooling, Dense and Normalize, in that order", file.string(),
           full, known ? "comes out of order" : "is not one ft computes");
    }
    if (k == 0 && !m.value("path", std::string()).empty()) {
      fail("{}: the Transformer lives in '{}'; ft reads a directory whose encoder files are at its top", file.string(),
           m.value("path", std::string()));
    }
    if (type == "Pooling") {
      s.pooling = read_pooling(module_dir(dir, m) / "config.json", c.hidden_size);
      pooled = true;
    } else if (type == "Dense") {
      read_dense(module_dir(dir, m) / "config.json", c, s);
    } else if (type == "Normalize") {
      s.normalize = true;
    }
    at = k + 1;
  }
  if (!pooled) fail("{}: no Pooling module; a sentence embedding needs one (1_Pooling/config.json)", file.string());
  if (fsys::exists(dir / "sentence_bert_config.json")) {
    const json sb = read_json(dir / "sentence_bert_config.json");
    if (sb.contains("max_seq_length") && sb["max_seq_length"].is_number_integer())
      s.max_seq_length = sb["max_seq_length"].get<int64_t>();
    s.do_lower_case = flag(sb, "do_lower_case");
  }
  c.sentence = s;
  c.head = BertHead::kSentenceEmbedding;
}

TensorList read_sentence_dense(const fsys::path& dir, const BertConfig& c) {
  if (c.sentence.dense_out == 0) return {};
  const json modules = read_json(dir / kModules);
  fsys::path folder;
  for (const auto& m : modules)
    if (class_name(m.value("type", std::string())) == "Dense") folder = module_dir(dir, m);
  TensorList weights;
  if (fsys::exists(folder / "model.safetensors")) {
    weights = safetensors::load((folder / "model.safetensors").string());
  } else if (fsys::exists(folder / "pytorch_model.bin")) {
    weights = load_pytorch_bin((folder / "pytorch_model.bin").string());
  } else {
    fail("{}: the Dense module has no model.safetensors or pytorch_model.bin", folder.string());
  }
  TensorList named;
  for (auto& [name, t] : weights) {
    if (name == "linear.weight") {
      if (t.dim() != 2 || t.size(0) != c.sentence.dense_out || t.size(1) != c.hidden_size) {
        fail("{}: linear.weight is {}x{}, config.json says [{}, {}]", folder.string(), t.size(0),
             t.dim() > 1 ? t.size(1) : 0, c.sentence.dense_out, c.hidden_size);
      }
      named.emplace_back(kSentenceDenseWeight, t);
    } else if (name == "linear.bias") {
      named.emplace_back(kSentenceDenseBias, t);
    } else {
      fail("{}: unexpected tensor '{}' in the Dense module (linear.weight, linear.bias)", folder.string(), name);
    }
  }
  if (named.empty()) fail("{}: the Dense module's weights hold no linear.weight", folder.string());
  return named;
}

TensorList write_sentence_modules(const fsys::path& dir, const BertConfig& c, const TensorList& model) {
  const auto& s = c.sentence;
  json modules = json::array();
  auto add = [&](const std::string& path, const char* type) {
    const auto idx = static_cast<int>(modules.size());
    modules.push_back({{"idx", idx}, {"name", std::to_string(idx)}, {"path", path}, {"type", type}});
  };
  add("", kTransformer);
  add("1_Pooling", kPooling);
  json pooling = {{"word_embedding_dimension", c.hidden_size}};
  for (const auto& [key, name] : pooling_keys()) pooling[key] = name == s.pooling;
  pooling["pooling_mode_weightedmean_tokens"] = false;
  pooling["pooling_mode_lasttoken"] = false;
  pooling["include_prompt"] = true;
  fsys::create_directories(dir / "1_Pooling");
  fs::write_file_atomic(dir / "1_Pooling" / "config.json", pooling.dump(2) + "\n");
  TensorList encoder, dense;
  for (const auto& [name, t] : model) {
    if (name == kSentenceDenseWeight) {
      dense.emplace_back("linear.weight", t);
    } else if (name == kSentenceDenseBias) {
      dense.emplace_back("linear.bias", t);
    } else {
      encoder.emplace_back(name, t);
    }
  }
  TensorList base = base_model_names(c, encoder);
  if (s.dense_out > 0) {
    const std::string folder = std::to_string(modules.size()) + "_Dense";
    add(folder, kDense);
    fsys::create_directories(dir / folder);
    const json cfg = {{"in_features", c.hidden_size},
                      {"out_features", s.dense_out},
                      {"bias", s.dense_bias},
                      {"activation_function", s.dense_activation}};
    fs::write_file_atomic(dir / folder / "config.json", cfg.dump(2) + "\n");
    safetensors::save((dir / folder / "model.safetensors").string(), dense, {{"format", "pt"}});
  }
  if (s.normalize) add(std::to_string(modules.size()) + "_Normalize", kNormalize);
  fs::write_file_atomic(dir / kModules, modules.dump(2) + "\n");
  json sb = {{"max_seq_length", s.max_seq_length > 0 ? s.max_seq_length : c.max_tokens()},
             {"do_lower_case", s.do_lower_case}};
  fs::write_file_atomic(dir / "sentence_bert_config.json", sb.dump(2) + "\n");
  const json versions = {{"__version__", {{"sentence_transformers", "6.2.0"}}},
                         {"prompts", json::object()},
                         {"default_prompt_name", nullptr},
                         {"similarity_fn_name", "cosine"}};
  fs::write_file_atomic(dir / "config_sentence_transformers.json", versions.dump(2) + "\n");
  return base;
}

TensorList base_model_names(const BertConfig& c, const TensorList& weights) {
  const std::string prefix = c.family().prefix();
  TensorList out;
  out.reserve(weights.size());
  for (const auto& [name, t] : weights) {
    out.emplace_back(name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name, t);
  }
  return out;
}

}  // namespace ft
