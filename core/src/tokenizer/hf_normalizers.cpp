// tokenizer.json normalizers, the Unicode predicates the Rust library uses,
// and the error helper of the whole pipeline (hf_pipeline.h).
#include <cstdlib>

#include <fmt/format.h>
#include <utf8proc.h>

#include "ft/base/error.h"
#include "hf_pipeline.h"
#include "onig_regex.h"
#include "tokenizer_text.h"

namespace ft::hf {

void Where::refuse(const std::string& key, const std::string& what) const { fail("{}: {}: {}", path_, key, what); }

void Where::unsupported(const std::string& key, const std::string& value, const std::string& supported) const {
  refuse(key, fmt::format("'{}' is not supported; ft reads {}", value, supported));
}

std::string Where::str(const json& obj, const std::string& name, const std::string& key,
                       std::optional<std::string> fallback) const {
  if (!obj.contains(name) || obj.at(name).is_null()) {
    if (!fallback) refuse(key, "missing; a string is required");
    return *fallback;
  }
  if (!obj.at(name).is_string()) refuse(key, fmt::format("{} is not a string", obj.at(name).dump()));
  return obj.at(name).get<std::string>();
}

bool Where::flag(const json& obj, const std::string& name, const std::string& key, bool fallback) const {
  if (!obj.contains(name) || obj.at(name).is_null()) return fallback;
  if (!obj.at(name).is_boolean()) refuse(key, fmt::format("{} is not true or false", obj.at(name).dump()));
  return obj.at(name).get<bool>();
}

std::string Where::type(const json& obj, const std::string& key) const {
  if (!obj.is_object()) refuse(key, "not an object");
  return str(obj, "type", key + ".type");
}

namespace {

utf8proc_category_t category(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

bool letter_category(utf8proc_category_t c) {
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

struct FreeDeleter {
  void operator()(utf8proc_uint8_t* p) const { std::free(p); }
};

std::string utf8proc_form(const std::string& s, int flags) {
  utf8proc_uint8_t* raw = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &raw,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | flags));
  std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(raw);
  if (n < 0) fail("cannot normalize text: {}", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(owned.get()), static_cast<std::size_t>(n));
}

// Applies f(code point, out) to every code point.
template <typename F>
void map_chars(std::string& s, F&& f) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) f(text::next_code_point(s, i), out);
  s = std::move(out);
}

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int flags) : flags_(flags) {}
  void apply(std::string& s, bool& /*start_kept*/) const override { s = utf8proc_form(s, flags_); }

 private:
  int flags_;
};

// Rust's char::to_lowercase: the full mapping per character (no final-sigma
// rule, unlike Python's str.lower); U+0130 is the one character whose full
// lower case is two.
class Lowercase final : public Normalizer {
 public:
  void apply(std::string& s, bool& /*start_kept*/) const override {
    map_chars(s, [](char32_t cp, std::string& out) {
      if (cp == 0x130) {
        out += "i\xCC\x87";
        return;
      }
      text::append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    });
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& s, bool& start_kept) const override {
    const auto starts = char_starts(s);
    std::size_t first = 0, last = starts.size() - 1;  // code point indices [first, last)
    auto cp_at = [&](std::size_t k) {
      std::size_t i = starts[k];
      return text::next_code_point(s, i);
    };
    if (left_) while (first < last && is_whitespace(cp_at(first))) ++first;
    if (right_) while (last > first && is_whitespace(cp_at(last - 1))) --last;
    if (first > 0) start_kept = false;
    s = s.substr(starts[first], starts[last] - starts[first]);
  }

 private:
  bool left_, right_;
};

