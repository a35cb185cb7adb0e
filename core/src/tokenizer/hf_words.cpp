// Tokenizer::encode_words's layout, shared by WordPiece and the tokenizer.json
// pipeline: the words' ids one after another, each token remembering its word,
// then truncation, the template's special tokens and padding (pad_encoding,
// which encode() uses too).
#include <cstddef>

#include "ft/base/error.h"
#include "hf_pipeline.h"

namespace ft::hf {

WordsEncoding encode_words_with(const std::vector<std::string>& words,
                                const std::function<void(std::string_view, std::vector<int64_t>&)>& ids_of,
                                const std::vector<TemplateItem>& single, int64_t pad_id, int max_length,
                                bool pad_to_max_length) {
  std::vector<int64_t> ids, word_of;
  for (std::size_t k = 0; k < words.size(); ++k) {
    try {
      ids_of(words[k], ids);
    } catch (const Error& e) {
      fail("word {}: {}", k, e.what());
    }
    word_of.resize(ids.size(), static_cast<int64_t>(k));
  }
  std::size_t specials = 0;
  for (const auto& item : single) specials += item.sequence < 0 ? item.ids.size() : 0;
  if (max_length > 0) {
    if (static_cast<std::size_t>(max_length) < specials) {
      fail("max_length {} leaves no room for the {} special tokens; use >= {}", max_length, specials, specials);
    }
    const auto [kept, unused] =
        truncated_lengths(ids.size(), 0, false, static_cast<std::size_t>(max_length) - specials, PairTruncation::kFast);
    ids.resize(kept);
    word_of.resize(kept);
  }
  WordsEncoding out;
  Encoding& e = out.encoding;
  for (const auto& item : single) {
    const bool words_here = item.sequence >= 0;
    const std::vector<int64_t>& part = words_here ? ids : item.ids;
    e.input_ids.insert(e.input_ids.end(), part.begin(), part.end());
    e.token_type_ids.resize(e.input_ids.size(), item.type_id);
    if (words_here) {
      out.word_ids.insert(out.word_ids.end(), word_of.begin(), word_of.end());
    } else {
      out.word_ids.resize(e.input_ids.size(), -1);
    }
  }
  e.attention_mask.assign(e.input_ids.size(), 1);
  pad_encoding(e, max_length, pad_to_max_length, pad_id);
  out.word_ids.resize(e.input_ids.size(), -1);
  return out;
}

void pad_encoding(Encoding& e, int max_length, bool pad_to_max_length, int64_t pad_id) {
  if (max_length <= 0 || !pad_to_max_length || e.input_ids.size() >= static_cast<std::size_t>(max_length)) return;
  const auto total = static_cast<std::size_t>(max_length);
  e.input_ids.resize(total, pad_id);
  e.attention_mask.resize(total, 0);
  e.token_type_ids.resize(total, 0);
}

}  // namespace ft::hf
