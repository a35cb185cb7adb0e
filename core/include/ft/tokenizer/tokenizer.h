// ft::Tokenizer, what training needs of any tokenizer (load_tokenizer_json
// reads BPE and Unigram files, hf_*.cpp), and the BERT WordPiece tokenizer
// behind it, behaving like Hugging Face's BertTokenizer:
//
// Same ids as `BertTokenizer(vocab.txt)(text, pair, max_length=L, truncation=True,
// padding="max_length")`, so a model trained by ft and one trained by the HF stack
// see identical inputs; a pair too long is cut by the fast tokenizer's rule
// (AutoTokenizer) or the Python one's (PairTruncation). The pipeline, in HF's order:
//   1. split the raw text on the special tokens [PAD] [UNK] [CLS] [SEP] [MASK]
//      (exact, case-sensitive, anywhere in the text) — those are never split;
//   2. BasicTokenizer on each remaining piece: drop U+0000, U+FFFD and category C*
//      (except \t \n \r), turn whitespace (Zs, \t \n \r) into spaces, put spaces
//      around CJK ideographs, NFC, split on whitespace; per word, when uncased:
//      lower-case (Python's str.lower, final sigma included), NFD, drop Mn marks;
//      then split off every punctuation char (ASCII 33-47, 58-64, 91-96, 123-126
//      and Unicode P*);
//   3. WordPiece: greedy longest match first, "##" marks a continuation; a word
//      with more than max_chars_per_word code points, or with any part that has no
//      match, becomes one [UNK].
//
// Instances are immutable after construction, cheap to copy (the vocabulary is
// shared) and safe to use from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft {

/// Model inputs for one example; all three vectors have the same length.
struct Encoding {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> attention_mask;  ///< 1 for real tokens, 0 for padding
  std::vector<int64_t> token_type_ids;  ///< 0 for "[CLS] a [SEP]", 1 for "b [SEP]", 0 for padding
};

/// An Encoding of words given already split, and the word each token came from.
struct WordsEncoding {
  Encoding encoding;
  std::vector<int64_t> word_ids;  ///< per token, the index of its word; -1 for special tokens and padding
};

/// Whether the basic tokenizer lower-cases and strips accents.
enum class Lowercase {
  Auto,  ///< yes unless a token (other than bracketed specials) has an ASCII uppercase letter
  Yes,
  No,
};

struct TokenizerOptions {
  Lowercase lowercase = Lowercase::Auto;
  /// Longer words (in code points, after normalisation) become [UNK]; HF's
  /// max_input_chars_per_word. Must be > 0.
  int max_chars_per_word = 100;
  /// Put spaces around CJK ideographs so each is its own word (HF's
  /// tokenize_chinese_chars).
  bool split_cjk = true;
};

/// Runs HF's BasicTokenizer alone (no special-token handling, no WordPiece):
/// the words WordPiece would see. Throws ft::Error "invalid UTF-8 at byte N"
/// (N counted from 0) on malformed input. The vocab builder pre-splits with it.
std::vector<std::string> basic_tokenize(std::string_view text, bool lowercase,
                                        bool split_cjk = true);

/// How "longest_first" shares a pair's token budget B (max_length minus the
/// 3 special tokens) when a and b do not both fit. They differ only when both
/// sides exceed half of an odd budget:
///  - kFast (the `tokenizers` library: AutoTokenizer, transformers v5): the
///    shorter side keeps everything if the longer can take the rest;
///    otherwise the shorter gets floor(B/2) and the longer the rest. Equal
///    lengths count a as the shorter: b gets the spare token.
///  - kSlow (transformers' Python BertTokenizer): one token at a time off the
///    longer side, off b on ties: a gets the spare token.
enum class PairTruncation { kFast, kSlow };

/// The lengths a and b keep when "[specials] a [specials] b" must fit `budget`
/// tokens (the max_length minus the special tokens): a single text (has_pair
/// false) is cut at the end; a pair shares the budget by `rule`.
std::pair<std::size_t, std::size_t> truncated_lengths(std::size_t na, std::size_t nb, bool has_pair,
                                                      std::size_t budget, PairTruncation rule);

