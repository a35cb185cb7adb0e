// WordPiece tokenizer; see ft/tokenizer/tokenizer.h for the contract.
#include "ft/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <utility>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "hf_pipeline.h"
#include "tokenizer_text.h"

namespace ft {

// The tokens and two hash maps whose string_view keys point into `tokens`; the
// struct is never copied or moved after build() fills it (it lives behind a
// shared_ptr), so the views stay valid.
struct WordPieceTokenizer::Vocab {
  Vocab() = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  std::vector<std::string> tokens;
  /// Every token, by its full text: the lookup for a word's first piece.
  std::unordered_map<std::string_view, int64_t> whole;
  /// "##x" tokens by "x": the lookup for continuation pieces, without building "##x".
  std::unordered_map<std::string_view, int64_t> cont;
  std::size_t max_whole_bytes = 0;
  std::size_t max_cont_bytes = 0;
  int64_t pad = -1, unk = -1, cls = -1, sep = -1, mask = -1;
};

namespace {

// HF's all_special_tokens for BERT: split out of the raw text before anything else
// and never broken up. None is a prefix of another, so the first match is the only one.
constexpr std::array<std::string_view, 5> kSpecials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                       "[MASK]"};

bool is_special(std::string_view s) {
  return std::find(kSpecials.begin(), kSpecials.end(), s) != kSpecials.end();
}

// Receives the pipeline's output; the two sinks below build ids or strings.
struct IdSink {
  const WordPieceTokenizer::Vocab& vocab;
  std::vector<int64_t>& out;
  void special(std::string_view token) {
    const auto it = vocab.whole.find(token);
    out.push_back(it == vocab.whole.end() ? vocab.unk : it->second);
  }
  void piece(int64_t id) { out.push_back(id); }
};

struct StringSink {
  const WordPieceTokenizer::Vocab& vocab;
  std::vector<std::string>& out;
  void special(std::string_view token) { out.emplace_back(token); }
  void piece(int64_t id) { out.push_back(vocab.tokens[static_cast<std::size_t>(id)]); }
};

// Reused buffers, so a long text costs a handful of allocations, not one per word.
struct Scratch {
  std::string raw;
  std::string normalized;
  std::vector<std::size_t> bounds;
  std::vector<int64_t> pieces;
};

// Greedy longest-match-first WordPiece of one normalised word.
template <typename Sink>
void wordpiece(const WordPieceTokenizer::Vocab& v, int max_chars, std::string_view word,
               Scratch& s, Sink& sink) {
  s.bounds.clear();
  for (std::size_t i = 0; i < word.size(); ++i) {
    if ((static_cast<unsigned char>(word[i]) & 0xC0u) != 0x80u) s.bounds.push_back(i);
  }
  const std::size_t n = s.bounds.size();
  s.bounds.push_back(word.size());
  if (n > static_cast<std::size_t>(max_chars)) {
    sink.piece(v.unk);
    return;
  }
  s.pieces.clear();
  std::size_t start = 0;
  while (start < n) {
    const bool first = start == 0;
    const auto& map = first ? v.whole : v.cont;
    const std::size_t max_bytes = first ? v.max_whole_bytes : v.max_cont_bytes;
    const std::size_t from = s.bounds[start];
    std::size_t end = n;
    // Substrings longer than every key cannot match; skipping them keeps long
    // words linear without changing the result.
    while (end > start && s.bounds[end] - from > max_bytes) --end;
    int64_t found = -1;
    for (; end > start; --end) {
      const auto it = map.find(word.substr(from, s.bounds[end] - from));
      if (it != map.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      sink.piece(v.unk);
      return;
    }
    s.pieces.push_back(found);
    start = end;
  }
  for (const int64_t id : s.pieces) sink.piece(id);
}

// BasicTokenizer + WordPiece over text that holds no special token.
template <typename Sink>
void tokenize_plain(const WordPieceTokenizer::Vocab& v, const TokenizerOptions& o, bool lower,
                    std::string_view text, Scratch& s, Sink& sink) {
  text::for_each_raw_word(text, o.split_cjk, s.raw, [&](std::string_view raw, bool ascii) {
    // A special can still surface here when dropped characters were inside it.
    if (is_special(raw)) {
      sink.special(raw);
      return;
    }
    text::normalize_word(raw, ascii, lower, s.normalized);
    text::split_on_punctuation(s.normalized, [&](std::string_view word) {
      wordpiece(v, o.max_chars_per_word, word, s, sink);
    });
  });
}

// The whole pipeline: validate, split out specials, tokenize the rest.
template <typename Sink>
void run(const WordPieceTokenizer::Vocab& v, const TokenizerOptions& o, bool lower,
         std::string_view text, Sink& sink) {
  text::validate_utf8(text);
  Scratch s;
  std::size_t done = 0;
  std::size_t probe = 0;
  while ((probe = text.find('[', probe)) != std::string_view::npos) {
    std::string_view match;
    for (const auto special : kSpecials) {
      if (text.compare(probe, special.size(), special) == 0) {
        match = special;
        break;
      }
    }
    if (match.empty()) {
      ++probe;
      continue;
    }
    tokenize_plain(v, o, lower, text.substr(done, probe - done), s, sink);
    sink.special(match);
    probe += match.size();
    done = probe;
  }
  tokenize_plain(v, o, lower, text.substr(done), s, sink);
}

// Tokens in "[...]" form are specials, whatever their case.
bool has_ascii_upper_outside_specials(const std::vector<std::string>& tokens) {
  for (const auto& t : tokens) {
    if (t.size() > 2 && t.front() == '[' && t.back() == ']') continue;
    for (const char c : t) {
      if (c >= 'A' && c <= 'Z') return true;
    }
  }
  return false;
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(std::shared_ptr<const Vocab> vocab,
                                       const TokenizerOptions& options, bool lowercase)
    : vocab_(std::move(vocab)), options_(options), lowercase_(lowercase) {}

WordPieceTokenizer WordPieceTokenizer::build(std::vector<std::string> tokens,
                                             const TokenizerOptions& options,
                                             const std::string& source) {
  if (tokens.empty()) fail("{}: vocab is empty; expected one token per line", source);
  if (options.max_chars_per_word <= 0) {
    fail("{}: max_chars_per_word must be > 0 (got {})", source, options.max_chars_per_word);
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    try {
      text::validate_utf8(tokens[i]);
    } catch (const Error& e) {
      fail("{}: line {}: {}", source, i + 1, e.what());
    }
    if (tokens[i].find_first_of("\r\n") != std::string::npos) {
      fail("{}: token {} contains a line break; vocab.txt holds one token per line", source, i);
    }
  }
  auto v = std::make_shared<Vocab>();
  v->tokens = std::move(tokens);
  v->whole.reserve(v->tokens.size());
  for (std::size_t i = 0; i < v->tokens.size(); ++i) {
    const std::string_view t = v->tokens[i];
    const auto id = static_cast<int64_t>(i);
    // Later duplicates win, as in HF's load_vocab (a dict filled line by line).
    v->whole.insert_or_assign(t, id);
    v->max_whole_bytes = std::max(v->max_whole_bytes, t.size());
    if (t.size() > 2 && t.substr(0, 2) == "##") {
      v->cont.insert_or_assign(t.substr(2), id);
      v->max_cont_bytes = std::max(v->max_cont_bytes, t.size() - 2);
    }
  }
  auto require = [&](std::string_view name) {
    const auto it = v->whole.find(name);
    if (it == v->whole.end()) {
      fail("{}: vocab has no '{}' token; a BERT vocab.txt needs [PAD], [UNK], [CLS] and [SEP]",
           source, name);
    }
    return it->second;
  };
  v->pad = require("[PAD]");
  v->unk = require("[UNK]");
  v->cls = require("[CLS]");
  v->sep = require("[SEP]");
  if (const auto it = v->whole.find("[MASK]"); it != v->whole.end()) v->mask = it->second;

  bool lower = true;
  switch (options.lowercase) {
    case Lowercase::Yes: lower = true; break;
    case Lowercase::No: lower = false; break;
    case Lowercase::Auto: lower = !has_ascii_upper_outside_specials(v->tokens); break;
  }
  return WordPieceTokenizer(std::move(v), options, lower);
}

WordPieceTokenizer WordPieceTokenizer::from_tokens(std::vector<std::string> tokens,
                                                   const TokenizerOptions& options) {
  return build(std::move(tokens), options, "<tokens>");
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& vocab_path,
                                                 const TokenizerOptions& options) {
  return from_vocab_text(fs::read_file(vocab_path), options, vocab_path);
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_text(std::string_view bytes,
                                                       const TokenizerOptions& options,
                                                       const std::string& source) {
  // Python's universal newlines: "\n", "\r\n" and "\r" all end a line; a final
  // line end does not start another token.
  std::vector<std::string> tokens;
  std::size_t start = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\n' && bytes[i] != '\r') continue;
    tokens.emplace_back(bytes.substr(start, i - start));
    if (bytes[i] == '\r' && i + 1 < bytes.size() && bytes[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < bytes.size()) tokens.emplace_back(bytes.substr(start));
  return build(std::move(tokens), options, source);
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  StringSink sink{*vocab_, out};
  run(*vocab_, options_, lowercase_, text, sink);
  return out;
}

std::vector<int64_t> WordPieceTokenizer::tokenize_to_ids(std::string_view text) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 4 + 4);
  IdSink sink{*vocab_, out};
  run(*vocab_, options_, lowercase_, text, sink);
  return out;
}

std::vector<int64_t> WordPieceTokenizer::convert_tokens_to_ids(
    const std::vector<std::string>& tokens) const {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) ids.push_back(token_to_id(t).value_or(vocab_->unk));
  return ids;
}

std::optional<int64_t> WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = vocab_->whole.find(token);
  if (it == vocab_->whole.end()) return std::nullopt;
  return it->second;
}

Encoding WordPieceTokenizer::encode(std::string_view text, std::optional<std::string_view> pair,
                                    int max_length, bool pad_to_max_length, PairTruncation rule) const {
  std::vector<int64_t> a = tokenize_to_ids(text);
  std::vector<int64_t> b;
  if (pair) b = tokenize_to_ids(*pair);
  const std::size_t specials = pair ? 3 : 2;
  if (max_length > 0) {
    if (static_cast<std::size_t>(max_length) < specials) {
      fail("max_length {} leaves no room for the {} special tokens ([CLS], [SEP]); use >= {}",
           max_length, specials, specials);
    }
    const std::size_t budget = static_cast<std::size_t>(max_length) - specials;
    const auto [na, nb] = truncated_lengths(a.size(), b.size(), pair.has_value(), budget, rule);
    a.resize(na);
    b.resize(nb);
  }
  const std::size_t used = a.size() + b.size() + specials;
  const std::size_t total =
      (max_length > 0 && pad_to_max_length) ? static_cast<std::size_t>(max_length) : used;
  Encoding e;
  e.input_ids.reserve(total);
  e.input_ids.push_back(vocab_->cls);
  e.input_ids.insert(e.input_ids.end(), a.begin(), a.end());
  e.input_ids.push_back(vocab_->sep);
  e.token_type_ids.assign(e.input_ids.size(), 0);
  if (pair) {
    e.input_ids.insert(e.input_ids.end(), b.begin(), b.end());
    e.input_ids.push_back(vocab_->sep);
    e.token_type_ids.resize(e.input_ids.size(), 1);
  }
  e.attention_mask.assign(e.input_ids.size(), 1);
  e.input_ids.resize(total, vocab_->pad);
  e.attention_mask.resize(total, 0);
  e.token_type_ids.resize(total, 0);
  return e;
}

WordsEncoding WordPieceTokenizer::encode_words(const std::vector<std::string>& words, int max_length,
                                               bool pad_to_max_length) const {
  const auto word_ids = [this](std::string_view word, std::vector<int64_t>& out) {
    IdSink sink{*vocab_, out};
    run(*vocab_, options_, lowercase_, word, sink);
  };
  const std::vector<hf::TemplateItem> layout{{-1, {vocab_->cls}, 0}, {0, {}, 0}, {-1, {vocab_->sep}, 0}};
  return hf::encode_words_with(words, word_ids, layout, vocab_->pad, max_length, pad_to_max_length);
}

int64_t WordPieceTokenizer::pad_id() const { return vocab_->pad; }
int64_t WordPieceTokenizer::cls_id() const { return vocab_->cls; }
int64_t WordPieceTokenizer::sep_id() const { return vocab_->sep; }
int64_t WordPieceTokenizer::unk_id() const { return vocab_->unk; }
std::optional<int64_t> WordPieceTokenizer::mask_id() const {
  if (vocab_->mask < 0) return std::nullopt;
  return vocab_->mask;
}
int64_t WordPieceTokenizer::vocab_size() const {
  return static_cast<int64_t>(vocab_->tokens.size());
}
const std::vector<std::string>& WordPieceTokenizer::tokens() const { return vocab_->tokens; }

void WordPieceTokenizer::save(const std::string& vocab_path) const {
  std::string bytes;
  for (const auto& t : vocab_->tokens) {
    bytes += t;
    bytes += '\n';
  }
  fs::write_file_atomic(vocab_path, bytes);
}

std::pair<std::size_t, std::size_t> truncated_lengths(std::size_t na, std::size_t nb, bool has_pair,
                                                      std::size_t budget, PairTruncation rule) {
  if (na + nb <= budget) return {na, nb};
  if (!has_pair) return {budget, 0};
  if (rule == PairTruncation::kFast) {
    // tokenizers' LongestFirst: the shorter side (a on ties) keeps what
    // it has when the longer can take the rest, else each gets half and
    // the longer one the odd token.
    std::size_t& shorter = na <= nb ? na : nb;
    std::size_t& longer = na <= nb ? nb : na;
    if (shorter <= budget / 2) {
      longer = budget - shorter;
    } else {
      shorter = budget / 2;
      longer = budget / 2 + budget % 2;
    }
    return {na, nb};
  }
  // transformers' Python BertTokenizer: one token at a time off the longer side, b on ties.
  while (na + nb > budget) {
    if (na > nb) {
      --na;
    } else {
      --nb;
    }
  }
  return {na, nb};
}

std::vector<std::string> basic_tokenize(std::string_view text, bool lowercase, bool split_cjk) {
  text::validate_utf8(text);
  std::vector<std::string> out;
  std::string normalized;
  std::string raw;
  text::for_each_raw_word(text, split_cjk, raw, [&](std::string_view word, bool ascii) {
    text::normalize_word(word, ascii, lowercase, normalized);
    text::split_on_punctuation(normalized, [&](std::string_view w) { out.emplace_back(w); });
  });
  return out;
}

}  // namespace ft
