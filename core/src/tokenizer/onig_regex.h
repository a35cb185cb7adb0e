// Internal: a regular expression compiled by Oniguruma, the engine the Rust
// `tokenizers` library runs every Replace and Split pattern on, set up as its
// `onig` crate does (Regex::new: UTF-8, ONIG_OPTION_NONE, the default Ruby
// syntax), so a pattern a tokenizer.json carries means here what it means there.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::hf {

class OnigRegex {
 public:
  // Throws ft::Error with Oniguruma's own message when `pattern` does not compile.
  explicit OnigRegex(const std::string& pattern);
  ~OnigRegex();
  OnigRegex(const OnigRegex&) = delete;
  OnigRegex& operator=(const OnigRegex&) = delete;

  // Every match in `text` (valid UTF-8) as [begin, end) byte offsets, in the
  // order of the crate's find_iter: leftmost-first, non-overlapping; after an
  // empty match the search moves on one character, and an empty match right
  // after a match is skipped. Safe to call from several threads at once.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  void* regex_ = nullptr;  // regex_t*, kept out of this header
};

}  // namespace ft::hf
