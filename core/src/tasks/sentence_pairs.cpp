// Sentence-embedding data (ft/tasks/sentence_pairs.h). Each column is read with the
// text reader (every format, row numbering and UTF-8 check of
// read_text_data), and each is tokenized by a text dataset of its own.
#include "ft/tasks/sentence_pairs.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/io/safetensors.h"

namespace ft {
namespace {
using json = nlohmann::json;

std::string first_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the data file; check the path", path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
  }
  fail("{}: the file has no rows", path);
}

// The field names of the first row, in the file's order.
std::vector<std::string> first_row_keys(const std::string& path, DataFormat format) {
  std::vector<std::string> keys;
  if (format == DataFormat::Csv || format == DataFormat::Tsv) {
    std::string header = first_line(path);
    if (!header.empty() && header.back() == '\r') header.pop_back();
    const char sep = format == DataFormat::Csv ? ',' : '\t';
    size_t start = 0;
    while (start <= header.size()) {
      size_t end = header.find(sep, start);
      if (end == std::string::npos) end = header.size();
      std::string key = header.substr(start, end - start);
      if (key.size() >= 2 && key.front() == '"' && key.back() == '"') key = key.substr(1, key.size() - 2);
      keys.push_back(key);
      start = end + 1;
    }
    return keys;
  }
  json row;
  try {
    if (format == DataFormat::JsonLines) {
      row = json::parse(first_line(path));
    } else {
      std::ifstream in(path, std::ios::binary);
      const json all = json::parse(in);
      if (all.is_array() && !all.empty()) row = all.front();
    }
  } catch (const json::exception& e) {
    fail("{}: row 1: invalid JSON ({})", path, e.what());
  }
  if (!row.is_object()) fail("{}: row 1: expected an object with named columns (anchor, positive, ...)", path);
  for (const auto& item : row.items()) keys.push_back(item.key());
  return keys;
}

