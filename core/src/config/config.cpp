// Loading a RunConfig: YAML text -> tree -> --set overrides on the tree ->
// typed struct -> validate(). Overrides go into the tree before conversion so
// a value from the command line is type-checked exactly like one from a file.
#include "ft/config/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include <yaml-cpp/yaml.h>

#include "config_fields.h"
#include "ft/config/config_import.h"
#include "ft/base/error.h"
#include "default_data.h"
#include "ft_default_config_yaml.h"  // generated from configs/default.yaml

namespace ft {
namespace {

using config_detail::closest_key;
using config_detail::for_each_field;
using config_detail::sections;

constexpr const char* kSetSource = "--set";

// Who set each key, so an error blames the file or the command line.
class Origins {
 public:
  explicit Origins(std::string file) : file_(std::move(file)) {}
  void mark_override(const std::string& key) { overridden_.insert(key); }
  void mark_import(const std::string& key, std::string origin) { imported_[key] = std::move(origin); }
  // "strategy.options.x" is blamed on --set when it or "strategy.options" was overridden.
  const std::string& of(const std::string& key) const {
    for (const auto& k : overridden_) {
      if (key == k || key.rfind(k + ".", 0) == 0) return set_source_;
    }
    if (auto it = imported_.find(key); it != imported_.end()) return it->second;
    return file_;
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::string set_source_ = kSetSource;
  std::set<std::string> overridden_;
  std::map<std::string, std::string> imported_;  // key -> "ds.json: optimizer.params.lr"
};

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    default: return "nothing";
  }
}

// Where a value sits, for messages: "<origin>: <key>".
struct Where {
  const std::string& origin;
  const std::string& key;
};

[[noreturn]] void type_error(const Where& w, const char* expected, const YAML::Node& node) {
  fail("{}: {}: expected {}, got {}", w.origin, w.key, expected, describe(node));
}

[[noreturn]] void unknown_key(const std::string& origin, const std::string& key) {
  const std::string near = closest_key(key);
  if (!near.empty()) fail("{}: unknown key '{}' (did you mean '{}'?)", origin, key, near);
  if (key.find('.') == std::string::npos) {
    fail("{}: unknown key '{}' (the sections are model, data, train, lora, adapter, prompt, prefix, pretrain, embedding, strategy, runtime)",
         origin, key);
  }
  fail("{}: unknown key '{}' (docs/configuration.md lists every key)", origin, key);
}

void read(const YAML::Node& node, std::string& out, const Where& w) {
  if (node.IsNull()) {
    out.clear();
    return;
  }
  if (!node.IsScalar()) type_error(w, "a string", node);
  out = node.Scalar();
}

void read(const YAML::Node& node, int64_t& out, const Where& w) {
  if (!node.IsScalar()) type_error(w, "an integer", node);
  const std::string& s = node.Scalar();
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') ++begin;
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (s.empty() || ec != std::errc() || ptr != end) type_error(w, "an integer", node);
  out = value;
}

void read(const YAML::Node& node, double& out, const Where& w) {
  if (!node.IsScalar()) type_error(w, "a number", node);
  const std::string& s = node.Scalar();
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') ++begin;
  double value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (s.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
    type_error(w, "a number", node);
  }
  out = value;
}

void read(const YAML::Node& node, std::optional<double>& out, const Where& w) {
  if (node.IsNull()) {
    out.reset();
    return;
  }
  double value = 0;
  read(node, value, w);
  out = value;
}

void read(const YAML::Node& node, bool& out, const Where& w);

void read(const YAML::Node& node, std::optional<bool>& out, const Where& w) {
  if (node.IsNull()) {
    out.reset();
    return;
  }
  bool value = false;
  read(node, value, w);
  out = value;
}

// `auto`, [w0, w1, ...] or {label: w}; every weight a finite number >= 0.
void read(const YAML::Node& node, ClassWeights& out, const Where& w) {
  out = ClassWeights{};
  if (node.IsNull()) return;
  auto weight = [&](const YAML::Node& item) {
    double v = 0;
    read(item, v, w);
    if (v < 0) fail("{}: {}: a class weight is negative ({}); weights must be >= 0", w.origin, w.key, v);
    return v;
  };
  if (node.IsScalar()) {
    if (node.Scalar() != "auto") type_error(w, "auto, a list of weights or a mapping label: weight", node);
    out.automatic = true;
  } else if (node.IsSequence()) {
    for (const auto& item : node) out.values.push_back(weight(item));
  } else {
    for (const auto& kv : node) {
      if (!out.by_name.emplace(kv.first.Scalar(), weight(kv.second)).second) {
        fail("{}: {}: label '{}' appears twice", w.origin, w.key, kv.first.Scalar());
      }
    }
  }
}

// A path, or a mapping name -> path (several named dev sets).
void read(const YAML::Node& node, DevFiles& out, const Where& w) {
  out = DevFiles{};
  if (node.IsNull()) return;
  if (node.IsScalar()) {
    if (!node.Scalar().empty()) out.files.push_back({"", node.Scalar()});
    return;
  }
  if (!node.IsMap()) type_error(w, "a file, or a mapping name: file", node);
  for (const auto& kv : node) {
    const std::string name = kv.first.Scalar();
    if (!kv.second.IsScalar()) fail("{}: {}.{}: expected a file path, got {}", w.origin, w.key, name, describe(kv.second));
    if (name.empty()) fail("{}: {}: a dev set's name is empty", w.origin, w.key);
    for (const auto& f : out.files) {
      if (f.name == name) fail("{}: {}: dev set '{}' appears twice", w.origin, w.key, name);
    }
    out.files.push_back({name, kv.second.Scalar()});
  }
}

void read(const YAML::Node& node, bool& out, const Where& w) {
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (s == "true" || s == "yes" || s == "on") {
      out = true;
      return;
    }
    if (s == "false" || s == "no" || s == "off") {
      out = false;
      return;
    }
  }
  type_error(w, "true or false", node);
}

