// load_tokenizer_json: WordPiece files go to WordPieceTokenizer; BPE and
// Unigram files are assembled from the parts in hf_pipeline.h and run in the
// Rust library's order: added tokens out of the raw text, normalizer, added
// tokens out of the normalized text, pre-tokenizer, model, truncation,
// post-processor, padding.
#include <algorithm>
#include <initializer_list>
#include <unordered_map>

#include <fmt/format.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/tokenizer/tokenizer.h"
#include "hf_pipeline.h"
#include "tokenizer_text.h"

namespace ft {
namespace {

using hf::json;

struct AddedToken {
  std::string content;  // normalized already when `normalized` is set
  int64_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false;
};

// A stretch of text, or an added token (id >= 0) found in it.
struct Part {
  std::string text;
  int64_t id = -1;
  bool at_origin = false;
};

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = hf::char_starts(s).end()[-2];
  return hf::is_alphanumeric(text::next_code_point(s, i));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = 0;
  return hf::is_alphanumeric(text::next_code_point(s, i));
}

// The added tokens in `s`, leftmost-longest and non-overlapping, with
// single_word, lstrip and rstrip applied as tokenizers' AddedVocabulary does.
void split_added(const std::string& s, bool at_origin, const std::vector<AddedToken>& tokens, std::vector<Part>& out) {
  std::size_t done = 0;  // end of the last token taken
  std::size_t search = 0;  // where the next match may start
  auto emit_text = [&](std::size_t from, std::size_t to) {
    if (to > from) out.push_back({s.substr(from, to - from), -1, at_origin && from == 0});
  };
  while (search < s.size() && !tokens.empty()) {
    const AddedToken* found = nullptr;
    std::size_t at = search;
    for (; at < s.size() && !found; ++at) {
      if ((static_cast<unsigned char>(s[at]) & 0xC0u) == 0x80u) continue;
      for (const auto& t : tokens) {
        if (!t.content.empty() && s.compare(at, t.content.size(), t.content) == 0 &&
            (!found || t.content.size() > found->content.size())) {
          found = &t;
        }
      }
    }
    if (!found) break;
    std::size_t start = at - 1;
    std::size_t stop = start + found->content.size();
    search = stop;
    if (found->single_word) {
      const bool start_space = start == 0 || !ends_with_word(std::string_view(s).substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(std::string_view(s).substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (found->lstrip) {
      const auto starts = hf::char_starts(std::string_view(s).substr(0, start));
      std::size_t k = starts.size() - 1;  // code points before the match
      while (k > 0) {
        std::size_t i = starts[k - 1];
        if (!hf::is_whitespace(text::next_code_point(s, i))) break;
        --k;
      }
      start = std::max(starts[k], done);
    }
    if (found->rstrip) {
      std::size_t i = stop;
      while (i < s.size()) {
        std::size_t next = i;
        if (!hf::is_whitespace(text::next_code_point(s, next))) break;
        i = next;
      }
      stop = i;
    }
    emit_text(done, start);
    out.push_back({s.substr(start, stop - start), found->id, at_origin && start == 0});
    done = stop;
  }
  emit_text(done, s.size());
}

class JsonTokenizer final : public Tokenizer {
 public:
  JsonTokenizer(const json& root, std::string source, TokenizerConfigKeys keys, const hf::Where& w)
      : source_(std::move(source)), keys_(std::move(keys)) {
    const json& model = root.at("model");
    const std::string type = w.str(model, "type", "model.type");
    model_ = type == "BPE" ? hf::read_bpe(model, w) : hf::read_unigram(model, w);
    normalizer_ = hf::read_normalizer(root.value("normalizer", json()), "normalizer", w);
    pre_tokenizer_ = hf::read_pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer", w);
    tokens_ = model_->vocab();
    read_added_tokens(root.value("added_tokens", json::array()), w);
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      if (!tokens_[i].empty()) ids_.insert_or_assign(tokens_[i], static_cast<int64_t>(i));  // "": an id no token has
    }
    for (const auto& [content, id] : added_ids_) ids_[content] = id;  // tokenizers looks added tokens up first
    template_ = hf::read_post_processor(root.value("post_processor", json()), "post_processor", w, ids_);
    resolve_specials(root, w);
  }

  Encoding encode(std::string_view text, std::optional<std::string_view> pair, int max_length, bool pad_to_max_length,
                  PairTruncation rule) const override {
    std::vector<int64_t> a = ids_of(text);
    std::vector<int64_t> b;
    if (pair) b = ids_of(*pair);
    const std::size_t specials = template_.added(pair.has_value());
    if (max_length > 0) {
      if (static_cast<std::size_t>(max_length) < specials) {
        fail("max_length {} leaves no room for the {} special tokens; use >= {}", max_length, specials, specials);
      }
      const auto [na, nb] = truncated_lengths(a.size(), b.size(), pair.has_value(),
                                              static_cast<std::size_t>(max_length) - specials, rule);
      a.resize(na);
      b.resize(nb);
    }
    Encoding e;
    for (const auto& item : pair ? template_.pair : template_.single) {
      const std::vector<int64_t>& ids = item.sequence < 0 ? item.ids : item.sequence == 0 ? a : b;
      e.input_ids.insert(e.input_ids.end(), ids.begin(), ids.end());
      e.token_type_ids.resize(e.input_ids.size(), item.type_id);
    }
    e.attention_mask.assign(e.input_ids.size(), 1);
    hf::pad_encoding(e, max_length, pad_to_max_length, pad_);
    return e;
  }

  WordsEncoding encode_words(const std::vector<std::string>& words, int max_length,
                             bool pad_to_max_length) const override {
    // ids_of takes each word as a text of its own: it starts at the origin,
    // which is what gives it Metaspace's marker and ByteLevel's prefix space.
    const auto word_ids = [this](std::string_view word, std::vector<int64_t>& out) {
      const std::vector<int64_t> ids = ids_of(word);
      out.insert(out.end(), ids.begin(), ids.end());
    };
    return hf::encode_words_with(words, word_ids, template_.single, pad_, max_length, pad_to_max_length);
  }

  std::optional<int64_t> token_to_id(std::string_view token) const override {
    const auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  const std::vector<std::string>& tokens() const override { return tokens_; }
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t pad_id() const override { return pad_; }
  int64_t cls_id() const override { return cls_; }
  int64_t sep_id() const override { return sep_; }
  int64_t unk_id() const override { return model_->unk_id(); }
  std::optional<int64_t> mask_id() const override { return mask_; }
  std::string tokenizer_json() const override { return source_; }
  const TokenizerConfigKeys& config_keys() const override { return keys_; }

 private:
  void read_added_tokens(const json& added, const hf::Where& w) {
    if (!added.is_array()) w.refuse("added_tokens", "not a list");
    for (std::size_t i = 0; i < added.size(); ++i) {
      const json& a = added[i];
      const std::string key = fmt::format("added_tokens[{}]", i);
      AddedToken t;
      t.content = w.str(a, "content", key + ".content");
      // The bound only keeps a corrupt id from sizing the vocabulary to gigabytes.
      constexpr int64_t kMaxId = int64_t{1} << 26;
      if (!a.contains("id") || !a.at("id").is_number_integer() || a.at("id").get<int64_t>() < 0 ||
          a.at("id").get<int64_t>() >= kMaxId) {
        w.refuse(key + ".id", fmt::format("missing or not an integer in 0..{}", kMaxId - 1));
      }
      t.id = a.at("id").get<int64_t>();
      t.single_word = w.flag(a, "single_word", key + ".single_word", false);
      t.lstrip = w.flag(a, "lstrip", key + ".lstrip", false);
      t.rstrip = w.flag(a, "rstrip", key + ".rstrip", false);
      t.normalized = w.flag(a, "normalized", key + ".normalized", false);
      const auto at = static_cast<std::size_t>(t.id);
      if (at >= tokens_.size()) tokens_.resize(at + 1);
      tokens_[at] = t.content;
      added_ids_.emplace_back(t.content, t.id);
      // A normalized token is looked for in normalized text, as its normalized form.
      bool unused = true;
      if (t.normalized && normalizer_) normalizer_->apply(t.content, unused);
      (t.normalized ? normalized_added_ : raw_added_).push_back(std::move(t));
    }
  }

  // The ids the pipeline needs and the post-processor names: [CLS]/<s> opens
  // the single template and [SEP]/</s> closes it; pad and mask by their usual
  // names, unless the file's padding section names the pad.
  void resolve_specials(const json& root, const hf::Where& w) {
    for (const auto& item : template_.single) {
      if (item.sequence >= 0 || item.ids.empty()) continue;
      if (cls_ < 0) cls_ = item.ids.front();
      sep_ = item.ids.back();
    }
    auto first_of = [&](std::initializer_list<const char*> names) -> std::optional<int64_t> {
      for (const char* n : names) {
        if (const auto id = token_to_id(n)) return id;
      }
      return std::nullopt;
    };
    const json padding = root.value("padding", json());
    if (padding.is_object() && padding.contains("pad_id") && padding.at("pad_id").is_number_integer()) {
      pad_ = padding.at("pad_id").get<int64_t>();
    } else if (const auto id = first_of({"<pad>", "[PAD]", "<|padding|>"})) {
      pad_ = *id;
    } else {
      w.refuse("added_tokens", "no padding token: ft pads with <pad>, [PAD] or <|padding|>, or the padding.pad_id "
                               "of the file; add one of them");
    }
    mask_ = first_of({"<mask>", "[MASK]"});
  }

  // The model's ids of one text, added tokens included, specials not added.
  std::vector<int64_t> ids_of(std::string_view text) const {
    text::validate_utf8(text);
    std::vector<Part> raw;
    split_added(std::string(text), true, raw_added_, raw);
    std::vector<int64_t> out;
    std::vector<Part> parts;
    std::vector<hf::Piece> pieces;
    for (auto& r : raw) {
      if (r.id >= 0) {
        out.push_back(r.id);
        continue;
      }
      bool start_kept = true;
      if (normalizer_) normalizer_->apply(r.text, start_kept);
      parts.clear();
      split_added(r.text, r.at_origin && start_kept, normalized_added_, parts);
      for (auto& p : parts) {
        if (p.id >= 0) {
          out.push_back(p.id);
          continue;
        }
        pieces.clear();
        pieces.push_back({std::move(p.text), p.at_origin});
        if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
        for (const auto& piece : pieces) model_->encode(piece.text, out);
      }
    }
    return out;
  }

  std::string source_;
  TokenizerConfigKeys keys_;
  std::unique_ptr<hf::Model> model_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> raw_added_, normalized_added_;
  std::vector<std::pair<std::string, int64_t>> added_ids_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  hf::Template template_;
  int64_t pad_ = -1, cls_ = -1, sep_ = -1;
  std::optional<int64_t> mask_;
};

}  // namespace

const TokenizerConfigKeys& Tokenizer::config_keys() const {
  static const TokenizerConfigKeys none;
  return none;
}

std::shared_ptr<const Tokenizer> load_tokenizer_json(const std::string& path) {
  return hf::make_json_tokenizer(fs::read_file(path), path, {}, path);
}

namespace hf {

std::shared_ptr<const Tokenizer> make_json_tokenizer(const std::string& text, const std::string& source,
                                                     TokenizerConfigKeys keys, const std::string& file) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", source, e.what());
  }
  const Where w(source);
  try {
    if (!root.is_object()) w.refuse("(top level)", "not a JSON object");
    if (!root.contains("model") || !root.at("model").is_object()) w.refuse("model", "missing or not an object");
    const std::string type = w.str(root.at("model"), "type", "model.type");
    if (type == "WordPiece") {
      if (file.empty()) w.refuse("model.type", "WordPiece is read from a tokenizer.json file");
      return std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_tokenizer_json(file));
    }
    if (type != "BPE" && type != "Unigram") w.unsupported("model.type", type, "WordPiece, BPE and Unigram");
    return std::make_shared<const JsonTokenizer>(root, text, std::move(keys), w);
  } catch (const json::exception& e) {
    fail("{}: unexpected value ({})", source, e.what());
  }
}

}  // namespace hf

}  // namespace ft
