// Label cells -> class ids, class sets or scores (data_labels.h).
#include "data/data_labels.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "ft/base/error.h"
#include "ft/data/sampler.h"

namespace ft::data_detail {
namespace {

using json = nlohmann::json;

// An id beyond this is a typo or a score, not a class (ids make names "0".."max").
constexpr int64_t kMaxInferredId = 100000;

std::optional<double> parse_number(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  const std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // "nan" and "inf" parse, but are no score to learn.
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string shown(const RawLabel& raw) {
  if (!raw.name.empty()) return "'" + raw.name + "'";
  if (raw.id) return std::to_string(*raw.id);
  return raw.number ? fmt::format("{}", *raw.number) : std::string("(empty)");
}

}  // namespace

size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::optional<int64_t> parse_int(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string list_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 10; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 10) out += fmt::format(", ... ({} in all)", names.size());
  return out;
}

std::string quoted_value(const json& v) {
  if (v.is_array()) return fmt::format("a list of {} item(s)", v.size());
  if (v.is_object()) return fmt::format("an object with {} key(s)", v.size());
  std::string s = v.dump();
  if (s.size() > 40) {
    std::size_t cut = 40;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    s = s.substr(0, cut) + "...";
  }
  return s;
}

RawLabel label_from_string(std::string_view s, const std::string& delimiter) {
  RawLabel raw;
  if (!delimiter.empty()) {
    raw.listed = true;
    size_t start = 0;
    for (;;) {
      const size_t cut = s.find(delimiter, start);
      const std::string_view item = trim(s.substr(start, cut == std::string_view::npos ? cut : cut - start));
      if (!item.empty()) raw.items.push_back(label_from_string(item, {}));  // "a||b", "": no empty label
      if (cut == std::string_view::npos) break;
      start = cut + delimiter.size();
    }
    return raw;
  }
  raw.name = std::string(trim(s));
  raw.id = parse_int(raw.name);
  raw.number = raw.id ? std::optional<double>(static_cast<double>(*raw.id)) : parse_number(raw.name);
  return raw;
}

RawLabel label_from_json(const json& v, const std::string& delimiter) {
  if (v.is_number_integer()) return RawLabel{v.get<int64_t>(), static_cast<double>(v.get<int64_t>()), {}, false, {}};
  if (v.is_number_float()) {
    const double d = v.get<double>();
    RawLabel raw{std::nullopt, d, {}, false, {}};
    // Range check first: casting an out-of-range double to int64 is undefined.
    if (std::abs(d) < 1e15 && d == std::floor(d)) raw.id = static_cast<int64_t>(d);
    return raw;
  }
  if (v.is_string()) return label_from_string(v.get_ref<const std::string&>(), delimiter);
  if (v.is_array()) {
    RawLabel raw;
    raw.listed = true;
    for (const auto& item : v) {
      if (!item.is_string() && !item.is_number_integer())
        throw BadRow{fmt::format("a label list holds {} ({}); expected names or integer ids", item.type_name(),
                                 quoted_value(item))};
      raw.items.push_back(label_from_json(item, {}));
    }
    return raw;
  }
  throw BadRow{fmt::format("label is {} ({}); expected an integer id, a name, a number or a list of labels",
                           v.type_name(), quoted_value(v))};
}

RawLabel no_label() { return RawLabel{0, 0.0, {}, false, {}}; }

Collector::Collector(const DataSource& src) : src_(src) {
  for (size_t i = 0; i < src.label_names.size(); ++i) {
    if (!index_.emplace(src.label_names[i], static_cast<int64_t>(i)).second)
      fail("{}: label name '{}' is given twice; label names must be unique", src.path, src.label_names[i]);
  }
}

bool Collector::full() const {
  return src_.take == Take::First && src_.max_rows > 0 && static_cast<int64_t>(data_.rows.size()) >= src_.max_rows;
}

void Collector::bad(int64_t row, const std::string& problem) {
  const std::string msg = fmt::format("{}: row {}: {}", src_.path, row, problem);
  if (src_.bad_rows == BadRows::Error) fail("{}; {}", msg, kRowFix);
  ++data_.skipped;
  if (data_.skip_notes.size() < 5) data_.skip_notes.push_back(msg);
}

void Collector::add(int64_t row, std::string text, std::string pair, const RawLabel& raw) {
  auto check_utf8 = [](std::string_view s, const char* what) {
    const size_t at = invalid_utf8_at(s);
    if (at != std::string_view::npos)
      throw BadRow{fmt::format("{} is not valid UTF-8 (byte 0x{:02X} at offset {}); re-encode the file as UTF-8", what,
                               static_cast<unsigned char>(s[at]), at)};
  };
  check_utf8(text, "text");
  check_utf8(pair, "pair text");
  check_utf8(raw.name, "label");
  for (const auto& item : raw.items) check_utf8(item.name, "label");
  TextExample ex;
  std::vector<std::string> pending;
  label_row(raw, ex, pending);
  if (src_.strip_spaces) {
    text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
    pair.erase(std::remove(pair.begin(), pair.end(), ' '), pair.end());
  }
  ex.text = std::move(text);
  ex.pair = std::move(pair);
  data_.rows.push_back(std::move(ex));
  row_numbers_.push_back(row);
  pending_.push_back(std::move(pending));
  numbers_.push_back(raw.number.value_or(std::numeric_limits<double>::quiet_NaN()));
}

// One row's label, checked against the problem type given or against what
// the rows before it implied.
void Collector::label_row(const RawLabel& raw, TextExample& ex, std::vector<std::string>& pending) {
  const auto& given = src_.problem_type;
  const bool multi = given ? *given == ProblemType::kMultiLabel : (raw.listed || !src_.label_delimiter.empty());
  if (!given) {
    if (saw_list_ && !raw.listed)
      throw BadRow{fmt::format("label {} is a single label but earlier rows hold lists of labels (multi-label); "
                               "give every row a list, e.g. [\"a\"]",
                               shown(raw))};
    if (saw_single_ && raw.listed)
      throw BadRow{"label is a list of labels but earlier rows hold single labels; give every row a list, or set "
                   "model.problem_type"};
  }
  (raw.listed ? saw_list_ : saw_single_) = true;
  if (multi) return label_set(raw, ex, pending);
  if (raw.listed)
    throw BadRow{fmt::format("label is a list of {} labels but model.problem_type is {}; give one label per row",
                             raw.items.size(), problem_type_name(*given))};
  if (given == ProblemType::kRegression || (!given && src_.label_names.empty() && raw.number && !raw.id)) {
    if (!raw.number)
      throw BadRow{fmt::format("regression label {} is not a number{}; give a number (or set model.problem_type)",
                               shown(raw), given ? "" : " (earlier rows hold scores with a fraction)")};
    if (!given && mode_ == Mode::Names)
      throw BadRow{fmt::format("label {} is a number but earlier rows use names; set model.problem_type: "
                               "regression for scores, or data.labels for classes",
                               shown(raw))};
    fractional_ = fractional_ || !raw.id;
    mode_ = Mode::Ids;
    return;  // the score is numbers_[row], scaled in finish()
  }
  if (fractional_ && !raw.number)
    throw BadRow{fmt::format("regression label {} is not a number (earlier rows hold scores with a fraction); "
                             "give a number",
                             shown(raw))};
  if (given == ProblemType::kSingleLabel && raw.number && !raw.id)
    throw BadRow{fmt::format("label {} is not an integer id or a name; for scores set model.problem_type: regression",
                             shown(raw))};
  ex.label = resolve(raw, pending);
}

void Collector::label_set(const RawLabel& raw, TextExample& ex, std::vector<std::string>& pending) {
  std::vector<RawLabel> items = raw.listed ? raw.items : std::vector<RawLabel>{raw};  // one label: a set of one
  for (const auto& item : items) {
    const int64_t id = resolve(item, pending);
    if (id >= 0) ex.label_set.push_back(id);
  }
  std::sort(ex.label_set.begin(), ex.label_set.end());
  ex.label_set.erase(std::unique(ex.label_set.begin(), ex.label_set.end()), ex.label_set.end());
}

// A class: its id now (given names, an integer id) or -1 with the name
// left in `pending` for finish(), which numbers names once all are seen.
int64_t Collector::resolve(const RawLabel& raw, std::vector<std::string>& pending) {
  const auto k = static_cast<int64_t>(src_.label_names.size());
  if (k > 0) {
    if (!raw.name.empty()) {
      auto it = index_.find(raw.name);
      if (it != index_.end()) return it->second;
      if (!raw.id)
        throw BadRow{fmt::format("unknown label '{}' (label names: {})", raw.name, list_names(src_.label_names))};
    }
    if (!raw.id) throw BadRow{"empty label"};
    if (*raw.id < 0 || *raw.id >= k)
      throw BadRow{fmt::format("label id {} is outside [0, {}) ({} label names given)", *raw.id, k, k)};
    return *raw.id;
  }
  const Mode mode = raw.id ? Mode::Ids : Mode::Names;
  if (mode == Mode::Names && raw.name.empty()) throw BadRow{"empty label"};
  if (mode_ != Mode::Unknown && mode != mode_)
    throw BadRow{fmt::format(
        "label '{}' is {} but earlier rows use {}; set data.labels (the label names, in id order) to map both",
        raw.id ? std::to_string(*raw.id) : raw.name, raw.id ? "an integer id" : "a name",
        mode_ == Mode::Ids ? "integer ids" : "names")};
  mode_ = mode;
  if (mode == Mode::Ids) return *raw.id;  // checked in finish(), once regression is ruled out
  pending.push_back(raw.name);
  return -1;
}

// The problem type the rows settled on, and every row's class ids or score.
void Collector::finish_labels() {
  const bool multi = src_.problem_type ? *src_.problem_type == ProblemType::kMultiLabel
                                       : (saw_list_ || !src_.label_delimiter.empty());
  const bool regression = src_.problem_type ? *src_.problem_type == ProblemType::kRegression
                                            : (!multi && fractional_);
  data_.problem_type = multi ? ProblemType::kMultiLabel
                             : regression ? ProblemType::kRegression : ProblemType::kSingleLabel;
  std::vector<bool> keep(data_.rows.size(), true);
  if (regression) {
    for (size_t r = 0; r < data_.rows.size(); ++r) data_.rows[r].score = numbers_[r] / src_.label_scale;
    return;
  }
  if (!src_.label_names.empty()) {
    data_.label_names = src_.label_names;
  } else if (mode_ == Mode::Names) {
    // Sorted names give every run (and every rank) the same ids.
    std::vector<std::string> names;
    for (const auto& row : pending_) names.insert(names.end(), row.begin(), row.end());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::unordered_map<std::string, int64_t> ids;
    for (size_t i = 0; i < names.size(); ++i) ids[names[i]] = static_cast<int64_t>(i);
    for (size_t r = 0; r < data_.rows.size(); ++r) {
      auto& ex = data_.rows[r];
      if (!multi && !pending_[r].empty()) ex.label = ids[pending_[r].front()];
      for (const auto& name : pending_[r]) {
        if (multi) ex.label_set.push_back(ids[name]);
      }
      std::sort(ex.label_set.begin(), ex.label_set.end());
      ex.label_set.erase(std::unique(ex.label_set.begin(), ex.label_set.end()), ex.label_set.end());
    }
    data_.label_names = std::move(names);
  } else {
    // Integer ids, checked now that they are known not to be scores.
    int64_t max_id = -1;
    for (size_t r = 0; r < data_.rows.size(); ++r) {
      auto& ex = data_.rows[r];
      std::vector<int64_t> ids = multi ? ex.label_set : std::vector<int64_t>{ex.label};
      for (const int64_t id : ids) {
        if (id < 0) {
          keep[r] = false;
          bad(row_numbers_[r], fmt::format("negative label id {}", id));
        } else if (id > kMaxInferredId) {
          keep[r] = false;
          bad(row_numbers_[r], fmt::format("label id {} is implausibly large; give label_names", id));
        }
        if (keep[r]) max_id = std::max(max_id, id);
      }
    }
    for (int64_t i = 0; i <= max_id; ++i) data_.label_names.push_back(std::to_string(i));
  }
  if (std::find(keep.begin(), keep.end(), false) == keep.end()) return;
  std::vector<TextExample> kept;
  for (size_t r = 0; r < data_.rows.size(); ++r)
    if (keep[r]) kept.push_back(std::move(data_.rows[r]));
  data_.rows = std::move(kept);
}

void Collector::take_random() {
  if (src_.take != Take::Random || src_.max_rows <= 0 || static_cast<int64_t>(data_.rows.size()) <= src_.max_rows)
    return;
  std::vector<int64_t> pick = seeded_permutation(static_cast<int64_t>(data_.rows.size()), src_.take_seed);
  pick.resize(static_cast<size_t>(src_.max_rows));
  std::sort(pick.begin(), pick.end());
  std::vector<TextExample> kept;
  kept.reserve(pick.size());
  for (int64_t i : pick) kept.push_back(std::move(data_.rows[static_cast<size_t>(i)]));
  data_.rows = std::move(kept);
}

TextData Collector::finish() {
  data_.source = src_.path;
  if (!data_.rows.empty()) finish_labels();
  if (data_.rows.empty()) {
    if (data_.skipped > 0)
      fail("{}: no usable rows ({} bad rows skipped, e.g. {}); fix the file", src_.path, data_.skipped,
           data_.skip_notes.front());
    fail("{}: the file has no rows; give a data file with at least one example", src_.path);
  }
  take_random();
  return std::move(data_);
}

}  // namespace ft::data_detail