void read(const YAML::Node& node, std::vector<std::string>& out, const Where& w) {
  out.clear();
  if (node.IsNull()) return;
  if (!node.IsSequence()) type_error(w, "a list like [a, b]", node);
  for (const auto& item : node) {
    if (!item.IsScalar()) {
      fail("{}: {}: expected a list of names, got {} as an item", w.origin, w.key, describe(item));
    }
    out.push_back(item.Scalar());
  }
}

// strategy.options: a flat mapping of scalars, kept as text for the plugin.
void read(const YAML::Node& node, std::map<std::string, std::string>& out, const Where& w,
          const Origins& origins) {
  out.clear();
  if (node.IsNull()) return;
  if (!node.IsMap()) type_error(w, "a mapping of option: value", node);
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) type_error(w, "option names", kv.first);
    const std::string name = kv.first.Scalar();
    const std::string key = w.key + "." + name;
    const YAML::Node& value = kv.second;
    if (!value.IsNull() && !value.IsScalar()) {
      fail("{}: {}: expected a single value, got {}", origins.of(key), key, describe(value));
    }
    if (!out.emplace(name, value.IsNull() ? "" : value.Scalar()).second) {
      fail("{}: {}: the key appears twice", origins.of(key), key);
    }
  }
}

// Reads one section's keys into the struct; unknown and repeated keys fail.
void read_section(const std::string& section, const YAML::Node& node, RunConfig& config,
                  const Origins& origins) {
  if (node.IsNull()) return;  // "train:" with nothing under it
  if (!node.IsMap()) {
    fail("{}: {}: expected a mapping of keys, got {}", origins.of(section), section,
         describe(node));
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      fail("{}: {}: keys must be names, got {}", origins.of(section), section, describe(kv.first));
    }
    const std::string key = section + "." + kv.first.Scalar();
    // HF's name for train.best_metric reads as it; giving both is a repeat.
    const std::string field_name =
        key == "train.metric_for_best_model" ? std::string("best_metric") : kv.first.Scalar();
    if (!seen.insert(section + "." + field_name).second) {
      fail("{}: {}: the key appears twice{}", origins.of(key), key,
           field_name != kv.first.Scalar() ? " (as train.best_metric)" : "");
    }
    bool found = false;
    for_each_field(config, [&](const char* sec, const char* name, auto& field) {
      if (found || section != sec || field_name != name) return;
      found = true;
      const Where where{origins.of(key), key};
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>,
                                   std::map<std::string, std::string>>) {
        read(kv.second, field, where, origins);
      } else {
        read(kv.second, field, where);
      }
    });
    if (!found) unknown_key(origins.of(key), key);
  }
}

