// tokenizer.json models BPE and Unigram (hf_pipeline.h), giving the Rust
// library's ids: BPE merges by rank, leftmost first on ties; Unigram takes the
// Viterbi path with the first-found candidate winning ties.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <queue>

#include <fmt/format.h>

#include "ft/base/error.h"
#include "hf_pipeline.h"

namespace ft::hf {
namespace {

// The pieces of a vocabulary by text; later duplicates win, as the Rust
// HashMap built from the file does.
struct Lookup {
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int64_t> ids;
  std::size_t max_bytes = 0;

  std::optional<int64_t> find(const std::string& t) const {
    const auto it = ids.find(t);
    if (it == ids.end()) return std::nullopt;
    return it->second;
  }
};

// byte_fallback: appends the "<0xNN>" tokens of every byte of `s`, or
// nothing and false when the vocabulary lacks one of them.
bool push_byte_tokens(const Lookup& lookup, const std::string& s, std::vector<int64_t>& out) {
  std::vector<int64_t> bytes;
  for (const char c : s) {
    const auto id = lookup.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(c)));
    if (!id) return false;
    bytes.push_back(*id);
  }
  out.insert(out.end(), bytes.begin(), bytes.end());
  return true;
}

std::optional<std::string> optional_str(const json& j, const std::string& name, const std::string& key, const Where& w) {
  if (!j.contains(name) || j.at(name).is_null()) return std::nullopt;
  return w.str(j, name, key);
}

