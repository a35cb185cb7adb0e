// ConfigImports: reading each foreign file into a layer of ft values, and the
// checks across files. The per-format mappings are import_*.cpp.
#include "ft/config/config_import.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <yaml-cpp/yaml.h>

#include "import_builder.h"

namespace ft {
namespace config_import {
namespace {

std::string read_text(const std::string& path, const char* what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("{}: {} not found (relative paths are from the working directory)", path, what);
  if (std::filesystem::is_directory(path, ec)) fail("{}: is a directory; expected {}", path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open {}", path, what);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// YAML scalars carry no type: numbers and booleans are recognised the way
// accelerate's loader (PyYAML) would.
Json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) out[kv.first.Scalar()] = yaml_to_json(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return s;  // quoted: a string whatever it looks like
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      if (s == "null" || s == "~") return nullptr;
      try {
        std::size_t used = 0;
        const long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
        const double d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (const std::exception&) {
      }
      return s;
    }
    default: return nullptr;
  }
}

}  // namespace

Json read_json_file(const std::string& path, const char* what) {
  const std::string text = read_text(path, what);
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail("{}: not valid JSON ({}); expected {}", path, e.what(), what);
  }
}

Json read_yaml_file_as_json(const std::string& path, const char* what) {
  const std::string text = read_text(path, what);
  try {
    return yaml_to_json(YAML::Load(text));
  } catch (const YAML::ParserException& e) {
    fail("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const YAML::Exception& e) {
    fail("{}: cannot read {}: {}", path, what, e.msg);
  }
}

}  // namespace config_import

using config_import::Builder;

void ConfigImports::add_deepspeed(const std::string& path) {
  Builder b(path);
  const auto root = config_import::read_json_file(path, "a DeepSpeed config (ds_config.json)");
  config_import::import_deepspeed_tree(b, root, world_size_);
  files_.push_back(b.take());
}

void ConfigImports::add_accelerate(const std::string& path) {
  Builder b(path);
  const auto root = config_import::read_yaml_file_as_json(path, "an accelerate config (default_config.yaml)");
  config_import::import_accelerate_tree(b, root, *this);
  files_.push_back(b.take());
}

void ConfigImports::add_training_args(const std::string& path) {
  Builder b(path);
  const auto root = config_import::read_json_file(path, "Hugging Face TrainingArguments as JSON");
  config_import::import_training_args_tree(b, root, *this);
  files_.push_back(b.take());
}

std::vector<std::string> ConfigImports::warnings() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.insert(out.end(), f.warnings.begin(), f.warnings.end());
  return out;
}

ImportedLaunch ConfigImports::launch() const {
  ImportedLaunch out;
  for (const auto& f : files_) {
    const auto& l = f.launch;
    if (l.nproc) out.nproc = l.nproc;
    if (l.nnodes) out.nnodes = l.nnodes;
    if (l.node_rank) out.node_rank = l.node_rank;
    if (l.master_port) out.master_port = l.master_port;
    if (l.master_addr) out.master_addr = l.master_addr;
  }
  return out;
}

std::vector<ImportedValue> ConfigImports::values() const {
  std::vector<ImportedValue> out;
  for (const auto& f : files_) {
    for (const auto& v : f.values) {
      bool seen = false;
      for (const auto& o : out) {
        if (o.key != v.key) continue;
        seen = true;
        if (o.value != v.value) {
          fail("{}: {} sets {}={}, but {}: {} sets it to {}; make the two files agree", o.source, o.from, o.key,
               o.value, v.source, v.from, v.value);
        }
      }
      if (!seen) out.push_back(v);
    }
  }
  return out;
}

std::string ConfigImports::sources() const {
  std::string out;
  for (const auto& f : files_) out += (out.empty() ? "" : " + ") + f.source;
  return out;
}

}  // namespace ft
