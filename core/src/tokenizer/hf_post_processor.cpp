// tokenizer.json post-processors as one layout (hf_pipeline.h's Template):
// BertProcessing, RobertaProcessing and TemplateProcessing differ only in
// where the special tokens go and which type ids the parts get. ByteLevel
// only trims offsets, which ft does not keep.
#include <fmt/format.h>

#include "hf_pipeline.h"

namespace ft::hf {
namespace {

// ["<s>", 0]: a special token and its id, which must be the vocabulary's.
int64_t special_pair(const json& j, const std::string& key, const Where& w,
                     const std::unordered_map<std::string, int64_t>& vocab) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_string() || !j[1].is_number_integer()) {
    w.refuse(key, "expected [token, id]");
  }
  const std::string token = j[0].get<std::string>();
  const auto id = j[1].get<int64_t>();
  const auto it = vocab.find(token);
  if (it == vocab.end() || it->second != id) {
    w.refuse(key, fmt::format("'{}' does not have id {} in the vocabulary", token, id));
  }
  return id;
}

TemplateItem special(int64_t id, int64_t type_id) { return {-1, {id}, type_id}; }
TemplateItem sequence(int which, int64_t type_id) { return {which, {}, type_id}; }

std::vector<TemplateItem> read_template(const json& list, const json& specials, const std::string& key,
                                        const Where& w) {
  if (!list.is_array()) w.refuse(key, "missing or not a list");
  std::vector<TemplateItem> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& piece = list[i];
    const std::string at = fmt::format("{}[{}]", key, i);
    if (piece.is_object() && piece.contains("Sequence")) {
      const json& s = piece.at("Sequence");
      const std::string id = w.str(s, "id", at + ".Sequence.id");
      if (id != "A" && id != "B") w.unsupported(at + ".Sequence.id", id, "A and B");
      out.push_back(sequence(id == "A" ? 0 : 1, s.value("type_id", int64_t{0})));
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const json& s = piece.at("SpecialToken");
      const std::string id = w.str(s, "id", at + ".SpecialToken.id");
      if (!specials.is_object() || !specials.contains(id)) {
        w.refuse(at + ".SpecialToken.id", fmt::format("'{}' is not in post_processor.special_tokens", id));
      }
      const json ids = specials.at(id).value("ids", json());
      if (!ids.is_array() || ids.empty()) {
        w.refuse(fmt::format("post_processor.special_tokens.{}.ids", id), "missing or empty");
      }
      out.push_back({-1, ids.get<std::vector<int64_t>>(), s.value("type_id", int64_t{0})});
    } else {
      w.refuse(at, "neither a Sequence nor a SpecialToken");
    }
  }
  return out;
}

// The layout of one post-processor; nullopt for one that adds nothing.
std::optional<Template> read_one(const json& j, const std::string& key, const Where& w,
                                 const std::unordered_map<std::string, int64_t>& vocab) {
  const std::string type = w.type(j, key);
  if (type == "ByteLevel") return std::nullopt;
  if (type == "BertProcessing") {
    const int64_t cls = special_pair(j.value("cls", json()), key + ".cls", w, vocab);
    const int64_t sep = special_pair(j.value("sep", json()), key + ".sep", w, vocab);
    return Template{{special(cls, 0), sequence(0, 0), special(sep, 0)},
                    {special(cls, 0), sequence(0, 0), special(sep, 0), sequence(1, 1), special(sep, 1)}};
  }
  if (type == "RobertaProcessing") {
    // "<s> A </s></s> B </s>", every type id 0: RoBERTa has no token types.
    const int64_t cls = special_pair(j.value("cls", json()), key + ".cls", w, vocab);
    const int64_t sep = special_pair(j.value("sep", json()), key + ".sep", w, vocab);
    return Template{{special(cls, 0), sequence(0, 0), special(sep, 0)},
                    {special(cls, 0), sequence(0, 0), special(sep, 0), special(sep, 0), sequence(1, 0),
                     special(sep, 0)}};
  }
  if (type == "TemplateProcessing") {
    const json specials = j.value("special_tokens", json::object());
    return Template{read_template(j.value("single", json()), specials, key + ".single", w),
                    read_template(j.value("pair", json()), specials, key + ".pair", w)};
  }
  if (type == "Sequence") {
    const json list = j.value("processors", json());
    if (!list.is_array()) w.refuse(key + ".processors", "missing or not a list");
    std::optional<Template> found;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = fmt::format("{}.processors[{}]", key, i);
      auto t = read_one(list[i], at, w, vocab);
      if (t && found) w.refuse(at, "a second post-processor that adds tokens; ft applies one");
      if (t) found = std::move(t);
    }
    return found;
  }
  w.unsupported(key + ".type", type, "BertProcessing, RobertaProcessing, TemplateProcessing, ByteLevel and Sequence");
}

}  // namespace

std::size_t Template::added(bool is_pair) const {
  std::size_t n = 0;
  for (const auto& item : is_pair ? pair : single) {
    if (item.sequence < 0) n += item.ids.size();
  }
  return n;
}

Template read_post_processor(const json& j, const std::string& key, const Where& w,
                             const std::unordered_map<std::string, int64_t>& vocab) {
  // With no post-processor the Rust library joins the pair as A then B, B with type id 1.
  Template plain{{sequence(0, 0)}, {sequence(0, 0), sequence(1, 1)}};
  if (j.is_null()) return plain;
  return read_one(j, key, w, vocab).value_or(plain);
}

}  // namespace ft::hf
