// Model directories without a tokenizer.json: transformers 5 builds their
// tokenizer in the family's tokenizer class (DebertaV2Tokenizer,
// XLMRobertaTokenizer, CamembertTokenizer, RobertaTokenizer) from the
// SentencePiece model or vocab.json + merges.txt and the directory's
// tokenizer_config.json. ft assembles the tokenizer.json those classes give
// and reads it like any other, so a checkpoint then carries that file.
#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "hf_pipeline.h"
#include "spm_model.h"

namespace ft {
namespace {

namespace fsys = std::filesystem;
using hf::json;

enum class Family { kDeberta, kXlmr, kCamembert, kRoberta };

struct FamilyInfo {
  Family family;
  const char* tokenizer_class;
  const char* model_type;
  const char* vocab_file;  // RoBERTa's merges.txt goes with vocab.json
};

const FamilyInfo kFamilies[] = {
    {Family::kDeberta, "DebertaV2Tokenizer", "deberta-v2", "spm.model"},
    {Family::kXlmr, "XLMRobertaTokenizer", "xlm-roberta", "sentencepiece.bpe.model"},
    {Family::kCamembert, "CamembertTokenizer", "camembert", "sentencepiece.bpe.model"},
    {Family::kRoberta, "RobertaTokenizer", "roberta", "vocab.json"},
};

// tokenizers' AddedToken, as a tokenizer class hands it over.
struct Added {
  std::string content;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = true;
};

// The named special tokens in transformers' order (SPECIAL_TOKENS_ATTRIBUTES).
const char* const kNamed[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

json read_optional_json(const fsys::path& p) {
  if (!fsys::is_regular_file(p)) return json::object();
  try {
    json j = json::parse(fs::read_file(p));
    if (!j.is_object()) fail("{}: not a JSON object", p.string());
    return j;
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", p.string(), e.what());
  }
}

// What the directory's JSON files say about the tokenizer.
class DirSettings {
 public:
  DirSettings(const fsys::path& dir, Family family) : file_((dir / "tokenizer_config.json").string()) {
    config_ = read_optional_json(dir / "tokenizer_config.json");
    const bool deberta = family == Family::kDeberta;
    const char* const defaults[] = {deberta ? "[CLS]" : "<s>",  deberta ? "[SEP]" : "</s>", deberta ? "[UNK]" : "<unk>",
                                    deberta ? "[SEP]" : "</s>", deberta ? "[PAD]" : "<pad>", deberta ? "[CLS]" : "<s>",
                                    deberta ? "[MASK]" : "<mask>"};
    for (std::size_t i = 0; i < std::size(kNamed); ++i) named_[kNamed[i]] = Added{defaults[i]};
    read_named(config_, file_);
    // Without added_tokens_decoder, transformers still reads the legacy map, and it wins.
    if (!config_.contains("added_tokens_decoder")) {
      const fsys::path map = dir / "special_tokens_map.json";
      read_named(read_optional_json(map), map.string());
    }
    // CamembertTokenizer makes a plain-string mask strip the space before it.
    if (family == Family::kCamembert && !mask_is_object_) named_["mask_token"].lstrip = true;
  }

  bool flag(const std::string& name, bool fallback) const {
    if (!config_.contains(name) || config_.at(name).is_null()) return fallback;
    if (!config_.at(name).is_boolean()) fail("{}: {}: {} is not true or false", file_, name, config_.at(name).dump());
    return config_.at(name).get<bool>();
  }
  // The named token's text ("" when the file sets it to null).
  const std::string& name(const char* key) const { return named_.at(key).content; }
  const std::map<std::string, Added>& named() const { return named_; }
  // added_tokens_decoder's tokens in id order.
  std::vector<Added> declared() const {
    std::vector<std::pair<long long, Added>> by_id;
    const json d = config_.value("added_tokens_decoder", json::object());
    if (!d.is_object()) fail("{}: added_tokens_decoder: not an object of id: token", file_);
    for (const auto& [id, token] : d.items()) {
      const std::string key = "added_tokens_decoder." + id;
      long long n = 0;
      try {
        n = std::stoll(id);
      } catch (const std::exception&) {
        fail("{}: {}: the key is not a token id", file_, key);
      }
      by_id.emplace_back(n, read_token(token, key, file_));
    }
    std::sort(by_id.begin(), by_id.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Added> out;
    for (auto& [id, t] : by_id) out.push_back(std::move(t));
    return out;
  }

 private:
  static Added read_token(const json& v, const std::string& key, const std::string& file) {
    if (v.is_string()) return Added{v.get<std::string>()};
    if (!v.is_object() || !v.contains("content") || !v.at("content").is_string()) {
      fail("{}: {}: expected a string or an object with \"content\"", file, key);
    }
    Added t{v.at("content").get<std::string>()};
    auto flag = [&](const char* name, bool fallback) {
      if (!v.contains(name) || v.at(name).is_null()) return fallback;
      if (!v.at(name).is_boolean()) fail("{}: {}.{}: {} is not true or false", file, key, name, v.at(name).dump());
      return v.at(name).get<bool>();
    };
    t.lstrip = flag("lstrip", false);
    t.rstrip = flag("rstrip", false);
    t.single_word = flag("single_word", false);
    t.special = flag("special", true);
    t.normalized = flag("normalized", !t.special);
    return t;
  }

  void read_named(const json& j, const std::string& file) {
    for (const char* key : kNamed) {
      if (!j.contains(key)) continue;
      const json& v = j.at(key);
      if (v.is_null()) {
        named_[key] = Added{""};
      } else {
        named_[key] = read_token(v, key, file);
        named_[key].special = true;
        named_[key].normalized = v.is_object() && v.value("normalized", false);
        if (std::string(key) == "mask_token") mask_is_object_ = v.is_object();
      }
    }
  }

  std::string file_;
  json config_;
  std::map<std::string, Added> named_;
  bool mask_is_object_ = false;
};

// The tokenizer.json being assembled: the model's vocabulary, then the added
// tokens in the order the class adds them (a token already in the vocabulary
// keeps its id, a new one gets the next).
class Assembly {
 public:
  explicit Assembly(std::vector<std::string> vocab) : size_(static_cast<int64_t>(vocab.size())) {
    // tokenizers' vocabulary map: a later duplicate wins.
    for (std::size_t i = 0; i < vocab.size(); ++i) ids_[vocab[i]] = static_cast<int64_t>(i);
  }

  void add(const Added& t) {
    if (t.content.empty() || added_.count(t.content)) return;
    const auto it = ids_.find(t.content);
    const int64_t id = it != ids_.end() ? it->second : size_++;
    ids_[t.content] = id;
    added_.insert(t.content);
    tokens_.push_back({{"id", id},
                       {"content", t.content},
                       {"single_word", t.single_word},
                       {"lstrip", t.lstrip},
                       {"rstrip", t.rstrip},
                       {"normalized", t.normalized},
                       {"special", t.special}});
  }

  // What transformers' __init__ adds: added_tokens_decoder, the named specials, the extra ones.
  void add_all(const DirSettings& s, const std::vector<Added>& extra) {
    for (const auto& t : s.declared()) add(t);
    for (const char* key : kNamed) add(s.named().at(key));
    for (const auto& t : extra) add(t);
  }

  int64_t id(const std::string& token, const std::string& what, const std::string& source) const {
    const auto it = ids_.find(token);
    if (it == ids_.end()) fail("{}: the {} '{}' is not in the vocabulary", source, what, token);
    return it->second;
  }

  json added_tokens() const {
    json out = tokens_;
    std::sort(out.begin(), out.end(), [](const json& a, const json& b) { return a.at("id") < b.at("id"); });
    return out;
  }

 private:
  int64_t size_;
  std::unordered_map<std::string, int64_t> ids_;
  std::set<std::string> added_;
  json tokens_ = json::array();
};

json special_entry(const std::string& token, int64_t id) {
  return {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
}

json template_piece(const char* kind, const std::string& id, int type_id) {
  return {{kind, {{"id", id}, {"type_id", type_id}}}};
}

// "<cls> $A <sep>" and the pair as each family lays it out: DeBERTa gives B
// type id 1 and one separator, the RoBERTa family all zeros and two.
json template_processing(const std::string& cls, int64_t cls_id, const std::string& sep, int64_t sep_id,
                         bool deberta) {
  json single = {template_piece("SpecialToken", cls, 0), template_piece("Sequence", "A", 0),
                 template_piece("SpecialToken", sep, 0)};
  json pair = single;
  if (deberta) {
    pair.push_back(template_piece("Sequence", "B", 1));
    pair.push_back(template_piece("SpecialToken", sep, 1));
  } else {
    pair.push_back(template_piece("SpecialToken", sep, 0));
    pair.push_back(template_piece("Sequence", "B", 0));
    pair.push_back(template_piece("SpecialToken", sep, 0));
  }
  json specials = json::object();
  specials[cls] = special_entry(cls, cls_id);
  specials[sep] = special_entry(sep, sep_id);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

json metaspace(const char* prepend_scheme) {
  return {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", prepend_scheme}, {"split", true}};
}

std::string base64_encode(const std::string& bytes) {
  static const char* const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += digits[(v >> k) & 63u];
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (two ? static_cast<unsigned char>(bytes[i + 1]) << 8 : 0u);
    out += digits[(v >> 18) & 63u];
    out += digits[(v >> 12) & 63u];
    out += two ? digits[(v >> 6) & 63u] : '=';
    out += '=';
  }
  return out;
}

// The SentencePiece families. Their classes build a Unigram model whatever
// the file was trained as.
json convert_spm(const FamilyInfo& f, const fsys::path& file, const DirSettings& s, TokenizerConfigKeys& keys) {
  const hf::SpmModel spm = hf::read_spm_model(file.string());
  json vocab = json::array();
  std::vector<std::string> pieces;
  auto push = [&](const std::string& piece, double score) {
    vocab.push_back({piece, score});
    pieces.push_back(piece);
  };
  const bool prefix = s.flag("add_prefix_space", true);
  keys.add_prefix_space = prefix;
  int64_t unk_id = 3;
  json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"decoder", nullptr}};
  if (f.family == Family::kDeberta) {
    for (const auto& p : spm.pieces) push(p.piece, p.score);
    // DebertaV2Tokenizer: the unknown token with score 0 if there is one, else the file's unk_id.
    unk_id = spm.unk_id;
    for (std::size_t i = 0; i < spm.pieces.size(); ++i) {
      if (spm.pieces[i].piece == s.name("unk_token") && spm.pieces[i].score == 0.0) {
        unk_id = static_cast<int64_t>(i);
        break;
      }
    }
    const bool lower = s.flag("do_lower_case", false), punct = s.flag("split_by_punct", false);
    keys.do_lower_case = lower;
    keys.split_by_punct = punct;
    json normalizers = json::array();
    if (lower) normalizers.push_back({{"type", "Lowercase"}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", "\\s{2,}|[\\n\\r\\t]"}}}, {"content", " "}});
    normalizers.push_back({{"type", "NFC"}});
    normalizers.push_back({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}});
    root["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    json pre = json::array();
    if (punct) pre.push_back({{"type", "Punctuation"}, {"behavior", "Isolated"}});
    pre.push_back(metaspace(prefix ? "always" : "first"));
    root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pre}};
  } else {
    // fairseq's layout: its own specials first, the pieces after SentencePiece's
    // (XLM-R drops <unk> <s> </s>, CamemBERT only <unk>), <mask> last.
    std::size_t skip = 3;
    if (f.family == Family::kXlmr) {
      for (const char* key : {"bos_token", "pad_token", "eos_token", "unk_token"}) push(s.name(key), 0.0);
    } else {
      push("<s>NOTUSED", 0.0);
      push(s.name("pad_token"), 0.0);
      push("</s>NOTUSED", 0.0);
      push(s.name("unk_token"), 0.0);
      push("<unk>NOTUSED", -100.0);
      skip = 1;
      const auto it = std::find(pieces.begin(), pieces.end(), s.name("unk_token"));
      unk_id = it != pieces.end() ? it - pieces.begin() : 0;
    }
    for (std::size_t i = skip; i < spm.pieces.size(); ++i) push(spm.pieces[i].piece, spm.pieces[i].score);
    push(s.name("mask_token"), 0.0);
    root["normalizer"] = spm.precompiled_charsmap.empty()
                             ? json()
                             : json{{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(spm.precompiled_charsmap)}};
    root["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers", {{{"type", "WhitespaceSplit"}}, metaspace(prefix ? "always" : "never")}}};
  }
  root["model"] = {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}, {"byte_fallback", false}};
  // SentencePiece's control and user-defined pieces become added tokens too.
  std::vector<Added> extra;
  for (const auto& p : spm.pieces) {
    if (p.type == hf::SpmPiece::kControl || p.type == hf::SpmPiece::kUserDefined) {
      extra.push_back({p.piece, false, false, false, false, p.type == hf::SpmPiece::kControl});
    }
  }
  Assembly a(std::move(pieces));
  a.add_all(s, extra);
  const std::string source = file.string();
  const std::string cls = s.name(f.family == Family::kDeberta ? "cls_token" : "bos_token");
  const std::string sep = s.name(f.family == Family::kDeberta ? "sep_token" : "eos_token");
  root["post_processor"] = template_processing(cls, a.id(cls, "class token", source), sep,
                                               a.id(sep, "separator token", source), f.family == Family::kDeberta);
  root["added_tokens"] = a.added_tokens();
  return root;
}

// RobertaTokenizer from vocab.json + merges.txt: byte-level BPE.
json convert_roberta(const fsys::path& dir, const DirSettings& s, TokenizerConfigKeys& keys) {
  const fsys::path vocab_path = dir / "vocab.json", merges_path = dir / "merges.txt";
  const json vocab = read_optional_json(vocab_path);
  std::vector<std::string> tokens(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<std::size_t>() >= tokens.size()) {
      fail("{}: '{}' has id {}; ids must be 0..{} once each", vocab_path.string(), token, id.dump(), tokens.size() - 1);
    }
    tokens[id.get<std::size_t>()] = token;
  }
  json merges = json::array();
  const std::string text = fs::read_file(merges_path);
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      fail("{}: line {}: '{}' is not two tokens separated by one space", merges_path.string(), line_no, line);
    }
    merges.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  const bool prefix = s.flag("add_prefix_space", false), trim = s.flag("trim_offsets", true);
  keys.add_prefix_space = prefix;
  keys.trim_offsets = trim;
  json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"decoder", nullptr},
               {"normalizer", nullptr}};
  root["model"] = {{"type", "BPE"},      {"dropout", nullptr},        {"unk_token", nullptr},
                   {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                   {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}};
  root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", true},
                           {"use_regex", true}};
  Assembly a(std::move(tokens));
  a.add_all(s, {});
  const std::string source = vocab_path.string();
  const std::string cls = s.name("cls_token"), sep = s.name("sep_token");
  root["post_processor"] = {{"type", "RobertaProcessing"},
                            {"sep", {sep, a.id(sep, "separator token", source)}},
                            {"cls", {cls, a.id(cls, "class token", source)}},
                            {"trim_offsets", trim},
                            {"add_prefix_space", prefix}};
  root["added_tokens"] = a.added_tokens();
  return root;
}