RunConfig convert(const YAML::Node& root, const Origins& origins) {
  RunConfig config;
  if (!root || root.IsNull()) return config;
  if (!root.IsMap()) {
    fail("{}: expected a mapping with the sections model, data, train, strategy, runtime; got {}",
         origins.file(), describe(root));
  }
  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) fail("{}: keys must be names, got {}", origins.file(), describe(kv.first));
    const std::string section = kv.first.Scalar();
    if (section == "task") {  // the one top-level key: what is trained
      if (!kv.second.IsScalar()) fail("{}: task: expected a name, got {}", origins.of(section), describe(kv.second));
      const auto task = parse_task(kv.second.Scalar());
      if (!task) {
        fail("{}: task: '{}' is not a task ft trains (text-classification, token-classification, sentence-embedding; fill-mask is "
             "ft pretrain's)",
             origins.of(section), kv.second.Scalar());
      }
      config.task = *task;
      continue;
    }
    if (std::find(sections().begin(), sections().end(), section) == sections().end()) {
      unknown_key(origins.of(section), section);
    }
    if (!seen.insert(section).second) fail("{}: {}: the section appears twice", origins.file(), section);
    read_section(section, kv.second, config, origins);
  }
  return config;
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

bool is_known_field(const std::string& key) {
  const auto keys = config_detail::known_keys();
  if (std::find(keys.begin(), keys.end(), key) != keys.end()) return true;
  const std::string options = "strategy.options.";
  return key.size() > options.size() && key.rfind(options, 0) == 0 &&
         key.find('.', options.size()) == std::string::npos;
}

// "[a, b]", "{k: v}" and quoted text go through the YAML parser; anything else
// is taken verbatim so "--set data.text_field=a: b" means the string "a: b".
YAML::Node parse_override_value(const std::string& text, const std::string& value) {
  if (value.empty() || value == "~" || value == "null" || value == "Null" || value == "NULL") {
    return YAML::Node(YAML::NodeType::Null);
  }
  const char first = value.front();
  if (first == '[' || first == '{' || first == '"' || first == '\'') {
    try {
      return YAML::Load(value);
    } catch (const YAML::Exception& e) {
      fail("{} {}: cannot parse the value: {}", kSetSource, text, e.msg);
    }
  }
  return YAML::Node(value);
}

std::vector<std::string> key_path(const std::string& key) {
  std::vector<std::string> path;
  std::stringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) path.push_back(part);
  return path;
}

// Whether the tree already holds a value at `key`.
bool tree_has(const YAML::Node& root, const std::string& key) {
  YAML::Node node;
  node.reset(root);
  for (const auto& part : key_path(key)) {
    if (!node.IsMap()) return false;
    YAML::Node child = node[part];
    if (!child || child.IsNull()) return false;
    node.reset(child);
  }
  return true;
}

void put(YAML::Node& root, const std::string& key, const YAML::Node& value, const Origins& origins);

// Puts one "a.b=value" (or "strategy.options.k=value") into the tree.
void apply_override(YAML::Node& root, const std::string& text, Origins& origins) {
  const auto eq = text.find('=');
  const std::string key = eq == std::string::npos ? "" : trim(text.substr(0, eq));
  if (key.empty()) fail("{} {}: expected key=value (e.g. --set train.lr=3e-5)", kSetSource, text);
  if (!is_known_field(key)) unknown_key(kSetSource, key);
  put(root, key, parse_override_value(text, trim(text.substr(eq + 1))), origins);
  origins.mark_override(key);
}

void put(YAML::Node& root, const std::string& key, const YAML::Node& value, const Origins& origins) {
  const std::vector<std::string> path = key_path(key);

  // Walk down with reset(): assigning one Node to another would overwrite
  // the referenced node's content instead of moving the handle.
  YAML::Node node;
  node.reset(root);
  std::string walked;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    walked += (i ? "." : "") + path[i];
    YAML::Node child = node[path[i]];
    if (!child || child.IsNull()) {
      node[path[i]] = YAML::Node(YAML::NodeType::Map);
      child.reset(node[path[i]]);
    }
    if (!child.IsMap()) {
      fail("{}: {}: expected a mapping of keys, got {}", origins.of(walked), walked,
           describe(child));
    }
    node.reset(child);
  }
  node[path.back()] = value;
}

YAML::Node parse_yaml(const std::string& yaml, const std::string& source) {
  try {
    return YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    if (e.mark.is_null()) fail("{}: YAML syntax error: {}", source, e.msg);
    fail("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const YAML::Exception& e) {
    fail("{}: cannot read the YAML: {}", source, e.msg);
  }
}

}  // namespace

namespace config_detail {

std::vector<std::string> known_keys() {
  std::vector<std::string> keys{"task"};
  const RunConfig probe;
  for_each_field(probe, [&](const char* sec, const char* name, const auto&) {
    keys.push_back(std::string(sec) + "." + name);
  });
  return keys;
}

}  // namespace config_detail