bool has(const std::vector<std::string>& keys, const std::string& k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

std::vector<std::string> auto_columns(const std::vector<std::string>& keys, const std::string& path) {
  if (has(keys, "anchor") && has(keys, "positive")) {
    std::vector<std::string> names = {"anchor", "positive"};
    for (const auto& k : keys)
      if (k.rfind("negative", 0) == 0) names.push_back(k);
    return names;
  }
  if (has(keys, "sentence1") && has(keys, "sentence2")) return {"sentence1", "sentence2"};
  fail("{}: the rows have no anchor and positive (or sentence1 and sentence2) columns, only [{}]; name the text "
       "columns with data.columns",
       path, fmt::join(keys, ", "));
}

// One column of model rows: each text alone, its score as the label.
class SentenceDataset final : public Dataset {
 public:
  SentenceDataset(SentenceColumns data, std::shared_ptr<const Tokenizer> tok, int max_length, Padding padding)
      : scored_(!data.scores.empty()), rows_(data.rows()), pad_(tok->pad_id()) {
    for (size_t c = 0; c < data.texts.size(); ++c) {
      TextData column;
      column.problem_type = ProblemType::kRegression;
      column.source = data.source;
      column.rows.resize(data.texts[c].size());
      for (size_t r = 0; r < column.rows.size(); ++r) {
        column.rows[r].text = std::move(data.texts[c][r]);
        if (scored_) column.rows[r].score = data.scores[r];
      }
      columns_.push_back(make_text_dataset(std::move(column), tok, max_length, padding));
    }
  }
  int64_t size() const override { return rows_; }
  int64_t num_labels() const override { return 1; }
  ProblemType problem_type() const override { return scored_ ? ProblemType::kRegression : ProblemType::kSingleLabel; }
  std::vector<int64_t> labels() const override { return {}; }
  std::vector<int64_t> lengths() const override {
    std::vector<int64_t> out(static_cast<size_t>(rows_), 0);
    for (const auto& c : columns_) {
      const auto l = c->lengths();
      for (size_t r = 0; r < out.size(); ++r) out[r] = std::max(out[r], l[r]);
    }
    return out;
  }
  Batch collate(const std::vector<int64_t>& rows) const override {
    std::vector<Batch> parts;
    int64_t width = 0;
    for (const auto& c : columns_) {
      parts.push_back(c->collate(rows));
      width = std::max(width, parts.back().input_ids.size(1));
    }
    auto widen = [width](const at::Tensor& t, int64_t fill) {
      return t.size(1) == width ? t : at::constant_pad_nd(t, {0, width - t.size(1)}, fill);
    };
    std::vector<at::Tensor> ids, mask, types;
    for (const auto& p : parts) {
      ids.push_back(widen(p.input_ids, pad_));
      mask.push_back(widen(p.attention_mask, 0));
      types.push_back(widen(p.token_type_ids, 0));
    }
    Batch b;
    b.input_ids = at::cat(ids);
    b.attention_mask = at::cat(mask);
    b.token_type_ids = at::cat(types);
    b.labels = scored_ ? parts.front().labels.to(at::kFloat)
                       : at::arange(static_cast<int64_t>(rows.size()), at::TensorOptions().dtype(at::kLong));
    return b;
  }

 private:
  bool scored_;
  int64_t rows_;
  int64_t pad_;
  std::vector<std::unique_ptr<Dataset>> columns_;
};

// Pre-tokenized columns (load_sentence_tensors).
class SentenceTensors final : public Dataset {
 public:
  SentenceTensors(std::vector<Batch> columns, at::Tensor scores, Padding padding)
      : columns_(std::move(columns)), scores_(std::move(scores)), padding_(padding) {}
  int64_t size() const override { return columns_.front().input_ids.size(0); }
  int64_t num_labels() const override { return 1; }
  ProblemType problem_type() const override {
    return scores_.defined() ? ProblemType::kRegression : ProblemType::kSingleLabel;
  }
  std::vector<int64_t> labels() const override { return {}; }
  std::vector<int64_t> lengths() const override {
    at::Tensor longest = columns_.front().attention_mask.sum(1);
    for (const auto& c : columns_) longest = at::maximum(longest, c.attention_mask.sum(1));
    return std::vector<int64_t>(longest.data_ptr<int64_t>(), longest.data_ptr<int64_t>() + longest.numel());
  }
  Batch collate(const std::vector<int64_t>& rows) const override {
    const at::Tensor index = at::tensor(rows, at::kLong);
    if (index.numel() > 0 && (index.min().item<int64_t>() < 0 || index.max().item<int64_t>() >= size())) {
      fail("sentence tensors: a row index is outside [0, {})", size());
    }
    std::vector<at::Tensor> ids, mask, types;
    for (const auto& c : columns_) {
      ids.push_back(c.input_ids.index_select(0, index));
      mask.push_back(c.attention_mask.index_select(0, index));
      types.push_back(c.token_type_ids.index_select(0, index));
    }
    Batch b;
    b.input_ids = at::cat(ids);
    b.attention_mask = at::cat(mask);
    b.token_type_ids = at::cat(types);
    if (padding_ == Padding::Longest) {
      // The trailing columns no row attends to.
      const at::Tensor used = b.attention_mask.ne(0).any(0).nonzero();
      const int64_t width = used.numel() == 0 ? 1 : used.max().item<int64_t>() + 1;
      b.input_ids = b.input_ids.narrow(1, 0, width).contiguous();
      b.attention_mask = b.attention_mask.narrow(1, 0, width).contiguous();
      b.token_type_ids = b.token_type_ids.narrow(1, 0, width).contiguous();
    }
    b.labels = scores_.defined() ? scores_.index_select(0, index)
                                 : at::arange(static_cast<int64_t>(rows.size()), at::TensorOptions().dtype(at::kLong));
    return b;
  }

 private:
  std::vector<Batch> columns_;
  at::Tensor scores_;
  Padding padding_;
};

}  // namespace