// The family transformers picks: tokenizer_class first, then config.json's model_type.
const FamilyInfo* family_of(const fsys::path& dir, const json& tokenizer_config) {
  const std::string config_file = (dir / "tokenizer_config.json").string();
  if (tokenizer_config.contains("tokenizer_class") && tokenizer_config.at("tokenizer_class").is_string()) {
    std::string name = tokenizer_config.at("tokenizer_class").get<std::string>();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, "Fast") == 0) name.resize(name.size() - 4);
    for (const auto& f : kFamilies) {
      if (name == f.tokenizer_class) return &f;
    }
    fail("{}: tokenizer_class: '{}' has no tokenizer.json here, and ft converts only DebertaV2Tokenizer, "
         "XLMRobertaTokenizer, CamembertTokenizer and RobertaTokenizer directories; save a tokenizer.json with "
         "transformers",
         config_file, name);
  }
  const json config = read_optional_json(dir / "config.json");
  const std::string model_type = config.value("model_type", "");
  for (const auto& f : kFamilies) {
    if (model_type == f.model_type) return &f;
  }
  return nullptr;
}

}  // namespace

TokenizerConfigKeys read_tokenizer_config_keys(const std::string& dir) {
  const fsys::path file = fsys::path(dir) / "tokenizer_config.json";
  const json j = read_optional_json(file);
  TokenizerConfigKeys k;
  if (j.contains("tokenizer_class") && j.at("tokenizer_class").is_string()) k.tokenizer_class = j.at("tokenizer_class");
  auto flag = [&](const char* name, std::optional<bool>& out) {
    if (j.contains(name) && j.at(name).is_boolean()) out = j.at(name).get<bool>();
  };
  flag("add_prefix_space", k.add_prefix_space);
  flag("trim_offsets", k.trim_offsets);
  flag("do_lower_case", k.do_lower_case);
  flag("split_by_punct", k.split_by_punct);
  return k;
}

