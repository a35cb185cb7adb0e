// Builds a WordPiece vocabulary from raw texts (`ft vocab build`, used when a
// dataset comes without a vocab.txt).
//
// Deliberately simple and fully deterministic — the same texts and options give
// the same vocab.txt byte for byte on every machine:
//   1. ids 0-4: [PAD] [UNK] [CLS] [SEP] [MASK];
//   2. every character seen, and its "##" form, in code-point order, so any
//      text made of seen characters tokenizes without [UNK] (this can exceed
//      vocab_size; characters are never dropped);
//   3. then, until vocab_size, the most frequent candidates: word prefixes
//      (whole words included) and "##" suffixes of at least two characters,
//      each counted once per word occurrence, ties broken by byte order;
//      candidates seen fewer than min_frequency times are left out.
// Words come from basic_tokenize (same cleaning, CJK split, lower-casing and
// punctuation split the tokenizer uses).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft {

struct VocabBuildOptions {
  /// Target size; the result is min(vocab_size, what the texts offer), or more
  /// when the characters alone exceed it. Must be > 5.
  int64_t vocab_size = 8000;
  /// Candidates (step 3) need at least this many occurrences. Must be >= 1.
  int64_t min_frequency = 2;
  /// Lower-case and strip accents while splitting (an uncased vocab).
  bool lowercase = true;
  /// Longest prefix/suffix candidate, in code points (whole words are always
  /// candidates); bounds memory on long words.
  int max_piece_chars = 16;
};

/// The vocabulary, index = id (write it with WordPieceTokenizer::save or one
/// token per line). Throws ft::Error "text N: invalid UTF-8 at byte M" for a
/// malformed text (N counted from 0) and on invalid options, naming the option.
std::vector<std::string> build_wordpiece_vocab(const std::vector<std::string>& texts,
                                               const VocabBuildOptions& options = {});

}  // namespace ft