/// The keys of a model directory's tokenizer_config.json that say how
/// transformers builds its tokenizer, kept so that a checkpoint's
/// tokenizer_config.json says the same (absent: the directory did not say).
struct TokenizerConfigKeys {
  std::string tokenizer_class;  ///< empty: PreTrainedTokenizerFast (tokenizer.json as it is)
  std::optional<bool> add_prefix_space;
  std::optional<bool> trim_offsets;
  std::optional<bool> do_lower_case;
  std::optional<bool> split_by_punct;
};

/// What the training pipeline needs of any tokenizer: ids for a text or a pair,
/// the vocabulary and the special ids. WordPieceTokenizer (vocab.txt or a BERT
/// tokenizer.json) and the general tokenizer.json pipeline (load_tokenizer_json)
/// implement it; both are immutable and thread-safe once built.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// The model inputs with the special tokens added; max_length > 0 truncates
  /// (pairs: `rule`) and, with pad_to_max_length, pads with pad_id() (mask 0,
  /// type 0). Throws ft::Error when max_length cannot hold the special tokens.
  virtual Encoding encode(std::string_view text, std::optional<std::string_view> pair, int max_length,
                          bool pad_to_max_length, PairTruncation rule = PairTruncation::kFast) const = 0;
  /// The model inputs for a text given as words (transformers'
  /// `is_split_into_words=True`, as run_ner.py tokenizes): every word goes
  /// through the whole pipeline on its own (added tokens, normalizer,
  /// pre-tokenizer, model), so each word is the start of a text: a byte-level
  /// BPE with add_prefix_space gives every word its leading space, a
  /// Metaspace pre-tokenizer every word its "▁" (for RoBERTa, transformers
  /// requires add_prefix_space=True here), an empty word gives no token.
  /// Special tokens, truncation (to max_length, cutting whole tokens off the
  /// end, so a word may keep only its first pieces) and padding as encode().
  /// ft::Error "word K: invalid UTF-8 at byte N" (K from 0) on a malformed word.
  virtual WordsEncoding encode_words(const std::vector<std::string>& words, int max_length,
                                     bool pad_to_max_length) const = 0;
  /// The id of `token` in the vocabulary (added tokens included), if any.
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;
  /// Every token, index = id (the model's embedding rows).
  virtual const std::vector<std::string>& tokens() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t pad_id() const = 0;
  /// The token that starts a sequence ([CLS], <s>).
  virtual int64_t cls_id() const = 0;
  /// The token that ends one ([SEP], </s>).
  virtual int64_t sep_id() const = 0;
  /// -1 when the model never produces an unknown token (byte-level BPE).
  virtual int64_t unk_id() const = 0;
  virtual std::optional<int64_t> mask_id() const = 0;
  /// The tokenizer.json text it was read from, for a checkpoint to carry;
  /// empty for WordPiece, which saves vocab.txt.
  virtual std::string tokenizer_json() const { return {}; }
  /// What its directory's tokenizer_config.json said (load_model_dir_tokenizer).
  virtual const TokenizerConfigKeys& config_keys() const;
};

/// A `tokenizers` tokenizer.json of any model ft reads: WordPiece files give a
/// WordPieceTokenizer (from_tokenizer_json), BPE and Unigram files the general
/// pipeline (docs/models.md, "Tokenizers"). A key or value ft does not
/// implement throws ft::Error naming the file, the key and the value.
std::shared_ptr<const Tokenizer> load_tokenizer_json(const std::string& path);

/// The tokenizer transformers 5 builds for a model directory without a
/// tokenizer.json or vocab.txt: a SentencePiece model (spm.model for
/// DeBERTa-v2/v3, sentencepiece.bpe.model for XLM-R and CamemBERT) or
/// RoBERTa's vocab.json + merges.txt, converted as the family's tokenizer
/// class does (the family from tokenizer_config.json's tokenizer_class, else
/// config.json's model_type; docs/models.md, "Tokenizers"). Null when the
/// directory has none of those files; ft::Error naming the file and key when
/// one is there but cannot be converted.
std::shared_ptr<const Tokenizer> convert_model_dir_tokenizer(const std::string& dir);

/// The tokenizer_config.json keys of `dir` that TokenizerConfigKeys keeps
/// (none when the file is absent); ft::Error naming the file when it is not JSON.
TokenizerConfigKeys read_tokenizer_config_keys(const std::string& dir);