class Bpe final : public Model {
 public:
  Bpe(const json& j, const Where& w) {
    const json& vocab = j.value("vocab", json());
    if (!vocab.is_object()) w.refuse("model.vocab", "missing or not an object of token: id");
    lookup_.tokens.resize(vocab.size());
    std::vector<bool> seen(vocab.size(), false);
    for (const auto& [token, id_json] : vocab.items()) {
      const auto id = id_json.is_number_integer() ? id_json.get<int64_t>() : -1;
      if (id < 0 || id >= static_cast<int64_t>(vocab.size()) || seen[static_cast<std::size_t>(id)]) {
        w.refuse("model.vocab", fmt::format("ids must be 0..{} once each ('{}' has {})", vocab.size() - 1, token,
                                            id_json.dump()));
      }
      seen[static_cast<std::size_t>(id)] = true;
      lookup_.tokens[static_cast<std::size_t>(id)] = token;
      lookup_.ids[token] = id;
    }
    const json dropout = j.value("dropout", json());
    if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
      w.refuse("model.dropout", fmt::format("{} is not supported; ft tokenizes deterministically (use null)", dropout.dump()));
    }
    unk_token_ = optional_str(j, "unk_token", "model.unk_token", w);
    if (unk_token_) {
      const auto id = lookup_.find(*unk_token_);
      if (!id) w.refuse("model.unk_token", fmt::format("'{}' is not in model.vocab", *unk_token_));
      unk_ = *id;
    }
    prefix_ = optional_str(j, "continuing_subword_prefix", "model.continuing_subword_prefix", w).value_or("");
    suffix_ = optional_str(j, "end_of_word_suffix", "model.end_of_word_suffix", w).value_or("");
    fuse_unk_ = w.flag(j, "fuse_unk", "model.fuse_unk", false);
    byte_fallback_ = w.flag(j, "byte_fallback", "model.byte_fallback", false);
    ignore_merges_ = w.flag(j, "ignore_merges", "model.ignore_merges", false);
    read_merges(j.value("merges", json()), w);
  }

  void encode(std::string_view word, std::vector<int64_t>& out) const override {
    if (word.empty()) return;
    if (ignore_merges_) {
      if (const auto id = lookup_.find(std::string(word))) {
        out.push_back(*id);
        return;
      }
    }
    std::vector<int64_t> symbols = initial_symbols(word);
    merge_all(symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
  }

  const std::vector<std::string>& vocab() const override { return lookup_.tokens; }
  int64_t unk_id() const override { return unk_; }

 private:
  void read_merges(const json& merges, const Where& w) {
    if (!merges.is_array()) w.refuse("model.merges", "missing or not a list");
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const json& m = merges[rank];
      const std::string key = fmt::format("model.merges[{}]", rank);
      std::string a, b;
      if (m.is_string()) {  // "a b", the format before tokenizers 0.20
        const std::string s = m.get<std::string>();
        const auto space = s.find(' ');
        if (space == std::string::npos) w.refuse(key, fmt::format("'{}' is not two tokens separated by a space", s));
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        w.refuse(key, "expected [\"a\", \"b\"] or \"a b\"");
      }
      const auto ia = lookup_.find(a), ib = lookup_.find(b);
      // The merged token drops b's continuation prefix, whether or not b has it.
      const std::string merged = a + (b.size() >= prefix_.size() ? b.substr(prefix_.size()) : std::string());
      const auto im = lookup_.find(merged);
      if (!ia || !ib || !im) {
        w.refuse(key, fmt::format("'{}' + '{}' -> '{}': a token is not in model.vocab", a, b, merged));
      }
      merges_[pair_key(*ia, *ib)] = {static_cast<int64_t>(rank), *im};
    }
  }

  static uint64_t pair_key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b); }

  // One symbol per character (prefix on all but the first, suffix on the
  // last); unknown characters become their bytes' tokens or unk_token.
  std::vector<int64_t> initial_symbols(std::string_view word) const {
    std::vector<int64_t> symbols;
    const auto starts = char_starts(word);
    std::optional<int64_t> pending_unk;
    const std::size_t n = starts.size() - 1;
    for (std::size_t k = 0; k < n; ++k) {
      std::string s(word.substr(starts[k], starts[k + 1] - starts[k]));
      if (k > 0) s.insert(0, prefix_);
      if (k + 1 == n) s += suffix_;
      if (const auto id = lookup_.find(s)) {
        if (pending_unk) symbols.push_back(*pending_unk);
        pending_unk.reset();
        symbols.push_back(*id);
        continue;
      }
      // As in the Rust code, a pending unknown is not flushed before the bytes.
      if (byte_fallback_ && push_byte_tokens(lookup_, s, symbols)) continue;
      if (unk_ >= 0) {
        if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
        pending_unk = unk_;
      }
    }
    if (pending_unk) symbols.push_back(*pending_unk);
    return symbols;
  }

  // The lowest-ranked adjacent pair merges first, the leftmost on ties,
  // until no pair has a merge: a heap of candidate pairs over a linked list
  // of symbols, so long words (unspaced Chinese, runs of punctuation) stay
  // n log n. A merged symbol keeps the left position; entries whose pair has
  // changed since they were pushed are skipped when they surface.
  void merge_all(std::vector<int64_t>& ids) const {
    const auto n = static_cast<std::ptrdiff_t>(ids.size());
    if (n < 2) return;
    std::vector<std::ptrdiff_t> prev(ids.size()), next(ids.size());
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      prev[static_cast<std::size_t>(i)] = i - 1;
      next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
    }
    std::vector<char> alive(ids.size(), 1);
    struct Candidate {
      int64_t rank;
      std::ptrdiff_t pos;
      int64_t merged;
    };
    auto later = [](const Candidate& a, const Candidate& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
    auto at = [](auto& v, std::ptrdiff_t i) -> auto& { return v[static_cast<std::size_t>(i)]; };
    auto offer = [&](std::ptrdiff_t pos) {
      const std::ptrdiff_t right = at(next, pos);
      if (right < 0) return;
      const auto it = merges_.find(pair_key(at(ids, pos), at(ids, right)));
      if (it != merges_.end()) heap.push({it->second.first, pos, it->second.second});
    };
    for (std::ptrdiff_t i = 0; i + 1 < n; ++i) offer(i);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const std::ptrdiff_t right = at(next, c.pos);
      if (!at(alive, c.pos) || right < 0) continue;
      const auto it = merges_.find(pair_key(at(ids, c.pos), at(ids, right)));
      if (it == merges_.end() || it->second.second != c.merged) continue;
      at(ids, c.pos) = c.merged;
      at(alive, right) = 0;
      at(next, c.pos) = at(next, right);
      if (at(next, right) >= 0) at(prev, at(next, right)) = c.pos;
      if (at(prev, c.pos) >= 0) offer(at(prev, c.pos));
      offer(c.pos);
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (alive[i]) ids[kept++] = ids[i];
    }
    ids.resize(kept);
  }

  Lookup lookup_;
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;  // (a, b) -> (rank, merged id)
  std::optional<std::string> unk_token_;
  int64_t unk_ = -1;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

