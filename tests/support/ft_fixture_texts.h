// The texts a Hugging Face ids fixture refers to (tests/data/hf/README.md):
// no text is stored in the fixtures, only the data file, format and rows.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "ft/tokenizer/tokenizer.h"
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

// Encodes every example of an ids fixture (tests/data/hf/README.md,
// "tokenizers/") with `tok` and compares ids, mask and type ids; the first
// differences are printed in full. Returns {ids compared, examples that differ}.
inline std::pair<int64_t, int64_t> compare_fixture_ids(const ft::Tokenizer& tok, const nlohmann::json& fx,
                                                       const std::string& name, bool weibo) {
  auto digits = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t x : v) s += std::to_string(x);
    return s;
  };
  int64_t compared = 0, mismatched = 0;
  for (const auto& source : fx.at("sources")) {
    if (source.at("name") == "weibo" && !weibo) continue;
    const auto texts = fixture_texts(source);
    for (const auto& c : source.at("cases")) {
      const int max_length = c.at("max_length");
      const bool pair = c.at("pair");
      const auto& ids = c.at("input_ids");
      REQUIRE(ids.size() + (pair ? 1 : 0) == texts.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        std::optional<std::string_view> b;
        if (pair) b = texts[i + 1];
        const auto enc = tok.encode(texts[i], b, max_length, true);
        const auto want = ids[i].get<std::vector<int64_t>>();
        compared += static_cast<int64_t>(want.size());
        if (enc.input_ids == want && digits(enc.attention_mask) == c.at("attention_mask")[i] &&
            digits(enc.token_type_ids) == c.at("token_type_ids")[i]) {
          continue;
        }
        if (++mismatched <= 3) {
          MESSAGE(name << " " << source.at("name").get<std::string>() << " row " << i << " pair=" << pair
                       << " max_length=" << max_length << "\n got  " << nlohmann::json(enc.input_ids).dump()
                       << "\n want " << nlohmann::json(want).dump() << "\n mask " << digits(enc.attention_mask)
                       << " / " << c.at("attention_mask")[i].get<std::string>() << "\n type "
                       << digits(enc.token_type_ids) << " / " << c.at("token_type_ids")[i].get<std::string>());
        }
      }
    }
  }
  MESSAGE(name << ": " << compared << " ids compared (each with its mask and type), " << mismatched
               << " examples differ");
  return {compared, mismatched};
}

}  // namespace ft_test