std::shared_ptr<const Tokenizer> convert_model_dir_tokenizer(const std::string& dir_name) {
  const fsys::path dir(dir_name);
  const bool any = std::any_of(std::begin(kFamilies), std::end(kFamilies),
                               [&](const FamilyInfo& f) { return fsys::is_regular_file(dir / f.vocab_file); });
  if (!any) return nullptr;
  const FamilyInfo* f = family_of(dir, read_optional_json(dir / "tokenizer_config.json"));
  if (!f) {
    fail("{}: a tokenizer model file is here but not which family it belongs to; set model_type in config.json "
         "(deberta-v2, xlm-roberta, camembert, roberta) or tokenizer_class in tokenizer_config.json",
         dir_name);
  }
  const fsys::path file = dir / f->vocab_file;
  if (!fsys::is_regular_file(file) || (f->family == Family::kRoberta && !fsys::is_regular_file(dir / "merges.txt"))) {
    fail("{}: {} reads {}{}, which this directory lacks; copy the file(s) saved with the model here", dir_name,
         f->tokenizer_class, f->vocab_file, f->family == Family::kRoberta ? " and merges.txt" : "");
  }
  const DirSettings settings(dir, f->family);
  TokenizerConfigKeys keys = read_tokenizer_config_keys(dir_name);
  if (keys.tokenizer_class.empty()) keys.tokenizer_class = f->tokenizer_class;
  const json root = f->family == Family::kRoberta ? convert_roberta(dir, settings, keys)
                                                  : convert_spm(*f, file, settings, keys);
  const std::string source = f->family == Family::kRoberta ? (dir / "vocab.json").string() + " + merges.txt"
                                                           : file.string();
  return hf::make_json_tokenizer(root.dump(), source + " (converted)", std::move(keys), "");
}

}  // namespace ft