std::unique_ptr<Dataset> load_sentence_tensors(const std::string& path, const std::vector<std::string>& columns,
                                               Padding padding, int64_t max_rows) {
  std::map<std::string, at::Tensor> file;
  for (auto& [name, t] : safetensors::load(path)) file[name] = t;
  std::vector<std::string> keys;
  for (const auto& [name, t] : file) {
    const auto dot = name.find('.');
    if (dot != std::string::npos && name.substr(dot) == ".input_ids") keys.push_back(name.substr(0, dot));
  }
  if (file.count("score")) keys.push_back("score");
  const std::vector<std::string> names = columns.empty() ? auto_columns(keys, path) : columns;
  std::vector<Batch> parts;
  int64_t rows = -1, width = -1;
  auto take = [&](const std::string& name, bool required) -> at::Tensor {
    auto it = file.find(name);
    if (it == file.end()) {
      if (required) fail("{}: no tensor '{}' (a column's input_ids and attention_mask, I64 [N, L])", path, name);
      return {};
    }
    const at::Tensor& t = it->second;
    if (t.scalar_type() != at::kLong || t.dim() != 2) fail("{}: '{}' must be I64 [N, L]", path, name);
    if (rows < 0) rows = t.size(0), width = t.size(1);
    if (t.size(0) != rows || t.size(1) != width) {
      fail("{}: '{}' is [{}, {}] but the other columns are [{}, {}]", path, name, t.size(0), t.size(1), rows, width);
    }
    return max_rows > 0 && max_rows < rows ? t.narrow(0, 0, max_rows) : t;
  };
  for (const auto& c : names) {
    Batch b;
    b.input_ids = take(c + ".input_ids", true);
    b.attention_mask = take(c + ".attention_mask", true);
    b.token_type_ids = take(c + ".token_type_ids", false);
    if (!b.token_type_ids.defined()) b.token_type_ids = at::zeros_like(b.input_ids);
    parts.push_back(std::move(b));
  }
  at::Tensor scores;
  if (auto it = file.find("score"); it != file.end()) {
    if (it->second.dim() != 1 || it->second.size(0) != rows) fail("{}: 'score' must be F32 [{}]", path, rows);
    scores = it->second.to(at::kFloat);
    if (max_rows > 0 && max_rows < rows) scores = scores.narrow(0, 0, max_rows);
  }
  return std::make_unique<SentenceTensors>(std::move(parts), scores, padding);
}

SentenceColumns read_sentence_columns(DataSource source, const std::vector<std::string>& columns) {
  source.format = detect_data_format(source.path, source.format);
  const std::vector<std::string> keys = first_row_keys(source.path, source.format);
  SentenceColumns out;
  out.source = source.path;
  out.names = columns.empty() ? auto_columns(keys, source.path) : columns;
  if (out.names.size() < 2) {
    fail("data.columns: a sentence-embedding row needs at least two texts (anchor, positive or sentence1, sentence2), "
         "got [{}]",
         fmt::join(out.names, ", "));
  }
  source.bad_rows = BadRows::Error;  // the columns are read apart: a skipped row would shift one of them
  source.pair_field.clear();
  const std::string label_field = source.label_field;
  for (const auto& name : out.names) {
    DataSource s = source;
    s.text_field = name;
    s.label_field.clear();
    TextData column = read_text_data(s);
    out.texts.emplace_back();
    for (auto& r : column.rows) out.texts.back().push_back(std::move(r.text));
  }
  // An anchor's row may carry other fields (a class label): only pairs are scored by label_field.
  const bool anchored = out.names.front() == "anchor";
  out.score_name = has(keys, "score") ? "score" : (!anchored && has(keys, label_field)) ? label_field : "";
  if (!out.score_name.empty()) {
    DataSource s = source;
    s.text_field = out.names.front();
    s.label_field = out.score_name;
    s.problem_type = ProblemType::kRegression;
    for (const auto& r : read_text_data(s).rows) {
      if (!std::isfinite(r.score)) fail("{}: a score is not a finite number (column '{}')", source.path, out.score_name);
      out.scores.push_back(r.score);
    }
  }
  return out;
}

SentenceColumns take_rows(const SentenceColumns& data, const std::vector<int64_t>& rows) {
  SentenceColumns out;
  out.names = data.names;
  out.score_name = data.score_name;
  out.source = data.source;
  for (const auto& column : data.texts) {
    out.texts.emplace_back();
    for (int64_t r : rows) out.texts.back().push_back(column.at(static_cast<size_t>(r)));
  }
  for (int64_t r : rows)
    if (!data.scores.empty()) out.scores.push_back(data.scores.at(static_cast<size_t>(r)));
  return out;
}

std::unique_ptr<Dataset> make_sentence_dataset(SentenceColumns data, std::shared_ptr<const Tokenizer> tok,
                                               int max_length, Padding padding) {
  return std::make_unique<SentenceDataset>(std::move(data), std::move(tok), max_length, padding);
}

}  // namespace ft
