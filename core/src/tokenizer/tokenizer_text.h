// Internal: the Unicode side of the BERT basic tokenizer (tokenizer.cpp and
// vocab_builder.cpp use it). Mirrors transformers' BasicTokenizer character
// classes; the Unicode tables come from utf8proc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft::text {

/// Throws ft::Error "invalid UTF-8 at byte N" (N from 0) unless `s` is
/// well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
void validate_utf8(std::string_view s);

/// Decodes the code point at s[i] and advances i; `s` must be valid UTF-8.
inline char32_t next_code_point(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  auto cont = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]) & 0x3Fu; };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (char32_t(b0 & 0x1Fu) << 6) | cont(1);
    i += 2;
  } else if (b0 < 0xF0) {
    cp = (char32_t(b0 & 0x0Fu) << 12) | (char32_t(cont(1)) << 6) | cont(2);
    i += 3;
  } else {
    cp = (char32_t(b0 & 0x07u) << 18) | (char32_t(cont(1)) << 12) | (char32_t(cont(2)) << 6) |
         cont(3);
    i += 4;
  }
  return cp;
}

void append_utf8(std::string& out, char32_t cp);

/// What BasicTokenizer's _clean_text + _tokenize_chinese_chars (+ str.split) do
/// with one code point.
enum class CharClass : uint8_t {
  Drop,   ///< U+0000, U+FFFD, category C* other than \t \n \r
  Space,  ///< word separator: \t \n \r, Zs, and U+2028/U+2029 (str.split splits there)
  Cjk,    ///< a CJK ideograph: a word of its own (when CJK splitting is on)
  Keep,
};
CharClass classify(char32_t cp, bool split_cjk);

/// HF's _is_punctuation: ASCII 33-47, 58-64, 91-96, 123-126, or category P*.
bool is_punctuation(char32_t cp);

/// HF's _is_chinese_char code-point ranges.
bool is_cjk(char32_t cp);

/// Normalises one whitespace-delimited word as BasicTokenizer does after its
/// whitespace split: NFC; then, when `lowercase`, Python str.lower(), NFD and
/// removal of Mn marks. `ascii` says the word is pure ASCII (the fast path).
/// Writes into `out` (cleared first).
void normalize_word(std::string_view word, bool ascii, bool lowercase, std::string& out);

/// Calls emit(std::string_view) for each piece of `word` split at punctuation
/// (each punctuation char is its own piece), like HF's _run_split_on_punc.
template <typename Emit>
void split_on_punctuation(std::string_view word, Emit&& emit) {
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < word.size()) {
    const std::size_t at = i;
    const char32_t cp = next_code_point(word, i);
    if (is_punctuation(cp)) {
      if (at > start) emit(word.substr(start, at - start));
      emit(word.substr(at, i - at));
      start = i;
    }
  }
  if (word.size() > start) emit(word.substr(start));
}

/// Splits cleaned text into raw words (before normalisation): calls
/// emit(std::string_view word, bool ascii) per word. `text` must be valid UTF-8;
/// `buffer` is scratch space (dropped characters are removed from inside words).
template <typename Emit>
void for_each_raw_word(std::string_view text, bool split_cjk, std::string& buffer, Emit&& emit) {
  buffer.clear();
  bool ascii = true;
  auto flush = [&]() {
    if (!buffer.empty()) emit(std::string_view(buffer), ascii);
    buffer.clear();
    ascii = true;
  };
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b >= 0x80) {
      const std::size_t at = i;
      const char32_t cp = next_code_point(text, i);
      switch (classify(cp, split_cjk)) {
        case CharClass::Drop:
          break;
        case CharClass::Space:
          flush();
          break;
        case CharClass::Cjk:
          flush();
          buffer.append(text.substr(at, i - at));
          ascii = false;
          flush();
          break;
        case CharClass::Keep:
          buffer.append(text.substr(at, i - at));
          ascii = false;
          break;
      }
      continue;
    }
    ++i;
    if (b == ' ' || b == '\t' || b == '\n' || b == '\r') {
      flush();
    } else if (b >= 0x20 && b != 0x7F) {
      buffer.push_back(static_cast<char>(b));
    }  // other ASCII controls (and NUL) are dropped
  }
  flush();
}

}  // namespace ft::text
