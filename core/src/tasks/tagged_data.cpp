// Readers for word/tag data: JSON Lines and CoNLL -> ft::TaggedData.
//
// Both formats are cut into sentences first; the tags are resolved to ids
// only at the end, once the whole label set is known (inferred names are
// sorted, so an id depends on every row).
#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_text.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/tasks/token_classification.h"

namespace ft {
namespace tagged {
namespace {

using json = nlohmann::json;

constexpr std::string_view kBlanks = " \t\r\n";

// A tag as the file has it, before it becomes an id.
struct RawTag {
  std::optional<int64_t> id;  // a JSON integer
  std::string name;
};

// One sentence and the line it came from, tags unresolved.
struct RawSentence {
  int64_t line = 0;
  std::vector<std::string> words;
  std::vector<RawTag> tags;
};

std::string list_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 10; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 10) out += fmt::format(", ... ({} in all)", names.size());
  return out;
}

// The words of a line split on spaces and tabs.
std::vector<std::string_view> columns(std::string_view line) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while ((pos = line.find_first_not_of(" \t", pos)) != std::string_view::npos) {
    const size_t end = std::min(line.find_first_of(" \t", pos), line.size());
    out.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

// Calls f(line_number, line) for every line, without its "\r\n".
template <typename F>
void for_each_line(std::string_view buf, F&& f) {
  int64_t number = 0;
  size_t pos = 0;
  while (pos < buf.size()) {
    size_t end = buf.find('\n', pos);
    if (end == std::string_view::npos) end = buf.size();
    std::string_view text = buf.substr(pos, end - pos);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    f(++number, text);
    pos = end + 1;
  }
}

class Reader {
 public:
  explicit Reader(const TaggedSource& src) : src_(src) {
    for (size_t i = 0; i < src.label_names.size(); ++i) {
      const std::string& name = src.label_names[i];
      if (!index_.emplace(name, static_cast<int64_t>(i)).second)
        fail("{}: label name '{}' is given twice; label names must be unique", src.path, name);
      if (src.scheme == TagScheme::Iob2 && !is_iob2_tag(name))
        fail("{}: label name '{}' is not an IOB2 tag (O, B-<type>, I-<type>); fix the label names "
             "or set data.tag_scheme=any",
             src.path, name);
    }
  }

  [[noreturn]] void bad(int64_t line, const std::string& problem) const {
    fail("{}: line {}: {}", src_.path, line, problem);
  }

  void read_json_lines(std::string_view bytes) {
    for_each_line(bytes, [&](int64_t line, std::string_view text) {
      if (text.find_first_not_of(kBlanks) == std::string_view::npos) return;
      json row;
      try {
        row = json::parse(text);
      } catch (const json::exception& e) {
        bad(line, fmt::format("not valid JSON ({}); one object per line, UTF-8", e.what()));
      }
      if (!row.is_object()) bad(line, "not a JSON object; one object per line");
      RawSentence s{line, words_of(row, line), tags_of(row, line)};
      add(std::move(s));
    });
  }

  void read_conll(std::string_view bytes) {
    RawSentence current;
    for_each_line(bytes, [&](int64_t line, std::string_view text) {
      const auto cols = columns(text);
      if (cols.empty()) {
        flush(current);
        return;
      }
      if (cols.front() == "-DOCSTART-") return;
      if (cols.size() < 2)
        bad(line, fmt::format("one column '{}'; CoNLL lines are 'word ... tag' (a blank line "
                              "ends a sentence)",
                              cols.front()));
      try {
        text::validate_utf8(text);
      } catch (const Error& e) {
        bad(line, fmt::format("{}; re-encode the file as UTF-8", e.what()));
      }
      if (current.words.empty()) current.line = line;
      current.words.emplace_back(cols.front());
      current.tags.push_back(RawTag{std::nullopt, std::string(cols.back())});
      check_tag_name(current.tags.back().name, line);
    });
    flush(current);
  }

  TaggedData finish() {
    if (sentences_.empty())
      fail("{}: the file has no sentences; give a file with at least one tagged sentence",
           src_.path);
    TaggedData out;
    out.source = src_.path;
    out.label_names = label_names();
    std::unordered_map<std::string, int64_t> ids;
    for (size_t i = 0; i < out.label_names.size(); ++i) ids[out.label_names[i]] = static_cast<int64_t>(i);
    out.rows.reserve(sentences_.size());
    for (auto& s : sentences_) {
      TaggedSentence row;
      row.words = std::move(s.words);
      for (const RawTag& t : s.tags) row.tags.push_back(t.id ? *t.id : ids.at(t.name));
      out.rows.push_back(std::move(row));
    }
    return out;
  }

 private:
  enum class Kind { Unknown, Ids, Names };

  std::vector<std::string> words_of(const json& row, int64_t line) const {
    const auto it = row.find(src_.words_field);
    if (it == row.end() || !it->is_array())
      bad(line, fmt::format("no list '{}'; give the words as a list of strings (or name "
                            "the field with data.tokens_field)",
                            src_.words_field));
    std::vector<std::string> words;
    for (const json& w : *it) {
      if (!w.is_string())
        bad(line, fmt::format("word {} of '{}' is not a string", words.size() + 1, src_.words_field));
      words.push_back(w.get<std::string>());
    }
    return words;
  }

  std::vector<RawTag> tags_of(const json& row, int64_t line) {
    const auto it = row.find(src_.tags_field);
    if (it == row.end() || !it->is_array())
      bad(line, fmt::format("no list '{}'; give one tag per word (or name the field with data.tags_field)", src_.tags_field));
    std::vector<RawTag> tags;
    for (const json& t : *it) {
      const size_t k = tags.size() + 1;
      if (t.is_number_integer()) {
        tags.push_back(RawTag{resolve_id(t.get<int64_t>(), k, line), {}});
      } else if (t.is_string()) {
        tags.push_back(RawTag{std::nullopt, t.get<std::string>()});
        check_tag_name(tags.back().name, line);
      } else {
        bad(line, fmt::format("tag {} of '{}' is neither a name nor an integer id", k, src_.tags_field));
      }
      note_kind(t.is_string() ? Kind::Names : Kind::Ids, line);
    }
    return tags;
  }

  int64_t resolve_id(int64_t id, size_t k, int64_t line) {
    const auto names = static_cast<int64_t>(src_.label_names.size());
    if (id < 0 || (names > 0 && id >= names))
      bad(line, names > 0 ? fmt::format("tag {} is id {}, outside the {} label names [0, {})", k, id, names, names)
                          : fmt::format("tag {} is id {}; ids are >= 0", k, id));
    max_id_ = std::max(max_id_, id);
    return id;
  }

  void note_kind(Kind kind, int64_t line) {
    if (kind_ == Kind::Unknown) kind_ = kind;
    if (kind_ != kind)
      bad(line, "tags mix names and integer ids; use one kind in the whole file");
  }

  void check_tag_name(const std::string& name, int64_t line) {
    if (!src_.label_names.empty()) {
      if (!index_.count(name))
        bad(line, fmt::format("tag '{}' is not one of the label names ({})", name, list_names(src_.label_names)));
      return;
    }
    if (name.empty()) bad(line, "a tag is empty; every word needs a tag");
    if (src_.scheme == TagScheme::Iob2 && !is_iob2_tag(name))
      bad(line, fmt::format("tag '{}' is not an IOB2 tag (O, B-<type>, I-<type>); fix the tag, or "
                            "set data.tag_scheme=any for tags without entity spans",
                            name));
    seen_.insert(name);
  }

  void flush(RawSentence& s) {
    if (!s.words.empty()) add(std::move(s));
    s = RawSentence{};
  }

  void add(RawSentence s) {
    if (s.words.size() != s.tags.size())
      bad(s.line, fmt::format("{} words but {} tags; give one tag per word", s.words.size(), s.tags.size()));
    for (size_t i = 0; i < s.words.size(); ++i) {
      if (s.words[i].empty()) bad(s.line, fmt::format("word {} is empty; remove it and its tag", i + 1));
    }
    sentences_.push_back(std::move(s));
  }

  std::vector<std::string> label_names() {
    if (!src_.label_names.empty()) return src_.label_names;
    std::vector<std::string> names;
    if (kind_ == Kind::Ids) {
      for (int64_t i = 0; i <= max_id_; ++i) names.push_back(std::to_string(i));
      return names;
    }
    // run_ner.py's get_label_list: the set of names, sorted, "O" included
    // wherever it falls (after B- and I- tags).
    return {seen_.begin(), seen_.end()};
  }

  const TaggedSource& src_;
  std::unordered_map<std::string, int64_t> index_;
  std::vector<RawSentence> sentences_;
  std::set<std::string> seen_;  // tag names read (label_names not given)
  Kind kind_ = Kind::Unknown;
  int64_t max_id_ = -1;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TaggedFormat detect(const std::string& path, std::string_view bytes) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".jsonl", ".ndjson", ".json"})
    if (ends_with(lower, ext)) return TaggedFormat::JsonLines;
  for (const char* ext : {".conll", ".conllu", ".iob", ".bio", ".txt", ".tsv"})
    if (ends_with(lower, ext)) return TaggedFormat::Conll;
  const size_t first = bytes.find_first_not_of(kBlanks);
  return first != std::string_view::npos && bytes[first] == '{' ? TaggedFormat::JsonLines : TaggedFormat::Conll;
}

}  // namespace
}  // namespace tagged

bool is_iob2_tag(std::string_view tag) {
  if (tag == "O") return true;
  return tag.size() > 2 && (tag[0] == 'B' || tag[0] == 'I') && tag[1] == '-';
}

TaggedData parse_tagged_data(std::string_view bytes, const TaggedSource& source) {
  if (bytes.substr(0, 3) == "\xEF\xBB\xBF") bytes.remove_prefix(3);  // a UTF-8 BOM
  tagged::Reader reader(source);
  switch (source.format) {
    case TaggedFormat::JsonLines: reader.read_json_lines(bytes); break;
    case TaggedFormat::Conll: reader.read_conll(bytes); break;
    case TaggedFormat::Auto:
      fail("{}: parse_tagged_data needs the format (JSON Lines or CoNLL); there is no file name to go by",
           source.path);
  }
  return reader.finish();
}

TaggedData read_tagged_data(const TaggedSource& source) {
  const std::string bytes = fs::read_file(source.path);
  TaggedSource resolved = source;
  if (resolved.format == TaggedFormat::Auto) resolved.format = tagged::detect(source.path, bytes);
  return parse_tagged_data(bytes, resolved);
}

}  // namespace ft
