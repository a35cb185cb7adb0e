// to_yaml: the full effective config, every key present, in a fixed order, so
// a checkpoint's saved config can be diffed and loaded back unchanged.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config_fields.h"
#include "ft/config/config.h"

namespace ft {
namespace {

// Numbers are written by fmt's shortest round-trip form ("2e-05", "0.08"),
// not the emitter's stream formatting, so they read back bit-exact.
void emit(YAML::Emitter& out, const std::string& v) { out << v; }
void emit(YAML::Emitter& out, int64_t v) { out << fmt::format("{}", v); }
void emit(YAML::Emitter& out, double v) { out << fmt::format("{}", v); }
void emit(YAML::Emitter& out, bool v) { out << (v ? "true" : "false"); }

void emit(YAML::Emitter& out, const std::optional<double>& v) {
  if (v) {
    emit(out, *v);
  } else {
    out << YAML::Null;
  }
}

void emit(YAML::Emitter& out, const std::optional<bool>& v) {
  if (v) {
    emit(out, *v);
  } else {
    out << YAML::Null;
  }
}

void emit(YAML::Emitter& out, const ClassWeights& v) {
  if (v.automatic) {
    out << "auto";
  } else if (!v.by_name.empty()) {
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& [name, w] : v.by_name) out << YAML::Key << name << YAML::Value << fmt::format("{}", w);
    out << YAML::EndMap;
  } else if (!v.values.empty()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (double w : v.values) emit(out, w);
    out << YAML::EndSeq;
  } else {
    out << YAML::Null;
  }
}

void emit(YAML::Emitter& out, const DevFiles& v) {
  if (v.files.size() == 1 && v.files.front().name.empty()) {
    emit(out, v.files.front().path);
    return;
  }
  if (v.empty()) {
    emit(out, std::string());
    return;
  }
  out << YAML::BeginMap;
  for (const auto& f : v.files) {
    out << YAML::Key << f.name << YAML::Value;
    emit(out, f.path);
  }
  out << YAML::EndMap;
}

void emit(YAML::Emitter& out, const std::vector<std::string>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& item : v) emit(out, item);
  out << YAML::EndSeq;
}

void emit(YAML::Emitter& out, const std::map<std::string, std::string>& v) {
  if (v.empty()) out << YAML::Flow;
  out << YAML::BeginMap;
  for (const auto& [key, value] : v) {
    out << YAML::Key << key << YAML::Value;
    emit(out, value);
  }
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const RunConfig& config) {
  YAML::Emitter out;
  // Strings that YAML would read as something else ("~", "null", "") must be
  // quoted or they come back empty; the emitter quotes those by itself.
  out << YAML::Comment("ft run configuration, every key (docs/configuration.md)");
  out << YAML::BeginMap;
  out << YAML::Key << "task" << YAML::Value << task_name(config.task);
  std::string section;
  config_detail::for_each_field(config, [&](const char* sec, const char* key, const auto& field) {
    if (section != sec) {
      if (!section.empty()) out << YAML::EndMap;
      section = sec;
      out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << key << YAML::Value;
    emit(out, field);
  });
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace ft