std::vector<std::string> yaml_keys(const std::string& yaml, const std::string& source_name) {
  std::vector<std::string> keys;
  const YAML::Node root = parse_yaml(yaml, source_name);
  if (!root.IsMap()) return keys;
  for (const auto& section : root) {
    if (!section.second.IsMap()) continue;
    for (const auto& kv : section.second) keys.push_back(section.first.Scalar() + "." + kv.first.Scalar());
  }
  return keys;
}

std::string task_name(RunConfig::Task task) {
  switch (task) {
    case RunConfig::Task::kClassify: return "text-classification";
    case RunConfig::Task::kTokenClassify: return "token-classification";
    case RunConfig::Task::kSentenceEmbedding: return "sentence-embedding";
    case RunConfig::Task::kMaskedLm: return "fill-mask";
  }
  return "";
}

std::optional<RunConfig::Task> parse_task(const std::string& name) {
  for (auto task : {RunConfig::Task::kClassify, RunConfig::Task::kTokenClassify, RunConfig::Task::kSentenceEmbedding,
                    RunConfig::Task::kMaskedLm}) {
    if (task_name(task) == name) return task;
  }
  return std::nullopt;
}

RunConfig config_from_yaml_string(const std::string& yaml, const std::string& source_name,
                                  const std::vector<std::string>& overrides) {
  return config_from_layers(yaml, source_name, false, ConfigImports{}, overrides);
}

RunConfig config_from_layers(const std::string& yaml, const std::string& source_name, bool yaml_is_default,
                             const ConfigImports& imports, const std::vector<std::string>& overrides) {
  YAML::Node root = parse_yaml(yaml, source_name);
  Origins origins(source_name);
  const std::vector<ImportedValue> imported = imports.values();
  if (!overrides.empty() || !imported.empty()) {
    if (!root || root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
    if (!root.IsMap()) {
      fail("{}: expected a mapping with the sections model, data, train, strategy, runtime",
           source_name);
    }
    // Below the user's YAML, above the embedded default run.
    std::vector<std::string> imported_options;
    std::string imported_strategy;
    for (const auto& v : imported) {
      if (v.key == "strategy.name") imported_strategy = v.value;
      if (!yaml_is_default && tree_has(root, v.key)) continue;
      put(root, v.key, YAML::Node(v.value), origins);
      origins.mark_import(v.key, v.source + ": " + v.from);
      if (v.key.rfind("strategy.options.", 0) == 0) imported_options.push_back(v.key);
    }
    for (const auto& text : overrides) apply_override(root, text, origins);
    // Imported options belong to the imported strategy: when the YAML or
    // --set chose another one, they would only be refused by its plugin.
    const YAML::Node name = root["strategy"] ? root["strategy"]["name"] : YAML::Node();
    if (!imported_strategy.empty() && name && name.IsScalar() && name.Scalar() != imported_strategy) {
      for (const auto& key : imported_options) {
        if (origins.of(key) == kSetSource) continue;
        root["strategy"]["options"].remove(key.substr(std::string("strategy.options.").size()));
      }
    }
  }
  RunConfig config = convert(root, origins);
  if (yaml_is_default) {
    locate_default_data(config, [&](const std::string& key) { return origins.of(key) == origins.file(); });
  }
  config.source = source_name;
  if (!imported.empty()) config.source += " + " + imports.sources();
  if (!overrides.empty()) config.source += std::string(" + ") + kSetSource;
  validate(config);
  return config;
}

std::string read_config_file(const std::string& yaml_path) {
  std::error_code ec;
  if (!std::filesystem::exists(yaml_path, ec)) {
    fail("{}: config file not found (relative paths are from the working directory {})",
         yaml_path, std::filesystem::current_path(ec).string());
  }
  if (std::filesystem::is_directory(yaml_path, ec)) {
    fail("{}: is a directory; --config wants a YAML file (see configs/)", yaml_path);
  }
  std::ifstream in(yaml_path, std::ios::binary);
  if (!in) fail("{}: cannot open the config file", yaml_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("{}: cannot read the config file", yaml_path);
  return text;
}

RunConfig load_config(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  return config_from_yaml_string(read_config_file(yaml_path), yaml_path, overrides);
}

const std::string& default_config_yaml() {
  static const std::string text = kFtDefaultConfigYaml;
  return text;
}

RunConfig default_config() {
  return config_from_yaml_string(default_config_yaml(), "built-in default (configs/default.yaml)",
                                 {});
}

}  // namespace ft