class Unigram final : public Model {
 public:
  Unigram(const json& j, const Where& w) {
    const json& vocab = j.value("vocab", json());
    if (!vocab.is_array() || vocab.empty()) w.refuse("model.vocab", "missing or not a list of [piece, score]");
    for (std::size_t i = 0; i < vocab.size(); ++i) {
      const json& e = vocab[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
        w.refuse(fmt::format("model.vocab[{}]", i), "expected [piece, score]");
      }
      const std::string piece = e[0].get<std::string>();
      const double score = e[1].get<double>();
      lookup_.tokens.push_back(piece);
      lookup_.ids[piece] = static_cast<int64_t>(i);
      lookup_.max_bytes = std::max(lookup_.max_bytes, piece.size());
      scores_.push_back(score);
      min_score_ = std::min(min_score_, score);
    }
    if (j.contains("unk_id") && !j.at("unk_id").is_null()) {
      if (!j.at("unk_id").is_number_integer()) w.refuse("model.unk_id", "not an integer");
      unk_ = j.at("unk_id").get<int64_t>();
      if (unk_ < 0 || unk_ >= static_cast<int64_t>(vocab.size())) {
        w.refuse("model.unk_id", fmt::format("{} is outside model.vocab (0..{})", unk_, vocab.size() - 1));
      }
    }
    byte_fallback_ = w.flag(j, "byte_fallback", "model.byte_fallback", false);
  }

  void encode(std::string_view word, std::vector<int64_t>& out) const override {
    for (const std::string& piece : best_path(word)) {
      if (const auto id = lookup_.find(piece)) {
        out.push_back(*id);
        continue;
      }
      if (byte_fallback_ && push_byte_tokens(lookup_, piece, out)) continue;
      if (unk_ < 0) fail("a Unigram model without unk_id met a character it has no piece for");
      out.push_back(unk_);
    }
  }

  const std::vector<std::string>& vocab() const override { return lookup_.tokens; }
  int64_t unk_id() const override { return unk_; }

 private:
  // The pieces of the best segmentation; runs of unknown characters come
  // back fused as one string (not in the vocabulary).
  std::vector<std::string> best_path(std::string_view s) const {
    struct Node {
      double score = 0;
      std::size_t start = 0;
      int64_t id = -1;
      bool reached = false;
    };
    constexpr double kUnkPenalty = 10.0;
    const double unk_score = min_score_ - kUnkPenalty;
    std::vector<Node> best(s.size() + 1);
    best[0].reached = true;
    const auto starts = char_starts(s);
    std::string key;
    for (std::size_t k = 0; k + 1 < starts.size(); ++k) {
      const std::size_t from = starts[k];
      const std::size_t char_len = starts[k + 1] - from;
      const double here = best[from].score;
      bool single = false;
      auto offer = [&](std::size_t to, double score, int64_t id) {
        Node& t = best[to];
        if (!t.reached || here + score > t.score) t = {here + score, from, id, true};
      };
      // Shorter pieces first, as the trie's prefix search yields them.
      for (std::size_t e = k + 1; e < starts.size() && starts[e] - from <= lookup_.max_bytes; ++e) {
        key.assign(s.substr(from, starts[e] - from));
        const auto it = lookup_.ids.find(key);
        if (it == lookup_.ids.end()) continue;
        offer(starts[e], scores_[static_cast<std::size_t>(it->second)], it->second);
        if (e == k + 1) single = true;
      }
      if (!single) {
        if (unk_ < 0) fail("a Unigram model without unk_id met a character it has no piece for");
        offer(from + char_len, unk_score, unk_);
      }
    }
    std::vector<std::string> pieces;
    std::string unknown;  // consecutive unknowns, built back to front
    for (std::size_t end = s.size(); end > 0;) {
      const Node& n = best[end];
      if (n.id == unk_) {
        unknown.insert(0, s.substr(n.start, end - n.start));
      } else {
        if (!unknown.empty()) pieces.push_back(std::move(unknown));
        unknown.clear();
        pieces.push_back(lookup_.tokens[static_cast<std::size_t>(n.id)]);
      }
      end = n.start;
    }
    if (!unknown.empty()) pieces.push_back(std::move(unknown));
    std::reverse(pieces.begin(), pieces.end());
    return pieces;
  }

  Lookup lookup_;
  std::vector<double> scores_;
  double min_score_ = std::numeric_limits<double>::infinity();
  int64_t unk_ = -1;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Model> read_bpe(const json& j, const Where& w) { return std::make_unique<Bpe>(j, w); }
std::unique_ptr<Model> read_unigram(const json& j, const Where& w) { return std::make_unique<Unigram>(j, w); }

}  // namespace ft::hf
