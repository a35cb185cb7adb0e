// Word tags -> per-token labels (run_ner.py's tokenize_and_align_labels), and
// per-token predictions -> entity spans (the token-classification pipeline's
// "simple" aggregation).
#include <algorithm>
#include <unordered_map>

#include "ft/base/error.h"
#include "ft/tasks/token_classification.h"

namespace ft {
namespace token_labels {
namespace {

// run_ner.py builds the I- name with str.replace("B-", "I-"), which rewrites
// every "B-" in the name, not only the prefix; kept so the same label sets
// map the same way.
std::string b_to_i(const std::string& name) {
  std::string out = name;
  for (size_t at = out.find("B-"); at != std::string::npos; at = out.find("B-", at + 2)) out[at] = 'I';
  return out;
}

// The pipeline's get_tag: a B- or I- tag and its type; any other label is a
// continuation ("I") of a type named like the label itself.
std::pair<char, std::string> bio_and_type(const std::string& label) {
  if (label.rfind("B-", 0) == 0) return {'B', label.substr(2)};
  if (label.rfind("I-", 0) == 0) return {'I', label.substr(2)};
  return {'I', label};
}

// The pipeline's entity_group: the label after its first '-', if it has one.
std::string group_name(const std::string& label) {
  const size_t dash = label.find('-');
  return dash == std::string::npos ? label : label.substr(dash + 1);
}

void check_sizes(const TokenPredictions& t) {
  const size_t n = t.labels.size();
  if (t.scores.size() != n || t.offsets.size() != n || t.word_ids.size() != n)
    fail("group_entities: {} labels, {} score rows, {} offsets and {} word ids; give one of each per token", n,
         t.scores.size(), t.offsets.size(), t.word_ids.size());
}

}  // namespace
}  // namespace token_labels

LabelAligner::LabelAligner(const std::vector<std::string>& label_names, bool label_all_tokens)
    : label_all_tokens_(label_all_tokens) {
  std::unordered_map<std::string, int64_t> ids;
  for (size_t i = 0; i < label_names.size(); ++i) ids.emplace(label_names[i], static_cast<int64_t>(i));
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& name = label_names[i];
    const auto inside = name.rfind("B-", 0) == 0 ? ids.find(token_labels::b_to_i(name)) : ids.end();
    continuation_.push_back(inside != ids.end() ? inside->second : static_cast<int64_t>(i));
  }
}

std::vector<int64_t> LabelAligner::align(const std::vector<int64_t>& word_ids,
                                         const std::vector<int64_t>& tags) const {
  const auto num_labels = static_cast<int64_t>(continuation_.size());
  std::vector<int64_t> labels;
  labels.reserve(word_ids.size());
  int64_t previous = -1;
  for (size_t t = 0; t < word_ids.size(); ++t) {
    const int64_t word = word_ids[t];
    if (word < 0) {
      labels.push_back(kIgnoreLabel);
      previous = word;
      continue;
    }
    if (word >= static_cast<int64_t>(tags.size()))
      fail("align labels: token {} belongs to word {}, but the sentence has {} tags; the word ids and the "
           "tags must come from the same sentence",
           t, word, tags.size());
    const int64_t tag = tags[static_cast<size_t>(word)];
    if (tag < 0 || tag >= num_labels)
      fail("align labels: word {} has tag id {}, outside the {} labels", word, tag, num_labels);
    if (word != previous) {
      labels.push_back(tag);
    } else {
      labels.push_back(label_all_tokens_ ? continuation_[static_cast<size_t>(tag)] : kIgnoreLabel);
    }
    previous = word;
  }
  return labels;
}

std::vector<PredictedEntity> group_entities(std::string_view text, const TokenPredictions& tokens,
                                            const std::vector<std::string>& label_names) {
  token_labels::check_sizes(tokens);
  // One entry per token that is not special: its label id, score, span.
  struct Token {
    int64_t label;
    double score;
    int64_t start, end;
  };
  std::vector<std::vector<Token>> groups;
  const auto num_labels = static_cast<int64_t>(label_names.size());
  for (size_t t = 0; t < tokens.labels.size(); ++t) {
    if (tokens.word_ids[t] < 0) continue;
    const int64_t label = tokens.labels[t];
    if (label < 0 || label >= num_labels)
      fail("group_entities: token {} has label {}, outside the {} labels", t, label, num_labels);
    if (tokens.scores[t].size() != label_names.size())
      fail("group_entities: token {} has {} scores for {} labels", t, tokens.scores[t].size(), num_labels);
    const auto [start, end] = tokens.offsets[t];
    if (start < 0 || start > end || end > static_cast<int64_t>(text.size()))
      fail("group_entities: token {} has offsets [{}, {}) outside the text's {} bytes", t, start, end,
           text.size());
    const Token tok{label, tokens.scores[t][static_cast<size_t>(label)], start, end};
    const auto [bi, type] = token_labels::bio_and_type(label_names[static_cast<size_t>(label)]);
    const bool joins = !groups.empty() && bi != 'B' &&
                       token_labels::bio_and_type(label_names[static_cast<size_t>(groups.back().back().label)])
                               .second == type;
    if (joins) {
      groups.back().push_back(tok);
    } else {
      groups.push_back({tok});
    }
  }
  std::vector<PredictedEntity> out;
  for (const auto& g : groups) {
    PredictedEntity e;
    // The group is named after its first token, as the pipeline's group_sub_entities does.
    e.entity_group = token_labels::group_name(label_names[static_cast<size_t>(g.front().label)]);
    if (e.entity_group == "O") continue;
    double sum = 0.0;
    for (const auto& tok : g) sum += tok.score;
    e.score = sum / static_cast<double>(g.size());
    e.start = g.front().start;
    e.end = std::max(g.back().end, e.start);
    e.word = std::string(text.substr(static_cast<size_t>(e.start), static_cast<size_t>(e.end - e.start)));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace ft
