// Entity-level metrics as seqeval computes them in its default mode (the
// conlleval rules), from counts that add up across ranks.
#include <algorithm>
#include <map>
#include <set>

#include "ft/base/error.h"
#include "ft/tasks/token_classification.h"

namespace ft {
namespace entity_metrics {
namespace {

// seqeval's split of a tag: the prefix is its first character, the type what
// follows the first '-' ("_" when nothing does; "O" gets "_" too).
struct Tag {
  char prefix = 'O';
  std::string type;
};

Tag split_tag(const std::string& tag) {
  Tag t;
  t.prefix = tag.empty() ? 'O' : tag[0];
  const std::string rest = tag.empty() ? std::string() : tag.substr(1);
  const size_t dash = rest.find('-');
  t.type = dash == std::string::npos ? rest : rest.substr(dash + 1);
  if (t.type.empty()) t.type = "_";
  return t;
}

// seqeval's end_of_chunk: does the entity before `cur` end there?
bool ends_before(const Tag& prev, const Tag& cur) {
  const char p = prev.prefix, c = cur.prefix;
  if (p == 'E' || p == 'S') return true;
  if ((p == 'B' || p == 'I') && (c == 'B' || c == 'S' || c == 'O')) return true;
  return p != 'O' && p != '.' && prev.type != cur.type;
}

// seqeval's start_of_chunk: does an entity start at `cur`?
bool starts_at(const Tag& prev, const Tag& cur) {
  const char p = prev.prefix, c = cur.prefix;
  if (c == 'B' || c == 'S') return true;
  if ((p == 'E' || p == 'S' || p == 'O') && (c == 'E' || c == 'I')) return true;
  return c != 'O' && c != '.' && prev.type != cur.type;
}

double ratio(int64_t num, int64_t den) { return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0; }

double harmonic(double p, double r) { return p + r > 0.0 ? 2.0 * p * r / (p + r) : 0.0; }

}  // namespace
}  // namespace entity_metrics

std::vector<EntitySpan> extract_entities(const std::vector<std::string>& tags) {
  using entity_metrics::Tag;
  std::vector<EntitySpan> out;
  Tag prev;  // 'O' with type "_": what seqeval starts from
  prev.type = "_";
  int64_t begin = 0;
  // One "O" past the end closes the last entity, as seqeval appends one.
  const auto n = static_cast<int64_t>(tags.size());
  for (int64_t i = 0; i <= n; ++i) {
    const Tag cur = i < n ? entity_metrics::split_tag(tags[static_cast<size_t>(i)]) : Tag{'O', "_"};
    if (entity_metrics::ends_before(prev, cur)) out.push_back({prev.type, begin, i});
    if (entity_metrics::starts_at(prev, cur)) begin = i;
    prev = cur;
  }
  return out;
}

std::vector<std::string> entity_types(const std::vector<std::string>& label_names) {
  std::set<std::string> types;
  for (const auto& name : label_names) {
    if (name != "O") types.insert(entity_metrics::split_tag(name).type);
  }
  return {types.begin(), types.end()};
}

std::vector<int64_t> EntityCounts::to_vector() const {
  std::vector<int64_t> v{tokens, correct_tokens};
  for (size_t i = 0; i < types.size(); ++i) {
    v.push_back(true_entities[i]);
    v.push_back(predicted_entities[i]);
    v.push_back(correct_entities[i]);
  }
  return v;
}

EntityCounts EntityCounts::from_vector(std::vector<std::string> types, const std::vector<int64_t>& v) {
  if (v.size() != 2 + 3 * types.size())
    fail("entity counts: {} numbers for {} entity types, expected {}; every rank must count the same "
         "label set",
         v.size(), types.size(), 2 + 3 * types.size());
  EntityCounts c;
  c.tokens = v[0];
  c.correct_tokens = v[1];
  for (size_t i = 0; i < types.size(); ++i) {
    c.true_entities.push_back(v[2 + 3 * i]);
    c.predicted_entities.push_back(v[3 + 3 * i]);
    c.correct_entities.push_back(v[4 + 3 * i]);
  }
  c.types = std::move(types);
  return c;
}

EntityCounts& EntityCounts::operator+=(const EntityCounts& other) {
  if (types != other.types)
    fail("entity counts: adding counts of other entity types ({} vs {} types); count every part with "
         "the same types (entity_types of the label names)",
         other.types.size(), types.size());
  tokens += other.tokens;
  correct_tokens += other.correct_tokens;
  for (size_t i = 0; i < types.size(); ++i) {
    true_entities[i] += other.true_entities[i];
    predicted_entities[i] += other.predicted_entities[i];
    correct_entities[i] += other.correct_entities[i];
  }
  return *this;
}

EntityCounts count_entities(const std::vector<std::vector<std::string>>& truth,
                            const std::vector<std::vector<std::string>>& predicted,
                            const std::vector<std::string>& types) {
  if (truth.size() != predicted.size())
    fail("entity metrics: {} true sentences but {} predicted; give one prediction per sentence", truth.size(),
         predicted.size());
  std::vector<std::vector<EntitySpan>> true_spans, pred_spans;
  EntityCounts c;
  for (size_t s = 0; s < truth.size(); ++s) {
    if (truth[s].size() != predicted[s].size())
      fail("entity metrics: sentence {} has {} true tags but {} predicted; give one prediction per tag", s + 1,
           truth[s].size(), predicted[s].size());
    for (size_t i = 0; i < truth[s].size(); ++i) c.correct_tokens += truth[s][i] == predicted[s][i];
    c.tokens += static_cast<int64_t>(truth[s].size());
    true_spans.push_back(extract_entities(truth[s]));
    pred_spans.push_back(extract_entities(predicted[s]));
  }
  if (types.empty()) {
    std::set<std::string> found;
    for (const auto* spans : {&true_spans, &pred_spans})
      for (const auto& sentence : *spans)
        for (const auto& e : sentence) found.insert(e.type);
    c.types.assign(found.begin(), found.end());
  } else {
    c.types = types;
  }
  std::map<std::string, size_t> row;
  for (size_t i = 0; i < c.types.size(); ++i) row[c.types[i]] = i;
  c.true_entities.assign(c.types.size(), 0);
  c.predicted_entities.assign(c.types.size(), 0);
  c.correct_entities.assign(c.types.size(), 0);
  auto row_of = [&](const EntitySpan& e, size_t sentence) {
    const auto it = row.find(e.type);
    if (it == row.end())
      fail("entity metrics: sentence {}: entity type '{}' is not among the {} types counted; count with "
           "entity_types of the label names that produced the tags",
           sentence + 1, e.type, c.types.size());
    return it->second;
  };
  for (size_t s = 0; s < truth.size(); ++s) {
    for (const auto& e : true_spans[s]) ++c.true_entities[row_of(e, s)];
    for (const auto& e : pred_spans[s]) {
      const size_t r = row_of(e, s);
      ++c.predicted_entities[r];
      // Spans of one sentence are distinct, so a match is counted once.
      if (std::find(true_spans[s].begin(), true_spans[s].end(), e) != true_spans[s].end()) ++c.correct_entities[r];
    }
  }
  return c;
}

EntityReport entity_report(const EntityCounts& counts) {
  using entity_metrics::harmonic;
  using entity_metrics::ratio;
  EntityReport r;
  r.tokens = counts.tokens;
  r.accuracy = ratio(counts.correct_tokens, counts.tokens);
  for (size_t i = 0; i < counts.types.size(); ++i) {
    r.true_entities += counts.true_entities[i];
    r.predicted_entities += counts.predicted_entities[i];
    r.correct_entities += counts.correct_entities[i];
    if (counts.true_entities[i] == 0 && counts.predicted_entities[i] == 0) continue;
    EntityScore s;
    s.type = counts.types[i];
    s.precision = ratio(counts.correct_entities[i], counts.predicted_entities[i]);
    s.recall = ratio(counts.correct_entities[i], counts.true_entities[i]);
    s.f1 = harmonic(s.precision, s.recall);
    s.support = counts.true_entities[i];
    r.per_type.push_back(std::move(s));
  }
  r.precision = ratio(r.correct_entities, r.predicted_entities);
  r.recall = ratio(r.correct_entities, r.true_entities);
  r.f1 = harmonic(r.precision, r.recall);
  return r;
}

ClassificationReport entity_task_report(const EntityReport& report, double loss) {
  ClassificationReport r;
  r.task = "token-classification";
  r.loss = loss;
  r.accuracy = report.accuracy;
  r.total = report.tokens;
  r.scores = {{"precision", report.precision}, {"recall", report.recall}, {"f1", report.f1}, {"accuracy", report.accuracy}};
  for (const auto& t : report.per_type) {
    r.row_names.push_back(t.type);
    r.precision.push_back(t.precision);
    r.recall.push_back(t.recall);
    r.f1.push_back(t.f1);
    r.support.push_back(t.support);
  }
  const auto n = static_cast<double>(std::max<size_t>(1, report.per_type.size()));
  for (const auto& t : report.per_type) {
    r.macro_precision += t.precision / n;
    r.macro_recall += t.recall / n;
    r.macro_f1 += t.f1 / n;
  }
  return r;
}

}  // namespace ft
