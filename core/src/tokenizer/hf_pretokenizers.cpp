// tokenizer.json pre-tokenizers (hf_pipeline.h). Splitting follows the Rust
// library's NormalizedString::split: the text is cut into matched and
// unmatched spans, the behaviour decides which are kept and what merges, and
// empty pieces are dropped.
#include <algorithm>
#include <array>
#include <functional>

#include <fmt/format.h>
#include <utf8proc.h>

#include "hf_pipeline.h"
#include "onig_regex.h"
#include "tokenizer_text.h"

namespace ft::hf {
namespace {

struct Span {
  std::size_t begin, end;
  bool match;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior read_behavior(const json& j, const std::string& key, const Where& w, Behavior fallback) {
  if (!j.contains("behavior")) return fallback;
  const std::string b = w.str(j, "behavior", key + ".behavior");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  w.unsupported(key + ".behavior", b, "Removed, Isolated, MergedWithPrevious, MergedWithNext and Contiguous");
}

// Matched [begin, end) ranges (sorted, disjoint) and the gaps between them.
std::vector<Span> spans_of(const std::vector<std::pair<std::size_t, std::size_t>>& matches, std::size_t size) {
  std::vector<Span> out;
  std::size_t at = 0;
  for (const auto& [b, e] : matches) {
    if (b > at) out.push_back({at, b, false});
    out.push_back({b, e, true});
    at = e;
  }
  if (at < size) out.push_back({at, size, false});
  return out;
}

void split_piece(const Piece& piece, std::vector<Span> spans, Behavior behavior, bool invert,
                 std::vector<Piece>& out) {
  if (invert) {
    for (auto& s : spans) s.match = !s.match;
  }
  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& s : spans)
        if (!s.match) kept.push_back(s);
      break;
    case Behavior::kIsolated:
      kept = spans;
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back(s);
        }
        previous_match = s.match;
      }
      break;
    case Behavior::kMergedWithNext:
      // The Rust code folds from the end: a match joins the piece after it.
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back(*it);
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::kContiguous:
      for (std::size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].match == previous_match) {
          kept.back().end = spans[i].end;
        } else {
          kept.push_back(spans[i]);
        }
        previous_match = spans[i].match;
      }
      break;
  }
  for (const auto& s : kept) {
    if (s.end == s.begin) continue;
    out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_origin && s.begin == 0});
  }
}

// Each code point for which pred holds is a match of its own (a char pattern).
template <typename Pred>
std::vector<Span> char_spans(const std::string& s, Pred&& pred) {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t at = i;
    if (pred(text::next_code_point(s, i))) matches.emplace_back(at, i);
  }
  return spans_of(matches, s.size());
}

std::vector<Span> literal_spans(const std::string& s, const std::string& needle) {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::size_t from = 0, at = 0;
  while (!needle.empty() && (at = s.find(needle, from)) != std::string::npos) {
    matches.emplace_back(at, at + needle.size());
    from = at + needle.size();
  }
  return spans_of(matches, s.size());
}