// tokenizers drops the non-spacing marks (Mn) only.
class StripAccents final : public Normalizer {
 public:
  void apply(std::string& s, bool& start_kept) const override {
    std::size_t i = 0;
    if (!s.empty() && category(text::next_code_point(s, i)) == UTF8PROC_CATEGORY_MN) start_kept = false;
    map_chars(s, [](char32_t cp, std::string& out) {
      if (category(cp) != UTF8PROC_CATEGORY_MN) text::append_utf8(out, cp);
    });
  }
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& s, bool& /*start_kept*/) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// A literal pattern or a regular expression; every match, empty ones
// included (they insert `content`), is replaced as NormalizedString::replace does.
class Replace final : public Normalizer {
 public:
  Replace(std::string literal, std::shared_ptr<const OnigRegex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  void apply(std::string& s, bool& start_kept) const override {
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    if (re_) {
      matches = re_->find_all(s);
    } else {
      std::size_t at = 0;
      while (!literal_.empty() && (at = s.find(literal_, at)) != std::string::npos) {
        matches.emplace_back(at, at + literal_.size());
        at += literal_.size();
      }
    }
    if (matches.empty()) return;
    if (content_.empty() && matches.front().first == 0 && matches.front().second > 0) start_kept = false;
    std::string out;
    std::size_t from = 0;
    for (const auto& [b, e] : matches) {
      out.append(s, from, b - from);
      out += content_;
      from = e;
    }
    out.append(s, from, std::string::npos);
    s = std::move(out);
  }

 private:
  std::string literal_;
  std::shared_ptr<const OnigRegex> re_;
  std::string content_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::string& s, bool& start_kept) const override {
    for (const auto& p : parts_) p->apply(s, start_kept);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::shared_ptr<const OnigRegex> read_regex(const std::string& pattern, const std::string& key, const Where& w) {
  try {
    return std::make_shared<const OnigRegex>(pattern);
  } catch (const Error& e) {
    w.refuse(key, fmt::format("the regular expression '{}' does not compile: {}", pattern, e.what()));
  }
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  if (cp == 0x85) return true;
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool is_numeric(char32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t cp) { return letter_category(category(cp)) || is_numeric(cp); }

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_PC || c == UTF8PROC_CATEGORY_PD || c == UTF8PROC_CATEGORY_PS ||
         c == UTF8PROC_CATEGORY_PE || c == UTF8PROC_CATEGORY_PI || c == UTF8PROC_CATEGORY_PF ||
         c == UTF8PROC_CATEGORY_PO;
}

bool is_letter(char32_t cp) { return letter_category(category(cp)); }

std::vector<std::size_t> char_starts(std::string_view s) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0u) != 0x80u) out.push_back(i);
  }
  out.push_back(s.size());
  return out;
}

std::unique_ptr<Normalizer> read_normalizer(const json& j, const std::string& key, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = w.type(j, key);
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip") {
    return std::make_unique<Strip>(w.flag(j, "strip_left", key + ".strip_left", true),
                                   w.flag(j, "strip_right", key + ".strip_right", true));
  }
  if (type == "Precompiled") return read_precompiled(j, key, w);
  if (type == "Prepend") return std::make_unique<Prepend>(w.str(j, "prepend", key + ".prepend"));
  if (type == "Replace") {
    const json pattern = j.value("pattern", json());
    const std::string content = w.str(j, "content", key + ".content");
    if (pattern.is_object() && pattern.contains("String")) {
      return std::make_unique<Replace>(w.str(pattern, "String", key + ".pattern.String"), nullptr, content);
    }
    if (pattern.is_object() && pattern.contains("Regex")) {
      const std::string re = w.str(pattern, "Regex", key + ".pattern.Regex");
      return std::make_unique<Replace>("", read_regex(re, key + ".pattern.Regex", w), content);
    }
    w.refuse(key + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  if (type == "Sequence") {
    const json list = j.value("normalizers", json());
    if (!list.is_array()) w.refuse(key + ".normalizers", "missing or not a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (auto n = read_normalizer(list[i], fmt::format("{}.normalizers[{}]", key, i), w)) parts.push_back(std::move(n));
    }
    return std::make_unique<NormalizerSequence>(std::move(parts));
  }
  w.unsupported(key + ".type", type,
                "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Precompiled and Sequence "
                "(BertNormalizer with WordPiece models)");
}

}  // namespace ft::hf
