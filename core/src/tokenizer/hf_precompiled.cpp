// The Precompiled normalizer: SentencePiece's compiled character map, which
// the XLM-R and DeBERTa-v3 tokenizer.json files carry (base64) in place of a
// Unicode normal form. The blob is a little-endian u32 size, a Darts
// double-array trie of that many bytes, then NUL-terminated replacement
// strings the trie's values point into. Like the Rust library, each grapheme
// cluster shorter than 6 bytes is looked up whole first, then each of its
// characters, and a match replaces the whole chunk by the replacement of the
// shortest matching prefix.
#include <cstring>

#include <fmt/format.h>
#include <utf8proc.h>

#include "hf_pipeline.h"
#include "tokenizer_text.h"

namespace ft::hf {
namespace {

std::optional<std::string> base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t bits = 0;
  int have = 0;
  for (const char c : in) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    have += 6;
    if (have >= 8) {
      have -= 8;
      out.push_back(static_cast<char>((bits >> have) & 0xFFu));
    }
  }
  return out;
}

class Precompiled final : public Normalizer {
 public:
  Precompiled(std::vector<uint32_t> trie, std::string replacements)
      : trie_(std::move(trie)), replacements_(std::move(replacements)) {}

  void apply(std::string& s, bool& start_kept) const override {
    std::string out;
    out.reserve(s.size());
    int32_t state = 0;
    std::size_t i = 0;
    while (i < s.size()) {
      const std::size_t begin = i;
      char32_t prev = text::next_code_point(s, i);
      // The extended grapheme cluster starting at `begin`.
      while (i < s.size()) {
        std::size_t next = i;
        const char32_t c = text::next_code_point(s, next);
        if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev), static_cast<utf8proc_int32_t>(c),
                                             &state)) {
          break;
        }
        prev = c;
        i = next;
      }
      const std::string_view cluster = std::string_view(s).substr(begin, i - begin);
      const std::size_t written = out.size();
      if (cluster.size() < 6 && replace(cluster, out)) {
        if (begin == 0 && out.size() == written) start_kept = false;
        continue;
      }
      for (std::size_t k = 0; k < cluster.size();) {
        const std::size_t at = k;
        text::next_code_point(cluster, k);
        const std::string_view one = cluster.substr(at, k - at);
        if (!replace(one, out)) out.append(one);
        if (begin == 0 && at == 0 && out.size() == written) start_kept = false;
      }
    }
    s = std::move(out);
  }

 private:
  // Darts' unit fields.
  static bool has_leaf(uint32_t u) { return ((u >> 8) & 1u) != 0; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFFu); }
  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

  // Appends the replacement of the shortest prefix of `chunk` in the trie.
  bool replace(std::string_view chunk, std::string& out) const {
    std::size_t node = offset(trie_[0]);
    for (const char ch : chunk) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == 0) return false;
      node ^= c;
      if (node >= trie_.size() || label(trie_[node]) != c) return false;
      const uint32_t unit = trie_[node];
      node ^= offset(unit);
      if (node >= trie_.size()) return false;
      if (has_leaf(unit)) {
        const std::size_t from = value(trie_[node]);
        if (from >= replacements_.size()) return false;
        out.append(replacements_.c_str() + from);
        return true;
      }
    }
    return false;
  }

  std::vector<uint32_t> trie_;
  std::string replacements_;
};

}  // namespace

std::unique_ptr<Normalizer> read_precompiled(const json& j, const std::string& key, const Where& w) {
  const std::string name = key + ".precompiled_charsmap";
  const auto blob = base64_decode(w.str(j, "precompiled_charsmap", name));
  if (!blob || blob->size() < 4) w.refuse(name, "not a base64 SentencePiece character map");
  uint32_t trie_bytes = 0;
  for (int b = 3; b >= 0; --b) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>((*blob)[static_cast<std::size_t>(b)]);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || 4 + static_cast<std::size_t>(trie_bytes) > blob->size()) {
    w.refuse(name, fmt::format("its trie size {} does not fit the {} bytes of the map", trie_bytes, blob->size()));
  }
  std::vector<uint32_t> trie(trie_bytes / 4);
  for (std::size_t u = 0; u < trie.size(); ++u) {
    const auto* p = reinterpret_cast<const unsigned char*>(blob->data()) + 4 + 4 * u;
    trie[u] = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
              (static_cast<uint32_t>(p[3]) << 24);
  }
  return std::make_unique<Precompiled>(std::move(trie), blob->substr(4 + trie_bytes));
}

}  // namespace ft::hf
