// Unicode helpers of the BERT basic tokenizer; see tokenizer_text.h.
#include "tokenizer_text.h"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "ft/base/error.h"

namespace ft::text {
namespace {

utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

// Python's "cased" property (Lowercase or Uppercase or Lt), as far as utf8proc
// exposes it.
bool is_cased(char32_t cp) {
  const auto c = category(cp);
  if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) {
    return true;
  }
  const auto i = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_islower(i) || utf8proc_isupper(i);
}

// Unicode's Case_Ignorable: Mn Me Cf Lm Sk plus Word_Break MidLetter/MidNumLet/
// Single_Quote characters.
bool is_case_ignorable(char32_t cp) {
  switch (cp) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x5F4: case 0x2018:
    case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55:
    case 0xFF07: case 0xFF0E: case 0xFF1A:
      return true;
    default:
      break;
  }
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK;
}

// Python lower-cases a capital sigma to final sigma when it ends a word:
// cased case-ignorable* SIGMA not followed by case-ignorable* cased.
bool is_final_sigma(const std::vector<char32_t>& cps, std::size_t at) {
  std::size_t j = at;
  while (j > 0 && is_case_ignorable(cps[j - 1])) --j;
  if (j == 0 || !is_cased(cps[j - 1])) return false;
  std::size_t k = at + 1;
  while (k < cps.size() && is_case_ignorable(cps[k])) ++k;
  return k == cps.size() || !is_cased(cps[k]);
}

struct FreeDeleter {
  void operator()(utf8proc_uint8_t* p) const { std::free(p); }
};

// NFC (compose) or NFD (decompose) of valid UTF-8.
std::string normalize(std::string_view s, bool compose) {
  utf8proc_uint8_t* raw = nullptr;
  const auto flags = static_cast<utf8proc_option_t>(
      UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE));
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &raw, flags);
  std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(raw);
  if (n < 0) fail("cannot normalize text: {}", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(owned.get()), static_cast<std::size_t>(n));
}

}  // namespace

void validate_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;  // overlong
      if (b == 0xED) hi = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;  // overlong
      if (b == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      fail("invalid UTF-8 at byte {}", i);
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) fail("invalid UTF-8 at byte {}", i);
    for (std::size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0u) != 0x80u) fail("invalid UTF-8 at byte {}", i);
    }
    i += len;
  }
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

CharClass classify(char32_t cp, bool split_cjk) {
  if (cp < 0x80) {
    if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return CharClass::Space;
    if (cp < 0x20 || cp == 0x7F) return CharClass::Drop;
    return CharClass::Keep;
  }
  if (cp == 0xFFFD) return CharClass::Drop;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return CharClass::Drop;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return CharClass::Space;
    default:
      break;
  }
  if (split_cjk && is_cjk(cp)) return CharClass::Cjk;
  return CharClass::Keep;
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
           (cp >= 123 && cp <= 126);
  }
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

void normalize_word(std::string_view word, bool ascii, bool lowercase, std::string& out) {
  out.clear();
  if (ascii) {
    out.assign(word);
    if (lowercase) {
      for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
    }
    return;
  }
  std::string composed = normalize(word, /*compose=*/true);
  if (!lowercase) {
    out = std::move(composed);
    return;
  }
  std::vector<char32_t> cps;
  for (std::size_t i = 0; i < composed.size();) cps.push_back(next_code_point(composed, i));
  std::string lowered;
  lowered.reserve(composed.size() + 4);
  for (std::size_t k = 0; k < cps.size(); ++k) {
    const char32_t cp = cps[k];
    if (cp == 0x130) {  // the one unconditional multi-char lower-casing Python applies
      lowered.push_back('i');
      append_utf8(lowered, 0x307);
    } else if (cp == 0x3A3) {
      append_utf8(lowered, is_final_sigma(cps, k) ? 0x3C2 : 0x3C3);
    } else {
      append_utf8(lowered, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  }
  const std::string decomposed = normalize(lowered, /*compose=*/false);
  out.reserve(decomposed.size());
  for (std::size_t i = 0; i < decomposed.size();) {
    const std::size_t at = i;
    const char32_t cp = next_code_point(decomposed, i);
    if (category(cp) != UTF8PROC_CATEGORY_MN) out.append(decomposed, at, i - at);
  }
}

}  // namespace ft::text