// GPT-2's pattern, as ByteLevel and RoBERTa-style Split pre-tokenizers spell it:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched by hand, alternative by alternative in Oniguruma's leftmost-first
// order: the same splits as Oniguruma itself (test_tokenizer_json checks
// both against tokenizers) at about 2.5 times its speed on IMDB reviews, and
// every byte-level BPE file runs it (docs/models.md).
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::vector<Span> gpt2_spans(const std::string& s) {
  std::vector<char32_t> cp;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < s.size();) {
    at.push_back(i);
    cp.push_back(text::next_code_point(s, i));
  }
  const std::size_t n = cp.size();
  at.push_back(s.size());
  auto other = [](char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_numeric(c); };
  // The end of the longest run from `from` of code points where pred holds.
  auto run = [&](std::size_t from, auto pred) {
    while (from < n && pred(cp[from])) ++from;
    return from;
  };
  // One match starting at i; every code point starts some alternative, so the
  // matches tile the text.
  auto match_at = [&](std::size_t i) -> std::size_t {
    if (cp[i] == '\'' && i + 1 < n) {
      const char32_t c1 = cp[i + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
      if (i + 2 < n) {
        const char32_t c2 = cp[i + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
      }
    }
    const std::size_t body = cp[i] == ' ' ? i + 1 : i;  // " ?" takes one U+0020
    if (body < n) {
      if (is_letter(cp[body])) return run(body, is_letter);
      if (is_numeric(cp[body])) return run(body, is_numeric);
      if (other(cp[body])) return run(body, other);
    }
    const std::size_t end = run(i, is_whitespace);
    // \s+(?!\S) gives back the last space when a non-space follows.
    if (end < n && end - i > 1) return end - 1;
    return end;
  };
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  for (std::size_t i = 0; i < n;) {
    const std::size_t j = match_at(i);
    matches.emplace_back(at[i], at[j]);
    i = j;
  }
  return spans_of(matches, s.size());
}

// GPT-2's byte-to-character table: printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100 onwards, in byte order.
std::array<std::string, 256> byte_chars() {
  std::array<std::string, 256> out;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    text::append_utf8(out[static_cast<std::size_t>(b)], printable ? static_cast<char32_t>(b) : next++);
  }
  return out;
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), chars_(byte_chars()) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (auto& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (use_regex_) {
        split_piece(p, gpt2_spans(p.text), Behavior::kIsolated, false, out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
    }
    for (auto& p : out) {
      std::string mapped;
      for (const char c : p.text) mapped += chars_[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::array<std::string, 256> chars_;
};

class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(char32_t replacement, Prepend prepend, bool split)
      : replacement_(replacement), prepend_(prepend), split_(split) {
    text::append_utf8(marker_, replacement);
  }
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (auto& p : pieces) {
      std::string t;
      for (const char c : p.text) {
        if (c == ' ') {
          t += marker_;
        } else {
          t.push_back(c);
        }
      }
      const bool starts = t.compare(0, marker_.size(), marker_) == 0;
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_origin))) t.insert(0, marker_);
      p.text = std::move(t);
      if (split_) {
        split_piece(p, char_spans(p.text, [&](char32_t c) { return c == replacement_; }), Behavior::kMergedWithNext,
                    false, out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
    }
    pieces = std::move(out);
  }

 private:
  char32_t replacement_;
  Prepend prepend_;
  bool split_;
  std::string marker_;
};

// Oniguruma's \w (tokenizers runs Whitespace's pattern on Oniguruma):
// letters, marks, decimal digits and connector punctuation.
bool is_word_char(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return is_letter(c);
  }
}

// A pre-tokenizer that is one split of each piece.
class Splitter final : public PreTokenizer {
 public:
  using SpanFn = std::function<std::vector<Span>(const std::string&)>;
  Splitter(SpanFn spans, Behavior behavior, bool invert)
      : spans_(std::move(spans)), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) split_piece(p, spans_(p.text), behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  SpanFn spans_;
  Behavior behavior_;
  bool invert_;
};

// Whitespace's \w+|[^\w\s]+: runs of word characters and runs of the rest,
// the whitespace between them matched by neither.
std::vector<Span> word_spans(const std::string& s) {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  int open = 0;  // 0: none, 1: a word run, 2: an other run
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t at = i;
    const char32_t c = text::next_code_point(s, i);
    const int kind = is_word_char(c) ? 1 : is_whitespace(c) ? 0 : 2;
    if (kind != 0 && kind == open) {
      matches.back().second = i;
    } else if (kind != 0) {
      matches.emplace_back(at, i);
    }
    open = kind;
  }
  return spans_of(matches, s.size());
}

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

char32_t single_char(const std::string& s, const std::string& key, const Where& w) {
  std::size_t i = 0;
  const char32_t c = s.empty() ? 0 : text::next_code_point(s, i);
  if (s.empty() || i != s.size()) w.refuse(key, fmt::format("'{}' must be one character", s));
  return c;
}

