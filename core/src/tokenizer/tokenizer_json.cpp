// WordPieceTokenizer::from_tokenizer_json: a `tokenizers` tokenizer.json of
// the BERT family read into ft's WordPiece pipeline. Every setting that
// changes ids is checked against what that pipeline does; a file that asks
// for anything else is refused with the key, never tokenized differently.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/tokenizer/tokenizer.h"

namespace ft {
namespace {

using json = nlohmann::json;

// The special tokens ft's pipeline splits out of raw text (tokenizer.h, step 1).
const char* const kBertSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void refuse(const std::string& key, const std::string& what) const {
    fail("{}: {}: {}", path_, key, what);
  }

  const json& object(const json& parent, const std::string& key, const std::string& dotted) const {
    if (!parent.contains(key) || !parent.at(key).is_object()) refuse(dotted, "missing or not an object");
    return parent.at(key);
  }

  // The type of a component ("normalizer.type"); a null component is named as such.
  std::string type_of(const json& root, const std::string& key) const {
    if (!root.contains(key) || root.at(key).is_null()) return "null";
    const json& c = root.at(key);
    if (!c.is_object() || !c.contains("type") || !c.at("type").is_string()) refuse(key + ".type", "missing");
    return c.at("type").get<std::string>();
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> read_wordpiece_vocab(const Reader& r, const json& model, TokenizerOptions& options) {
  if (model.value("unk_token", "") != "[UNK]") r.refuse("model.unk_token", "ft's WordPiece needs '[UNK]'");
  if (model.value("continuing_subword_prefix", "##") != "##") {
    r.refuse("model.continuing_subword_prefix", "ft's WordPiece continues words with '##' only");
  }
  if (model.contains("max_input_chars_per_word")) {
    options.max_chars_per_word = model.at("max_input_chars_per_word").get<int>();
  }
  const json& vocab = r.object(model, "vocab", "model.vocab");
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = id_json.get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(tokens.size()) || seen[static_cast<size_t>(id)]) {
      r.refuse("model.vocab", fmt::format("ids must be 0..{} once each ('{}' has id {})", tokens.size() - 1, token, id));
    }
    seen[static_cast<size_t>(id)] = true;
    tokens[static_cast<size_t>(id)] = token;
  }
  return tokens;
}

// BertNormalizer: ft always cleans text, lower-cases with accent stripping
// or does neither, and may split CJK ideographs.
void read_normalizer(const Reader& r, const json& root, TokenizerOptions& options) {
  const std::string type = r.type_of(root, "normalizer");
  if (type != "BertNormalizer") {
    r.refuse("normalizer.type", fmt::format("'{}' is not supported for WordPiece (ft reads BertNormalizer)", type));
  }
  const json& n = root.at("normalizer");
  if (!n.value("clean_text", true)) r.refuse("normalizer.clean_text", "false is not supported (ft always cleans)");
  const bool lower = n.value("lowercase", true);
  if (n.contains("strip_accents") && !n.at("strip_accents").is_null() && n.at("strip_accents").get<bool>() != lower) {
    r.refuse("normalizer.strip_accents", "ft strips accents exactly when it lower-cases; set it to null");
  }
  options.lowercase = lower ? Lowercase::Yes : Lowercase::No;
  options.split_cjk = n.value("handle_chinese_chars", true);
}

// "[CLS] $A [SEP]" and "[CLS] $A [SEP] $B:1 [SEP]:1", as TemplateProcessing
// or BertProcessing: what WordPieceTokenizer::encode builds.
void check_post_processor(const Reader& r, const json& root, const WordPieceTokenizer& tok) {
  const std::string type = r.type_of(root, "post_processor");
  const json& p = root.at("post_processor");
  auto expect_special = [&](const json& spec, const std::string& key, const char* token) {
    if (!spec.is_array() || spec.size() != 2 || spec[0] != token || spec[1].get<int64_t>() != tok.token_to_id(token)) {
      r.refuse(key, fmt::format("ft adds {} with its vocabulary id", token));
    }
  };
  if (type == "BertProcessing") {
    expect_special(p.value("cls", json()), "post_processor.cls", "[CLS]");
    expect_special(p.value("sep", json()), "post_processor.sep", "[SEP]");
    return;
  }
  if (type != "TemplateProcessing") {
    r.refuse("post_processor.type", fmt::format("'{}' is not supported for WordPiece (ft builds [CLS] A [SEP] B [SEP])", type));
  }
  // Each piece as "TOKEN:type" or "$A:type", to compare with what ft builds.
  auto spell = [&](const json& template_, const std::string& key) {
    std::vector<std::string> out;
    if (!template_.is_array()) r.refuse(key, "not a list");
    for (const auto& piece : template_) {
      if (piece.contains("SpecialToken")) {
        const auto& s = piece.at("SpecialToken");
        out.push_back(s.value("id", "") + ":" + std::to_string(s.value("type_id", 0)));
      } else if (piece.contains("Sequence")) {
        const auto& s = piece.at("Sequence");
        out.push_back("$" + s.value("id", "") + ":" + std::to_string(s.value("type_id", 0)));
      } else {
        r.refuse(key, "a piece is neither SpecialToken nor Sequence");
      }
    }
    return out;
  };
  const std::vector<std::string> single{"[CLS]:0", "$A:0", "[SEP]:0"};
  const std::vector<std::string> pair{"[CLS]:0", "$A:0", "[SEP]:0", "$B:1", "[SEP]:1"};
  if (spell(p.value("single", json()), "post_processor.single") != single) {
    r.refuse("post_processor.single", "ft builds '[CLS] $A [SEP]' (type ids 0)");
  }
  if (spell(p.value("pair", json()), "post_processor.pair") != pair) {
    r.refuse("post_processor.pair", "ft builds '[CLS] $A [SEP] $B:1 [SEP]:1'");
  }
  for (const char* token : {"[CLS]", "[SEP]"}) {
    const json& st = r.object(p, "special_tokens", "post_processor.special_tokens");
    const std::string key = std::string("post_processor.special_tokens.") + token;
    if (!st.contains(token) || st.at(token).value("ids", json::array()) != json::array({*tok.token_to_id(token)})) {
      r.refuse(key, fmt::format("must map {} to its vocabulary id {}", token, *tok.token_to_id(token)));
    }
  }
}

// Added tokens are matched in the raw text and never split. ft does that
// for exactly the BERT specials, so the file's list must be those.
void check_added_tokens(const Reader& r, const json& root, const WordPieceTokenizer& tok) {
  std::vector<std::string> listed;
  const json added = root.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string content = a.value("content", "");
    const std::string key = fmt::format("added_tokens[{}] ('{}')", i, content);
    const bool known = std::find(std::begin(kBertSpecials), std::end(kBertSpecials), content) != std::end(kBertSpecials);
    if (!known) r.refuse(key, "ft only honours the BERT special tokens [PAD] [UNK] [CLS] [SEP] [MASK] as added tokens");
    if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false) ||
        a.value("normalized", false)) {
      r.refuse(key, "lstrip, rstrip, single_word and normalized must be false (exact match in the raw text)");
    }
    if (tok.token_to_id(content) != a.value("id", int64_t{-1})) {
      r.refuse(key, fmt::format("its id {} is not the vocabulary's", a.value("id", int64_t{-1})));
    }
    listed.push_back(content);
  }
  for (const char* special : kBertSpecials) {
    if (tok.token_to_id(special) && std::find(listed.begin(), listed.end(), special) == listed.end()) {
      r.refuse("added_tokens", fmt::format("{} is in the vocabulary but not an added token; ft would never split it", special));
    }
  }
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path);
  std::stringstream text;
  text << in.rdbuf();
  json root;
  try {
    root = json::parse(text.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  const Reader r(path);
  try {
    if (!root.is_object()) r.refuse("(top level)", "not a JSON object");
    const json& model = r.object(root, "model", "model");
    const std::string model_type = model.value("type", "");
    if (model_type != "WordPiece") {
      r.refuse("model.type", fmt::format("'{}' is not supported; ft reads WordPiece (BERT-family) tokenizers", model_type));
    }
    TokenizerOptions options;
    read_normalizer(r, root, options);
    const std::string pre = r.type_of(root, "pre_tokenizer");
    if (pre != "BertPreTokenizer") {
      r.refuse("pre_tokenizer.type", fmt::format("'{}' is not supported for WordPiece (ft reads BertPreTokenizer)", pre));
    }
    std::vector<std::string> tokens = read_wordpiece_vocab(r, model, options);
    WordPieceTokenizer tok = from_tokens(std::move(tokens), options);
    check_post_processor(r, root, tok);
    check_added_tokens(r, root, tok);
    return tok;
  } catch (const json::exception& e) {
    fail("{}: unexpected value ({})", path, e.what());
  } catch (const Error& e) {
    // from_tokens names "<tokens>"; the file is what the user can fix.
    const std::string msg = e.what();
    if (msg.find(path) == 0) throw;
    fail("{}: {}", path, msg);
  }
}

}  // namespace ft
