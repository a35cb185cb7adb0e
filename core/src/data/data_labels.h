// Private to the text-data readers (data_read.cpp): what a row's label cell
// holds, and the Collector that turns rows into TextData, deciding the
// problem type (ft/base/problem_type.h) and the label ids as it goes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/data/data.h"

namespace ft::data_detail {

inline constexpr const char* kRowFix = "fix or remove the row, or skip bad rows (data.bad_rows: skip)";

// Offset of the first byte that is not well-formed UTF-8 (no overlongs,
// surrogates or code points past U+10FFFF), or npos.
size_t invalid_utf8_at(std::string_view s);
std::string_view trim(std::string_view s);
std::optional<int64_t> parse_int(std::string_view s);
// At most ten names, then the count.
std::string list_names(const std::vector<std::string>& names);
// A row value for a message: short, and without dump()'s recursion.
std::string quoted_value(const nlohmann::json& v);

// A label as the file has it, before it becomes an id, a set or a score.
struct RawLabel {
  std::optional<int64_t> id;     // an integer: a JSON integer or integral number, an integer literal
  std::optional<double> number;  // any finite number, with or without a fraction
  std::string name;              // the string as written (empty for JSON numbers)
  bool listed = false;           // a list of labels: `items` (multi-label)
  std::vector<RawLabel> items;
};

// A row problem: thrown through the reader, caught per row.
struct BadRow {
  std::string problem;
};

// A CSV/TSV cell; cut at `delimiter` (non-empty) into a list.
RawLabel label_from_string(std::string_view s, const std::string& delimiter);
// A JSON value: a number, a string (cut as above), or a list of those.
RawLabel label_from_json(const nlohmann::json& v, const std::string& delimiter);
// Unlabelled text (ft pretrain): class 0.
RawLabel no_label();

// Accumulates rows, resolves labels, applies the bad-row policy.
class Collector {
 public:
  explicit Collector(const DataSource& src);

  // Stops reading once max_rows rows are kept (Take::First only).
  bool full() const;
  void bad(int64_t row, const std::string& problem);
  // Validates and stores row `row` (1-based, for messages); a BadRow
  // escapes for the caller to report.
  void add(int64_t row, std::string text, std::string pair, const RawLabel& raw);
  TextData finish();

 private:
  enum class Mode { Unknown, Ids, Names };

  void label_row(const RawLabel& raw, TextExample& ex, std::vector<std::string>& pending);
  void label_set(const RawLabel& raw, TextExample& ex, std::vector<std::string>& pending);
  int64_t resolve(const RawLabel& raw, std::vector<std::string>& pending);
  void finish_labels();
  void take_random();

  const DataSource& src_;
  TextData data_;
  std::vector<int64_t> row_numbers_;  // parallel to data_.rows
  std::unordered_map<std::string, int64_t> index_;
  Mode mode_ = Mode::Unknown;
  // Inference: whether rows so far held lists or single labels, and whether
  // a number had a fraction (then every label is a regression score).
  bool saw_list_ = false, saw_single_ = false, fractional_ = false;
  std::vector<std::vector<std::string>> pending_;  // parallel to rows: names awaiting ids
  std::vector<double> numbers_;                    // parallel to rows: the numeric label, if any (NaN)
};

}  // namespace ft::data_detail
