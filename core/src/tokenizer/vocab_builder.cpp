// Frequency-based WordPiece vocabulary builder; see ft/tokenizer/vocab_builder.h.
#include "ft/tokenizer/vocab_builder.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ft/base/error.h"
#include "ft/tokenizer/tokenizer.h"
#include "tokenizer_text.h"

namespace ft {

std::vector<std::string> build_wordpiece_vocab(const std::vector<std::string>& texts,
                                               const VocabBuildOptions& options) {
  if (options.vocab_size <= 5) {
    fail("vocab_size must be > 5 (the 5 special tokens come first); got {}", options.vocab_size);
  }
  if (options.min_frequency < 1) fail("min_frequency must be >= 1; got {}", options.min_frequency);
  if (options.max_piece_chars < 2) {
    fail("max_piece_chars must be >= 2; got {}", options.max_piece_chars);
  }

  std::unordered_map<std::string, int64_t> word_counts;
  for (std::size_t row = 0; row < texts.size(); ++row) {
    std::vector<std::string> words;
    try {
      words = basic_tokenize(texts[row], options.lowercase);
    } catch (const Error& e) {
      fail("text {}: {}", row, e.what());
    }
    for (auto& w : words) ++word_counts[std::move(w)];
  }

  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  std::unordered_set<std::string> taken(vocab.begin(), vocab.end());

  // Every character, whatever its count: the guarantee that nothing seen is [UNK].
  std::set<char32_t> chars;
  std::unordered_map<std::string, int64_t> candidates;
  std::vector<std::size_t> bounds;
  for (const auto& [word, count] : word_counts) {
    bounds.clear();
    for (std::size_t i = 0; i < word.size();) {
      bounds.push_back(i);
      chars.insert(text::next_code_point(word, i));
    }
    const std::size_t n = bounds.size();
    bounds.push_back(word.size());
    if (n < 2) continue;  // single characters are covered above
    const std::size_t longest = static_cast<std::size_t>(options.max_piece_chars);
    // Prefixes of 2..longest characters, and the whole word however long.
    for (std::size_t k = 2; k <= n; ++k) {
      if (k > longest && k != n) continue;
      candidates[word.substr(0, bounds[k])] += count;
    }
    // "##" suffixes of 2..longest characters.
    for (std::size_t s = 1; s + 2 <= n; ++s) {
      if (n - s > longest) continue;
      candidates["##" + word.substr(bounds[s])] += count;
    }
  }
  for (const char32_t c : chars) {
    std::string ch;
    text::append_utf8(ch, c);
    for (std::string token : {ch, "##" + ch}) {
      if (taken.insert(token).second) vocab.push_back(std::move(token));
    }
  }

  std::vector<std::pair<int64_t, std::string_view>> ranked;
  ranked.reserve(candidates.size());
  for (const auto& [piece, count] : candidates) {
    if (count >= options.min_frequency && taken.count(piece) == 0) ranked.emplace_back(count, piece);
  }
  const auto room = static_cast<std::size_t>(
      std::max<int64_t>(0, options.vocab_size - static_cast<int64_t>(vocab.size())));
  const std::size_t keep = std::min(room, ranked.size());
  auto order = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(keep),
                    ranked.end(), order);
  for (std::size_t i = 0; i < keep; ++i) vocab.emplace_back(ranked[i].second);
  return vocab;
}

}  // namespace ft
