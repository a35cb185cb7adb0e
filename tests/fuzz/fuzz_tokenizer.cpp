// Fuzz target: the WordPiece tokenizer (ft/tokenizer/tokenizer.h) — vocabulary parsing
// and encoding of arbitrary bytes, invalid UTF-8 included.
//
// Input: byte 0 = options (see below), byte 1 = max_length + 8, then parts
// split on 0xFF (never in UTF-8): [vocab text,] text [, pair]. Without the
// "own vocab" bit a fixed vocabulary is used, so most inputs reach encode.
#include <optional>
#include <string>
#include <vector>

#include "ft/base/error.h"
#include "ft/tokenizer/tokenizer.h"
#include "fuzz_util.h"

namespace {

constexpr const char* kVocab =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\na\nun\n##aff\n##able\n##s\n##ing\nhello\nworld\n"
    ",\n.\n!\n'\n##'\ncafe\n##é\ncafé\nnaive\nstraße\nσ\nς\n##σ\n中\n国\n##国\nİ\ni\n##̇\n"
    "a\n##a\n##\n#\n[\n]\nx\n##x\n##xx\nxxx\n日本\n";

const ft::WordPieceTokenizer& fixed_tokenizer(ft::Lowercase lower, bool split_cjk, int max_chars) {
  // One per option combination, built on first use (constant tables).
  static std::vector<std::optional<ft::WordPieceTokenizer>> cache(3 * 2 * 4);
  const int chars_index = max_chars == 1 ? 0 : max_chars == 3 ? 1 : max_chars == 8 ? 2 : 3;
  auto& slot = cache[static_cast<size_t>(static_cast<int>(lower) * 8 + split_cjk * 4 + chars_index)];
  if (!slot) {
    ft::TokenizerOptions o;
    o.lowercase = lower;
    o.split_cjk = split_cjk;
    o.max_chars_per_word = max_chars;
    slot = ft::WordPieceTokenizer::from_vocab_text(kVocab, o, "fixed vocab");
  }
  return *slot;
}

void check_encoding(const ft::WordPieceTokenizer& tok, const ft::Encoding& e, int max_length,
                    bool pad, bool has_pair) {
  using ft_fuzz::check;
  const size_t n = e.input_ids.size();
  check(e.attention_mask.size() == n && e.token_type_ids.size() == n, "encoding vectors differ in length");
  check(n >= (has_pair ? 3u : 2u), "encoding lacks its special tokens");
  check(e.input_ids.front() == tok.cls_id(), "encoding does not start with [CLS]");
  if (max_length > 0) check(n <= static_cast<size_t>(max_length), "encoding longer than max_length");
  if (max_length > 0 && pad) check(n == static_cast<size_t>(max_length), "padded encoding is not max_length long");
  for (size_t i = 0; i < n; ++i) {
    check(e.input_ids[i] >= 0 && e.input_ids[i] < tok.vocab_size(), "id outside the vocabulary");
    check(e.attention_mask[i] == 0 || e.attention_mask[i] == 1, "mask is not 0/1");
    check(e.token_type_ids[i] == 0 || e.token_type_ids[i] == 1, "token type is not 0/1");
    if (e.attention_mask[i] == 0) check(e.input_ids[i] == tok.pad_id(), "masked position is not [PAD]");
    if (i > 0 && e.attention_mask[i] == 1) check(e.attention_mask[i - 1] == 1, "padding before a real token");
  }
}

void run_text(const ft::WordPieceTokenizer& tok, std::string_view text,
              std::optional<std::string_view> pair, int max_length, bool pad) {
  std::vector<std::string> pieces;
  std::vector<int64_t> ids;
  try {
    pieces = tok.tokenize(text);
    ids = tok.tokenize_to_ids(text);
  } catch (const ft::Error& e) {
    ft_fuzz::rejected(e);  // invalid UTF-8
    return;
  }
  ft_fuzz::check(tok.convert_tokens_to_ids(pieces) == ids, "tokenize and tokenize_to_ids disagree");
  try {
    for (const auto& w : ft::basic_tokenize(text, tok.lowercase(), tok.options().split_cjk))
      ft_fuzz::check(!w.empty(), "basic_tokenize returned an empty word");
  } catch (const ft::Error&) {
    ft_fuzz::bug("basic_tokenize rejects text that tokenize accepted");
  }
  try {
    check_encoding(tok, tok.encode(text, pair, max_length, pad), max_length, pad, pair.has_value());
  } catch (const ft::Error& e) {
    ft_fuzz::rejected(e);  // max_length below the special-token count, or an invalid pair text
  }
}

int one_input(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // byte 0: bits 0-1 lowercase (auto, yes, no), bit 2 split_cjk, bit 3 own
  // vocab, bits 4-5 max_chars_per_word (1, 3, 8, 100), bit 6 pad, bit 7 pair.
  const uint8_t flags = data[0];
  const auto lower = static_cast<ft::Lowercase>((flags & 3) % 3);
  const bool split_cjk = flags & 4;
  const bool own_vocab = flags & 8;
  constexpr int kMaxChars[] = {1, 3, 8, 100};
  const int max_chars = kMaxChars[(flags >> 4) & 3];
  const bool pad = flags & 64;
  const bool has_pair = flags & 128;
  const int max_length = static_cast<int>(data[1]) - 8;
  const auto parts = ft_fuzz::split_parts(ft_fuzz::as_view(data + 2, size - 2), own_vocab ? 3 : 2);

  size_t next = 0;
  std::optional<ft::WordPieceTokenizer> own;
  if (own_vocab) {
    ft::TokenizerOptions o;
    o.lowercase = lower;
    o.split_cjk = split_cjk;
    o.max_chars_per_word = max_chars;
    try {
      own = ft::WordPieceTokenizer::from_vocab_text(parts[next++], o, "fuzz vocab");
    } catch (const ft::Error& e) {
      ft_fuzz::rejected(e);
      return 0;
    }
    ft_fuzz::check(own->vocab_size() > 0 && own->pad_id() >= 0 && own->unk_id() >= 0 &&
                       own->cls_id() >= 0 && own->sep_id() >= 0,
                   "accepted vocab lacks a required special token");
  }
  const ft::WordPieceTokenizer& tok = own ? *own : fixed_tokenizer(lower, split_cjk, max_chars);
  const std::string_view text = next < parts.size() ? parts[next] : std::string_view();
  std::optional<std::string_view> pair;
  if (has_pair) pair = next + 1 < parts.size() ? parts[next + 1] : std::string_view();
  run_text(tok, text, pair, max_length, pad);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ft_fuzz::run_input(ft_fuzz::kSmallStack, [&] { one_input(data, size); });
  return 0;
}
