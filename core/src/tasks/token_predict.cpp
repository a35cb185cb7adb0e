// `ft predict` for token classification: raw text -> words with their byte
// spans -> tokens with byte offsets -> entities (ft/tasks/token_classification.h).
#include <numeric>

#include "tokenizer/tokenizer_text.h"
#include "ft/base/error.h"
#include "ft/tasks/token_classification.h"

namespace ft {
namespace {

// A token's text inside its word: the vocabulary entry without the markers
// tokenizers put on word pieces ("##" continuing WordPiece, "Ġ" byte-level
// BPE's space, "▁" SentencePiece's).
std::string_view piece_text(std::string_view token) {
  for (std::string_view marker : {std::string_view("##"), std::string_view("\xC4\xA0"), std::string_view("\xE2\x96\x81")}) {
    if (token.size() > marker.size() && token.substr(0, marker.size()) == marker) return token.substr(marker.size());
  }
  return token;
}

int64_t code_points(std::string_view s) {
  int64_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0u) != 0x80u ? 1 : 0;
  return n;
}

}  // namespace

TextWords split_text_words(std::string_view text) {
  text::validate_utf8(text);
  TextWords out;
  size_t start = std::string_view::npos;
  auto end_word = [&](size_t at) {
    if (start == std::string_view::npos) return;
    out.words.emplace_back(text.substr(start, at - start));
    out.spans.emplace_back(static_cast<int64_t>(start), static_cast<int64_t>(at));
    start = std::string_view::npos;
  };
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    const char32_t cp = text::next_code_point(text, i);
    const text::CharClass cls = text::classify(cp, true);
    if (cls == text::CharClass::Space || cls == text::CharClass::Drop) {
      end_word(at);
    } else if (cls == text::CharClass::Cjk || text::is_punctuation(cp)) {
      end_word(at);
      start = at;
      end_word(i);
    } else if (start == std::string_view::npos) {
      start = at;
    }
  }
  end_word(text.size());
  return out;
}

std::vector<std::pair<int64_t, int64_t>> token_offsets(const WordsEncoding& encoding, const TextWords& words,
                                                       const std::vector<std::string>& vocabulary) {
  const auto& ids = encoding.encoding.input_ids;
  const auto& word_ids = encoding.word_ids;
  std::vector<std::pair<int64_t, int64_t>> out(ids.size(), {0, 0});
  for (size_t t = 0; t < ids.size();) {
    const int64_t w = word_ids[t];
    size_t end = t + 1;
    while (end < ids.size() && word_ids[end] == w) ++end;
    if (w < 0) {
      t = end;
      continue;
    }
    if (w >= static_cast<int64_t>(words.words.size())) fail("token offsets: token {} belongs to word {} of {}", t, w, words.words.size());
    const auto [begin, stop] = words.spans[static_cast<size_t>(w)];
    const std::string_view word = words.words[static_cast<size_t>(w)];
    // The pieces' lengths, in code points or (byte-level BPE) in bytes, add
    // up to the word's when no normaliser changed its length: then each
    // piece gets its own span. Otherwise the first piece spans the word.
    std::vector<int64_t> chars, bytes;
    for (size_t k = t; k < end; ++k) {
      const auto id = static_cast<size_t>(ids[k]);
      const std::string_view piece = id < vocabulary.size() ? piece_text(vocabulary[id]) : std::string_view();
      chars.push_back(code_points(piece));
      bytes.push_back(static_cast<int64_t>(piece.size()));
    }
    const int64_t word_chars = code_points(word);
    const bool by_chars = std::accumulate(chars.begin(), chars.end(), int64_t{0}) == word_chars;
    const bool by_bytes = !by_chars && std::accumulate(chars.begin(), chars.end(), int64_t{0}) == stop - begin;
    size_t byte = 0;
    for (size_t k = t; k < end; ++k) {
      const int64_t from = begin + static_cast<int64_t>(byte);
      if (by_chars) {
        for (int64_t c = 0; c < chars[k - t] && byte < word.size(); ++c) text::next_code_point(word, byte);
      } else if (by_bytes) {
        byte += static_cast<size_t>(chars[k - t]);
      } else {
        byte = k == t ? word.size() : byte;
      }
      out[k] = {from, begin + static_cast<int64_t>(std::min(byte, word.size()))};
    }
    t = end;
  }
  return out;
}

}  // namespace ft
