// Internal: the parts of a `tokenizers` pipeline that load_tokenizer_json
// assembles for BPE and Unigram files (WordPiece files keep their own
// reader, tokenizer_json.cpp). Each part reads its JSON object and refuses
// what it does not implement, naming the key, so a file is either tokenized
// as the Rust library does or not at all.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/tokenizer/tokenizer.h"

namespace ft::hf {

using json = nlohmann::json;

// Names the file in every error: "<path>: <key>: <what>".
class Where {
 public:
  explicit Where(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void refuse(const std::string& key, const std::string& what) const;
  // "'<value>' is not supported; ft reads <supported>" for a component's type.
  [[noreturn]] void unsupported(const std::string& key, const std::string& value,
                                const std::string& supported) const;
  // The string at obj[name]; `fallback` when absent (std::nullopt: required).
  std::string str(const json& obj, const std::string& name, const std::string& key,
                  std::optional<std::string> fallback = std::nullopt) const;
  bool flag(const json& obj, const std::string& name, const std::string& key, bool fallback) const;
  // obj["type"], required.
  std::string type(const json& obj, const std::string& key) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Rust's char::is_whitespace (the White_Space property).
bool is_whitespace(char32_t cp);
// Rust's char::is_alphanumeric (Alphabetic or Numeric), as utf8proc's categories give it.
bool is_alphanumeric(char32_t cp);
// tokenizers' is_punc: ASCII punctuation or a P* category.
bool is_punctuation(char32_t cp);
// Rust's char::is_numeric: categories Nd, Nl, No.
bool is_numeric(char32_t cp);
// The L* categories (\p{L} in a pattern).
bool is_letter(char32_t cp);
// Code point boundaries of valid UTF-8: the byte offset of every code point, then s.size().
std::vector<std::size_t> char_starts(std::string_view s);

class OnigRegex;
// The regular expression of a Replace or Split, compiled as tokenizers
// compiles it (onig_regex.h); one that does not compile refuses `key` with
// Oniguruma's reason.
std::shared_ptr<const OnigRegex> read_regex(const std::string& pattern, const std::string& key, const Where& w);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Clears `start_kept` when the text's first character was deleted (Strip,
  // StripAccents, an empty Replace): the piece no longer starts where the
  // input does, which Metaspace's prepend_scheme "first" looks at.
  virtual void apply(std::string& text, bool& start_kept) const = 0;
};

// null (or an absent key) gives nullptr: the text is left as it is.
std::unique_ptr<Normalizer> read_normalizer(const json& j, const std::string& key, const Where& w);
// The Precompiled normalizer at `key` (hf_precompiled.cpp).
std::unique_ptr<Normalizer> read_precompiled(const json& j, const std::string& key, const Where& w);

// A stretch of text on its way to the model.
struct Piece {
  std::string text;
  // Starts where the input starts: Metaspace's prepend_scheme "first" adds its
  // marker only there.
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> read_pre_tokenizer(const json& j, const std::string& key, const Where& w);

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void encode(std::string_view word, std::vector<int64_t>& out) const = 0;
  // The model's vocabulary, index = id.
  virtual const std::vector<std::string>& vocab() const = 0;
  // -1: none.
  virtual int64_t unk_id() const = 0;
};

// The "model" object of a BPE or Unigram file; `model_type` is already checked.
std::unique_ptr<Model> read_bpe(const json& j, const Where& w);
std::unique_ptr<Model> read_unigram(const json& j, const Where& w);

// How a post-processor lays out one sequence or a pair: special tokens by id
// and the sequences (0 = A, 1 = B), each with its token type id.
struct TemplateItem {
  int sequence = -1;  // -1: the special tokens in `ids`
  std::vector<int64_t> ids;
  int64_t type_id = 0;
};
struct Template {
  std::vector<TemplateItem> single;
  std::vector<TemplateItem> pair;
  std::size_t added(bool is_pair) const;
};

// Tokenizer::encode_words for any pipeline: `ids_of` appends one word's ids;
// the words are laid out by `single` (the template of one sequence),
// truncated and padded as encode() does, with the word of each token.
// ft::Error "word K: ..." when ids_of throws one for word K.
WordsEncoding encode_words_with(const std::vector<std::string>& words,
                                const std::function<void(std::string_view, std::vector<int64_t>&)>& ids_of,
                                const std::vector<TemplateItem>& single, int64_t pad_id, int max_length,
                                bool pad_to_max_length);

// Pads `e` to max_length with pad_id (mask 0, type 0) when max_length > 0,
// pad_to_max_length is set and e is shorter; encode()'s last step.
void pad_encoding(Encoding& e, int max_length, bool pad_to_max_length, int64_t pad_id);

// The post_processor object; null gives "A" and "A B:1" (no special tokens).
Template read_post_processor(const json& j, const std::string& key, const Where& w,
                             const std::unordered_map<std::string, int64_t>& vocab);

// A BPE, Unigram or WordPiece tokenizer from tokenizer.json `text`; errors
// name `source`. WordPiece is read from `file` (empty: refused, a converted
// directory never yields one).
std::shared_ptr<const Tokenizer> make_json_tokenizer(const std::string& text, const std::string& source,
                                                     TokenizerConfigKeys keys, const std::string& file);

}  // namespace ft::hf
