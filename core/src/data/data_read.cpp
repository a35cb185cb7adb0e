// Readers for text data: JSON list, JSON Lines, CSV, TSV -> ft::TextData.
//
// Every format is cut into rows first (without trusting their content), so a
// malformed row is reported with its number and, under BadRows::Skip, dropped
// on its own instead of failing the whole file.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ft/data/data.h"
#include "ft/base/error.h"
#include "data/data_labels.h"

namespace ft {
namespace {

using json = nlohmann::json;
using namespace data_detail;  // the label cells and the Collector

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the data file: {}; check the path", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string string_field(const json& v, const std::string& what) {
  if (!v.is_string())
    throw BadRow{fmt::format("{} is {} ({}), expected a string", what, v.type_name(),
                             quoted_value(v))};
  return v.get<std::string>();
}

// One parsed JSON row: [text, label], [text, pair, label] or an object.
void add_json_row(Collector& out, const json& v, int64_t row, const DataSource& src) {
  if (v.is_array()) {
    if (v.size() != 2 && v.size() != 3)
      throw BadRow{fmt::format("expected [text, label] or [text, pair, label], got {} items",
                               v.size())};
    std::string text = string_field(v[0], "text");
    std::string pair = v.size() == 3 ? string_field(v[1], "pair text") : std::string();
    out.add(row, std::move(text), std::move(pair), label_from_json(v.back(), src.label_delimiter));
    return;
  }
  if (!v.is_object())
    throw BadRow{fmt::format("expected [text, label] or an object, got {}", v.type_name())};
  auto field = [&](const std::string& name) -> const json& {
    auto it = v.find(name);
    if (it == v.end())
      throw BadRow{fmt::format("missing field '{}' (set the data's field names to match)", name)};
    return *it;
  };
  std::string text = string_field(field(src.text_field), "field '" + src.text_field + "'");
  std::string pair;
  if (!src.pair_field.empty())
    pair = string_field(field(src.pair_field), "field '" + src.pair_field + "'");
  // No label field: unlabelled text (pretraining reads it), every row label 0.
  out.add(row, std::move(text), std::move(pair),
          src.label_field.empty() ? no_label() : label_from_json(field(src.label_field), src.label_delimiter));
}

// Parses one row's bytes, turning any problem into a numbered bad row.
void json_row(Collector& out, std::string_view bytes, int64_t row, const DataSource& src) {
  try {
    if (trim(bytes).empty()) throw BadRow{"empty row"};
    const size_t at = invalid_utf8_at(bytes);
    if (at != std::string_view::npos)
      throw BadRow{fmt::format("invalid UTF-8 (byte 0x{:02X}); re-encode the file as UTF-8",
                               static_cast<unsigned char>(bytes[at]))};
    json v;
    try {
      v = json::parse(bytes.begin(), bytes.end());
    } catch (const json::exception& e) {
      throw BadRow{fmt::format("invalid JSON ({})", e.what())};
    }
    add_json_row(out, v, row, src);
  } catch (const BadRow& b) {
    out.bad(row, b.problem);
  }
}

int64_t line_of(std::string_view buf, size_t offset) {
  return 1 + std::count(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

// Cuts the top-level JSON array into element byte ranges by tracking strings
// and bracket depth only; each element is parsed on its own afterwards.
void read_json_list(Collector& out, std::string_view buf, const DataSource& src) {
  size_t pos = buf.find_first_not_of(" \t\r\n");
  if (pos == std::string_view::npos || buf[pos] != '[')
    fail("{}: expected a JSON list ('[' at the start); use .jsonl or format jsonl for one "
         "object per line",
         src.path);
  ++pos;
  int64_t row = 0;
  const size_t n = buf.size();
  for (;;) {
    const size_t start = pos;
    int depth = 0;
    bool in_string = false;
    bool closed = false;
    for (; pos < n; ++pos) {
      const char c = buf[pos];
      if (in_string) {
        if (c == '\\') ++pos;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        if (depth == 0 && c == ']') {
          closed = true;
          break;
        }
        --depth;
      } else if (c == ',' && depth == 0) {
        break;
      }
    }
    if (pos >= n)
      fail("{}: the JSON list is not closed (row {} starts at line {}, no ']' follows); fix the "
           "file",
           src.path, row + 1, line_of(buf, std::min(start, n)));
    const std::string_view element = buf.substr(start, pos - start);
    ++pos;  // past ',' or ']'
    if (closed && row == 0 && trim(element).empty()) break;  // []
    ++row;
    json_row(out, element, row, src);
    if (closed || out.full()) break;
  }
  if (!out.full()) {
    const size_t rest = buf.find_first_not_of(" \t\r\n", pos);
    if (rest != std::string_view::npos)
      fail("{}: unexpected text after the JSON list's closing ']' (line {}); fix the file",
           src.path, line_of(buf, rest));
  }
}

// Calls f(line_number, line) for each non-blank line, without its '\r\n'.
template <typename F>
void for_each_line(std::string_view buf, F&& f, const Collector& out) {
  int64_t line = 0;
  size_t pos = 0;
  while (pos < buf.size() && !out.full()) {
    size_t end = buf.find('\n', pos);
    if (end == std::string_view::npos) end = buf.size();
    std::string_view text = buf.substr(pos, end - pos);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    ++line;
    pos = end + 1;
    if (!trim(text).empty()) f(line, text);
  }
}

void read_json_lines(Collector& out, std::string_view buf, const DataSource& src) {
  for_each_line(
      buf, [&](int64_t line, std::string_view text) { json_row(out, text, line, src); }, out);
}

// Column positions of the fields a delimited file must have.
struct Columns {
  size_t text = 0, count = 0;
  std::optional<size_t> label, pair;  // no label column: unlabelled text
};

Columns find_columns(const std::vector<std::string>& header, const DataSource& src) {
  auto find = [&](const std::string& name, const char* key) {
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end())
      fail("{}: the header row has no column '{}' (columns: {}); set data.{} or add the column",
           src.path, name, list_names(header), key);
    return static_cast<size_t>(it - header.begin());
  };
  Columns c;
  c.count = header.size();
  c.text = find(src.text_field, "text_field");
  if (!src.label_field.empty()) c.label = find(src.label_field, "label_field");
  if (!src.pair_field.empty()) c.pair = find(src.pair_field, "pair_field");
  return c;
}

void add_delimited_row(Collector& out, const std::vector<std::string>& fields, const Columns& c,
                       int64_t row, const DataSource& src) {
  try {
    if (fields.size() != c.count)
      throw BadRow{fmt::format("has {} fields but the header has {}", fields.size(), c.count)};
    for (const auto& f : fields) {
      const size_t at = invalid_utf8_at(f);
      if (at != std::string_view::npos)
        throw BadRow{fmt::format("invalid UTF-8 (byte 0x{:02X}); re-encode the file as UTF-8",
                                 static_cast<unsigned char>(f[at]))};
    }
    out.add(row, fields[c.text], c.pair ? fields[*c.pair] : std::string(),
            c.label ? label_from_string(fields[*c.label], src.label_delimiter) : no_label());
  } catch (const BadRow& b) {
    out.bad(row, b.problem);
  }
}

// One RFC 4180 record from `pos`; advances pos past it and `line` by the
// newlines consumed. On bad quoting, returns the problem and skips to the
// end of the physical line.
std::optional<std::string> csv_record(std::string_view buf, size_t& pos, int64_t& line,
                                      std::vector<std::string>& fields) {
  fields.clear();
  const size_t n = buf.size();
  auto at_eol = [&](size_t p) {
    return p >= n || buf[p] == '\n' || (buf[p] == '\r' && p + 1 < n && buf[p + 1] == '\n');
  };
  auto consume_eol = [&] {
    if (pos < n && buf[pos] == '\r') ++pos;
    if (pos < n && buf[pos] == '\n') {
      ++pos;
      ++line;
    }
  };
  for (;;) {
    std::string field;
    if (pos < n && buf[pos] == '"') {
      const int64_t opened = line;
      ++pos;
      for (;;) {
        if (pos >= n) return fmt::format("quoted field opened on line {} is never closed", opened);
        const char c = buf[pos];
        if (c == '"') {
          if (pos + 1 < n && buf[pos + 1] == '"') {
            field += '"';
            pos += 2;
            continue;
          }
          ++pos;
          break;
        }
        if (c == '\n') ++line;
        field += c;
        ++pos;
      }
      if (!at_eol(pos) && buf[pos] != ',') {
        while (!at_eol(pos)) ++pos;
        consume_eol();
        return std::string("unexpected character after a closing quote (quote a field whole, "
                           "and double quotes inside it)");
      }
    } else {
      while (!at_eol(pos) && buf[pos] != ',') field += buf[pos++];
    }
    fields.push_back(std::move(field));
    if (pos < n && buf[pos] == ',') {
      ++pos;
      continue;
    }
    consume_eol();
    return std::nullopt;
  }
}

void read_csv(Collector& out, std::string_view buf, const DataSource& src) {
  size_t pos = 0;
  int64_t line = 1;
  std::vector<std::string> fields;
  std::optional<Columns> columns;
  while (pos < buf.size() && !out.full()) {
    if (buf[pos] == '\n' || (buf[pos] == '\r' && pos + 1 < buf.size() && buf[pos + 1] == '\n')) {
      pos += buf[pos] == '\r' ? 2 : 1;  // blank line
      ++line;
      continue;
    }
    const int64_t row = line;
    const std::optional<std::string> problem = csv_record(buf, pos, line, fields);
    if (!columns) {
      if (problem) fail("{}: line {}: header row: {}; fix the header", src.path, row, *problem);
      columns = find_columns(fields, src);
      continue;
    }
    if (problem) {
      out.bad(row, *problem);
      continue;
    }
    add_delimited_row(out, fields, *columns, row, src);
  }
}

void read_tsv(Collector& out, std::string_view buf, const DataSource& src) {
  std::optional<Columns> columns;
  std::vector<std::string> fields;
  for_each_line(
      buf,
      [&](int64_t line, std::string_view text) {
        fields.clear();
        size_t start = 0;
        for (;;) {
          const size_t tab = text.find('\t', start);
          fields.emplace_back(text.substr(start, tab == std::string_view::npos ? tab : tab - start));
          if (tab == std::string_view::npos) break;
          start = tab + 1;
        }
        if (!columns) columns = find_columns(fields, src);
        else add_delimited_row(out, fields, *columns, line, src);
      },
      out);
}

}  // namespace

TextData read_text_data(const DataSource& source) {
  const DataFormat format = detect_data_format(source.path, source.format);
  if (format == DataFormat::Safetensors)
    fail("{}: pre-tokenized safetensors data has no text rows; it is loaded as a tensor dataset "
         "(format safetensors), not read as text",
         source.path);
  if (source.max_rows < 0)
    fail("{}: max_rows is {}; use 0 for all rows or a positive count", source.path,
         source.max_rows);
  DataSource resolved = source;
  resolved.format = format;
  return parse_text_data(read_file(source.path), resolved);
}

TextData parse_text_data(std::string_view bytes, const DataSource& source) {
  if (source.max_rows < 0)
    fail("{}: max_rows is {}; use 0 for all rows or a positive count", source.path,
         source.max_rows);
  if (bytes.substr(0, 3) == "\xEF\xBB\xBF") bytes.remove_prefix(3);  // Excel's UTF-8 BOM
  if (trim(bytes).empty())
    fail("{}: the file is empty; give a data file with at least one example", source.path);
  Collector out(source);
  switch (source.format) {
    case DataFormat::JsonList: read_json_list(out, bytes, source); break;
    case DataFormat::JsonLines: read_json_lines(out, bytes, source); break;
    case DataFormat::Csv: read_csv(out, bytes, source); break;
    case DataFormat::Tsv: read_tsv(out, bytes, source); break;
    default:
      fail("{}: parse_text_data needs format json, jsonl, csv or tsv, got {}", source.path,
           to_string(source.format));
  }
  return out.finish();
}

}  // namespace ft
