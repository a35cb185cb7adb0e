// Data format names and detection (by extension, else by the first byte).
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "ft/data/data.h"
#include "ft/base/error.h"

namespace ft {
namespace {

std::string lower_extension(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

}  // namespace

DataFormat parse_data_format(std::string_view name) {
  static const std::pair<const char*, DataFormat> kNames[] = {
      {"auto", DataFormat::Auto}, {"json", DataFormat::JsonList},
      {"jsonl", DataFormat::JsonLines}, {"csv", DataFormat::Csv},
      {"tsv", DataFormat::Tsv}, {"safetensors", DataFormat::Safetensors}};
  for (const auto& [n, f] : kNames)
    if (name == n) return f;
  fail("unknown data format '{}'; use one of auto, json, jsonl, csv, tsv, safetensors", name);
}

std::string to_string(DataFormat format) {
  switch (format) {
    case DataFormat::Auto: return "auto";
    case DataFormat::JsonList: return "json";
    case DataFormat::JsonLines: return "jsonl";
    case DataFormat::Csv: return "csv";
    case DataFormat::Tsv: return "tsv";
    case DataFormat::Safetensors: return "safetensors";
  }
  return "auto";
}

DataFormat detect_data_format(const std::string& path, DataFormat requested) {
  if (requested != DataFormat::Auto) return requested;
  const std::string ext = lower_extension(path);
  if (ext == ".json") return DataFormat::JsonList;
  if (ext == ".jsonl" || ext == ".ndjson") return DataFormat::JsonLines;
  if (ext == ".csv") return DataFormat::Csv;
  if (ext == ".tsv" || ext == ".tab") return DataFormat::Tsv;
  if (ext == ".safetensors") return DataFormat::Safetensors;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the data file: {}; check the path", path, std::strerror(errno));
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  if (in && c == '[') return DataFormat::JsonList;
  if (in && c == '{') return DataFormat::JsonLines;
  fail("{}: cannot tell the data format from the name or content; set data.format to one of "
       "json, jsonl, csv, tsv, safetensors",
       path);
}

}  // namespace ft
