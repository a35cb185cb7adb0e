// The texts a Hugging Face ids fixture refers to (tests/data/hf/README.md):
// no text is stored in the fixtures, only the data file, format and rows.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "ft_test.h"

namespace ft_test {

// Text k of a fixture source: row rows[k] of its file, a JSON Lines field
// ("jsonl") or an element of a JSON list entry ("json_list").
inline std::vector<std::string> fixture_texts(const nlohmann::json& source) {
  const std::string file = source.at("file");
  const std::filesystem::path path =
      file.rfind("../shared/", 0) == 0 ? shared_dir() / file.substr(10) : source_dir() / file;
  const auto rows = source.at("rows").get<std::vector<int64_t>>();
  std::vector<std::string> texts;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot read " << path.string());
  if (source.at("format") == "jsonl") {
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    for (int64_t r : rows) {
      REQUIRE(r < static_cast<int64_t>(lines.size()));
      texts.push_back(nlohmann::json::parse(lines[static_cast<size_t>(r)]).at(source.at("text_field").get<std::string>()));
    }
  } else {
    const auto all = nlohmann::json::parse(in);
    for (int64_t r : rows) texts.push_back(all.at(static_cast<size_t>(r)).at(source.at("text_index").get<size_t>()));
  }
  return texts;
}

}  // namespace ft_test