class WordPieceTokenizer final : public Tokenizer {
 public:
  /// Reads `vocab_path` (one token per line, id = line index, "\n", "\r\n" or
  /// "\r" line ends). Throws ft::Error naming the file when it cannot be read,
  /// is empty, has a line that is not UTF-8, or lacks [PAD], [UNK], [CLS] or [SEP].
  static WordPieceTokenizer from_file(const std::string& vocab_path,
                                      const TokenizerOptions& options = {});
  /// from_file on the file's bytes already in memory; errors name `source`.
  static WordPieceTokenizer from_vocab_text(std::string_view vocab_text,
                                            const TokenizerOptions& options = {},
                                            const std::string& source = "<vocab>");
  /// Reads a `tokenizers` tokenizer.json of the BERT family: a WordPiece
  /// model with its vocabulary, BertNormalizer (lowercase, accents,
  /// handle_chinese_chars), BertPreTokenizer, the [CLS]/[SEP] template
  /// (TemplateProcessing or BertProcessing) and the BERT special tokens as
  /// added tokens. Gives AutoTokenizer's ids. A setting ft's pipeline cannot
  /// honour (another model type, normalizer, pre-tokenizer, template or added
  /// token) throws ft::Error naming the file and the key.
  static WordPieceTokenizer from_tokenizer_json(const std::string& path);
  /// Same checks as from_file, for an in-memory vocabulary (errors say "<tokens>").
  static WordPieceTokenizer from_tokens(std::vector<std::string> tokens,
                                        const TokenizerOptions& options = {});

  /// The pieces of `text`, special tokens in the text included, [CLS]/[SEP] not
  /// added (HF's tokenizer.tokenize). Throws ft::Error "invalid UTF-8 at byte N";
  /// callers add the file/row.
  std::vector<std::string> tokenize(std::string_view text) const;
  /// Ids of tokenize(text) without building the strings (the training-loop path).
  std::vector<int64_t> tokenize_to_ids(std::string_view text) const;
  /// Unknown tokens map to unk_id(), like HF.
  std::vector<int64_t> convert_tokens_to_ids(const std::vector<std::string>& tokens) const;
  /// The id of `token`, if the vocabulary has it (the last line wins on duplicates).
  std::optional<int64_t> token_to_id(std::string_view token) const override;

  /// "[CLS] a [SEP]" or "[CLS] a [SEP] b [SEP]". When max_length > 0 the result
  /// is truncated to max_length tokens (single: a is cut at the end; pair: HF's
  /// "longest_first" under `rule`, see PairTruncation) and, if
  /// pad_to_max_length, padded with [PAD] (mask 0, type 0) to exactly
  /// max_length. max_length <= 0: no truncation, no padding.
  /// Throws ft::Error if 0 < max_length < the number of special tokens (2 or 3).
  Encoding encode(std::string_view text, std::optional<std::string_view> pair,
                  int max_length, bool pad_to_max_length,
                  PairTruncation rule = PairTruncation::kFast) const override;
  /// Each word through tokenize_to_ids, laid out as "[CLS] words [SEP]".
  WordsEncoding encode_words(const std::vector<std::string>& words, int max_length,
                             bool pad_to_max_length) const override;

  int64_t pad_id() const override;
  int64_t cls_id() const override;
  int64_t sep_id() const override;
  int64_t unk_id() const override;
  /// [MASK]'s id, if the vocabulary has one (it is not required).
  std::optional<int64_t> mask_id() const override;
  /// Number of lines of the vocabulary (the model's embedding rows).
  int64_t vocab_size() const override;
  /// The vocabulary, index = id.
  const std::vector<std::string>& tokens() const override;
  /// The resolved Lowercase option.
  bool lowercase() const { return lowercase_; }
  const TokenizerOptions& options() const { return options_; }

  /// Writes the vocabulary as vocab.txt (one token per line, trailing "\n")
  /// atomically (temp file + rename). Throws ft::Error naming the path.
  void save(const std::string& vocab_path) const;

  /// The lookup tables; defined in tokenizer.cpp.
  struct Vocab;

 private:
  WordPieceTokenizer(std::shared_ptr<const Vocab> vocab, const TokenizerOptions& options,
                     bool lowercase);
  static WordPieceTokenizer build(std::vector<std::string> tokens,
                                  const TokenizerOptions& options, const std::string& source);

  std::shared_ptr<const Vocab> vocab_;
  TokenizerOptions options_;
  bool lowercase_ = true;
};

}  // namespace ft