std::unique_ptr<PreTokenizer> read_split(const json& j, const std::string& key, const Where& w) {
  const json pattern = j.value("pattern", json());
  const Behavior behavior = read_behavior(j, key, w, Behavior::kRemoved);
  const bool invert = w.flag(j, "invert", key + ".invert", false);
  if (pattern.is_object() && pattern.contains("String")) {
    std::string literal = w.str(pattern, "String", key + ".pattern.String");
    return std::make_unique<Splitter>([literal](const std::string& s) { return literal_spans(s, literal); }, behavior,
                                      invert);
  }
  if (!pattern.is_object() || !pattern.contains("Regex")) {
    w.refuse(key + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  const std::string re = w.str(pattern, "Regex", key + ".pattern.Regex");
  if (re == kGpt2Pattern) return std::make_unique<Splitter>(gpt2_spans, behavior, invert);
  // Empty matches stay: the behaviours see them as tokenizers does, and only empty pieces are dropped.
  std::shared_ptr<const OnigRegex> compiled = read_regex(re, key + ".pattern.Regex", w);
  return std::make_unique<Splitter>(
      [compiled](const std::string& s) { return spans_of(compiled->find_all(s), s.size()); }, behavior, invert);
}

std::unique_ptr<PreTokenizer> read_metaspace(const json& j, const std::string& key, const Where& w) {
  const char32_t replacement = single_char(w.str(j, "replacement", key + ".replacement", "\xE2\x96\x81"),
                                           key + ".replacement", w);
  // Files older than tokenizers 0.19 say add_prefix_space instead of prepend_scheme.
  Metaspace::Prepend prepend = w.flag(j, "add_prefix_space", key + ".add_prefix_space", true)
                                   ? Metaspace::Prepend::kAlways
                                   : Metaspace::Prepend::kNever;
  if (j.contains("prepend_scheme")) {
    const std::string scheme = w.str(j, "prepend_scheme", key + ".prepend_scheme");
    if (scheme == "always") {
      prepend = Metaspace::Prepend::kAlways;
    } else if (scheme == "first") {
      prepend = Metaspace::Prepend::kFirst;
    } else if (scheme == "never") {
      prepend = Metaspace::Prepend::kNever;
    } else {
      w.unsupported(key + ".prepend_scheme", scheme, "always, first and never");
    }
  }
  return std::make_unique<Metaspace>(replacement, prepend, w.flag(j, "split", key + ".split", true));
}

}  // namespace

std::unique_ptr<PreTokenizer> read_pre_tokenizer(const json& j, const std::string& key, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = w.type(j, key);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(w.flag(j, "add_prefix_space", key + ".add_prefix_space", true),
                                       w.flag(j, "use_regex", key + ".use_regex", true));
  }
  if (type == "Metaspace") return read_metaspace(j, key, w);
  // The word runs are the pattern's matches; inverted, the whitespace between them is what goes.
  if (type == "Whitespace") return std::make_unique<Splitter>(word_spans, Behavior::kRemoved, true);
  if (type == "WhitespaceSplit") {
    return std::make_unique<Splitter>([](const std::string& s) { return char_spans(s, is_whitespace); },
                                      Behavior::kRemoved, false);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(std::make_unique<Splitter>([](const std::string& s) { return char_spans(s, is_whitespace); },
                                               Behavior::kRemoved, false));
    parts.push_back(std::make_unique<Splitter>([](const std::string& s) { return char_spans(s, is_punctuation); },
                                               Behavior::kIsolated, false));
    return std::make_unique<PreTokenizerSequence>(std::move(parts));
  }
  if (type == "Punctuation") {
    return std::make_unique<Splitter>([](const std::string& s) { return char_spans(s, is_punctuation); },
                                      read_behavior(j, key, w, Behavior::kIsolated), false);
  }
  if (type == "Digits") {
    const bool individual = w.flag(j, "individual_digits", key + ".individual_digits", false);
    return std::make_unique<Splitter>([](const std::string& s) { return char_spans(s, is_numeric); },
                                      individual ? Behavior::kIsolated : Behavior::kContiguous, false);
  }
  if (type == "CharDelimiterSplit") {
    const char32_t d = single_char(w.str(j, "delimiter", key + ".delimiter"), key + ".delimiter", w);
    return std::make_unique<Splitter>([d](const std::string& s) { return char_spans(s, [d](char32_t c) { return c == d; }); },
                                      Behavior::kRemoved, false);
  }
  if (type == "Split") return read_split(j, key, w);
  if (type == "Sequence") {
    const json list = j.value("pretokenizers", json());
    if (!list.is_array()) w.refuse(key + ".pretokenizers", "missing or not a list");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (auto p = read_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", key, i), w)) parts.push_back(std::move(p));
    }
    return std::make_unique<PreTokenizerSequence>(std::move(parts));
  }
  w.unsupported(key + ".type", type,
                "ByteLevel, Metaspace, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation, Digits, "
                "CharDelimiterSplit, Split and Sequence");
}

}  // namespace ft::hf
