// Private to the config importers: collecting one file's ft values, warnings
// and errors, and reading typed values out of its JSON tree (accelerate's
// YAML is turned into the same tree first).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "ft/config/config_import.h"
#include "ft/base/error.h"

namespace ft::config_import {

using Json = nlohmann::json;

// "auto" means "the Trainer fills it in": left to the other layers.
inline bool is_auto(const Json& j) { return j.is_string() && j.get<std::string>() == "auto"; }

// A JSON tree with the dotted path of each value, for messages.
struct Field {
  const Json& json;
  std::string key;  // "zero_optimization.stage"

  Field at(const std::string& name) const { return {json.at(name), key.empty() ? name : key + "." + name}; }
  bool has(const std::string& name) const { return json.is_object() && json.contains(name); }
};

class Builder {
 public:
  explicit Builder(std::string source) { out_.source = std::move(source); }

  const std::string& source() const { return out_.source; }

  void set(const std::string& key, std::string value, const std::string& from) {
    for (auto& v : out_.values) {
      if (v.key == key) {  // a later key of the same file refines an earlier one
        v = {key, std::move(value), from, out_.source};
        return;
      }
    }
    out_.values.push_back({key, std::move(value), from, out_.source});
  }
  void set(const std::string& key, int64_t value, const std::string& from) { set(key, std::to_string(value), from); }
  void set(const std::string& key, double value, const std::string& from) { set(key, fmt::format("{}", value), from); }
  void set(const std::string& key, bool value, const std::string& from) { set(key, std::string(value ? "true" : "false"), from); }
  void set(const std::string& key, const char* value, const std::string& from) { set(key, std::string(value), from); }

  // The value this file gave `key`, if any.
  std::optional<std::string> get(const std::string& key) const {
    for (const auto& v : out_.values)
      if (v.key == key) return v.value;
    return std::nullopt;
  }

  void warn(const std::string& from, const std::string& what) {
    out_.warnings.push_back(fmt::format("{}: {}: {}", out_.source, from, what));
  }
  template <typename... Args>
  [[noreturn]] void error(const std::string& from, fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: {}: {}", out_.source, from, fmt::format(format, std::forward<Args>(args)...));
  }

  ImportedLaunch& launch() { return out_.launch; }
  ImportedConfig take() { return std::move(out_); }

  // --- typed reads; a wrong type is an error naming the key ---
  double number(const Field& f) const {
    if (f.json.is_number()) return f.json.get<double>();
    if (f.json.is_string()) {  // "2e8", as YAML and some generators write numbers
      const std::string s = f.json.get<std::string>();
      try {
        std::size_t used = 0;
        const double d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (const std::exception&) {
      }
    }
    error(f.key, "expected a number, got {}", f.json.dump());
  }
  int64_t integer(const Field& f) const {
    const double d = number(f);
    if (d != static_cast<double>(static_cast<int64_t>(d))) error(f.key, "expected a whole number, got {}", f.json.dump());
    return static_cast<int64_t>(d);
  }
  bool boolean(const Field& f) const {
    if (f.json.is_boolean()) return f.json.get<bool>();
    if (f.json.is_string()) {
      const std::string s = f.json.get<std::string>();
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
    }
    error(f.key, "expected true or false, got {}", f.json.dump());
  }
  std::string text(const Field& f) const {
    if (f.json.is_string()) return f.json.get<std::string>();
    if (f.json.is_number()) return f.json.dump();
    error(f.key, "expected a string, got {}", f.json.dump());
  }
  void object(const Field& f) const {
    if (!f.json.is_object()) error(f.key, "expected a mapping of keys, got {}", f.json.dump());
  }

 private:
  ImportedConfig out_;
};

// File readers shared by the importers; errors name the file.
Json read_json_file(const std::string& path, const char* what);
Json read_yaml_file_as_json(const std::string& path, const char* what);

// Each importer fills `b` from `root`; `imports` lets a file name another.
void import_deepspeed_tree(Builder& b, const Json& root, int world_size);
void import_accelerate_tree(Builder& b, const Json& root, ConfigImports& imports);
void import_training_args_tree(Builder& b, const Json& root, ConfigImports& imports);
// fsdp_config, shared by accelerate and TrainingArguments.
void import_fsdp_config(Builder& b, const Field& cfg);

}  // namespace ft::config_import
