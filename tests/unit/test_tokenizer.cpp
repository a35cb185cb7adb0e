// WordPiece tokenizer and vocab builder: exact pieces and ids, HF BertTokenizer
// behaviour. Real bert-base-uncased ids are checked when scripts/fetch-data.sh
// has populated data/.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ft/base/error.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft/tokenizer/vocab_builder.h"
#include "ft_test.h"

namespace {

using Pieces = std::vector<std::string>;
using Ids = std::vector<int64_t>;

// Ids: [PAD]0 [UNK]1 [CLS]2 [SEP]3 [MASK]4 un5 ##aff6 ##able7 want8 ##want9 ##ed10 wa11
// runn12 ##ing13 ,14 low15 lowest16 hello17 world18 don19 '20 t21 !22 中23 国24 .25 a26
std::vector<std::string> small_vocab() {
  return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un",    "##aff", "##able", "want",
          "##want", "##ed", "wa",    "runn",  "##ing",  ",",     "low",   "lowest", "hello",
          "world",  "don",  "'",     "t",     "!",      "中",    "国",    ".",      "a"};
}

ft::WordPieceTokenizer small(ft::Lowercase lower = ft::Lowercase::Auto) {
  ft::TokenizerOptions o;
  o.lowercase = lower;
  return ft::WordPieceTokenizer::from_tokens(small_vocab(), o);
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::filesystem::path bert_vocab() {
  return ft_test::source_dir() / "data" / "bert-base-uncased" / "vocab.txt";
}

}  // namespace

TEST_CASE("special ids and lowercase detection") {
  const auto tok = small();
  CHECK(tok.pad_id() == 0);
  CHECK(tok.unk_id() == 1);
  CHECK(tok.cls_id() == 2);
  CHECK(tok.sep_id() == 3);
  CHECK(tok.mask_id() == std::optional<int64_t>(4));
  CHECK(tok.vocab_size() == 27);
  CHECK(tok.lowercase());  // no uppercase outside [..] specials

  auto cased_vocab = small_vocab();
  cased_vocab.push_back("Hello");
  CHECK_FALSE(ft::WordPieceTokenizer::from_tokens(cased_vocab).lowercase());
  ft::TokenizerOptions yes;
  yes.lowercase = ft::Lowercase::Yes;
  CHECK(ft::WordPieceTokenizer::from_tokens(cased_vocab, yes).lowercase());
}

TEST_CASE("greedy longest-match-first WordPiece") {
  const auto tok = small();
  CHECK(tok.tokenize("unwanted running") == Pieces{"un", "##want", "##ed", "runn", "##ing"});
  CHECK(tok.tokenize("unaffable") == Pieces{"un", "##aff", "##able"});
  CHECK(tok.tokenize_to_ids("unaffable") == Ids{5, 6, 7});
  // "lowest" wins over "low" + ... : longest first.
  CHECK(tok.tokenize("lowest low") == Pieces{"lowest", "low"});

  // With "una" and "##ff" present greedy takes the longer first piece, even though
  // un ##aff ##able would also cover the word.
  auto v = small_vocab();
  v.push_back("una");   // 27
  v.push_back("##ff");  // 28
  const auto greedy = ft::WordPieceTokenizer::from_tokens(v);
  CHECK(greedy.tokenize("unaffable") == Pieces{"una", "##ff", "##able"});
  CHECK(greedy.tokenize_to_ids("unaffable") == Ids{27, 28, 7});

  // One unmatched tail turns the whole word into a single [UNK], not a partial match.
  CHECK(tok.tokenize("unaffablez hello") == Pieces{"[UNK]", "hello"});
  CHECK(tok.tokenize_to_ids("unaffablez hello") == Ids{1, 17});
}

TEST_CASE("long words become [UNK], counted in code points") {
  ft::TokenizerOptions o;
  o.max_chars_per_word = 5;
  auto v = small_vocab();
  v.push_back("##llo");  // 27
  v.push_back("hé");     // 28, NFC é: 3 bytes, 2 code points
  const auto tok = ft::WordPieceTokenizer::from_tokens(v, o);
  CHECK(tok.tokenize("hello") == Pieces{"hello"});  // exactly 5: kept
  CHECK(tok.tokenize("lowest") == Pieces{"[UNK]"});  // 6 > 5
  ft::TokenizerOptions cased = o;
  cased.lowercase = ft::Lowercase::No;
  // "héllo" is 6 bytes but 5 code points: not too long.
  CHECK(ft::WordPieceTokenizer::from_tokens(v, cased).tokenize("h\xC3\xA9llo") ==
        Pieces{"hé", "##llo"});

  // Default limit 100.
  const auto def = small();
  CHECK(def.tokenize(std::string(100, 'a')) == Pieces{"[UNK]"});  // no "##a": unmatched
  auto va = small_vocab();
  va.push_back("##a");  // 27
  const auto tok_a = ft::WordPieceTokenizer::from_tokens(va);
  const Ids hundred = tok_a.tokenize_to_ids(std::string(100, 'a'));
  REQUIRE(hundred.size() == 100);
  CHECK(hundred.front() == 26);
  CHECK(hundred.back() == 27);
  CHECK(tok_a.tokenize_to_ids(std::string(101, 'a')) == Ids{1});
}

TEST_CASE("punctuation split") {
  const auto tok = small();
  CHECK(tok.tokenize("don't!") == Pieces{"don", "'", "t", "!"});
  CHECK(tok.tokenize_to_ids("don't!") == Ids{19, 20, 21, 22});
  CHECK(tok.tokenize("hello,world.") == Pieces{"hello", ",", "world", "."});
  // ASCII symbols count as punctuation in BERT ($ is Sc, ^ is Sk); unknown -> [UNK].
  CHECK(tok.tokenize("a$a^a") == Pieces{"a", "[UNK]", "a", "[UNK]", "a"});
  // Unicode P*: U+2014 EM DASH splits; U+00A9 (So) does not.
  CHECK(tok.tokenize("hello\xE2\x80\x94world") == Pieces{"hello", "[UNK]", "world"});
  CHECK(tok.tokenize("hello\xC2\xA9world") == Pieces{"[UNK]"});
}

TEST_CASE("CJK ideographs are one token each") {
  const auto tok = small();
  CHECK(tok.tokenize("中国") == Pieces{"中", "国"});
  CHECK(tok.tokenize_to_ids("hello中国world") == Ids{17, 23, 24, 18});
  ft::TokenizerOptions no_cjk;
  no_cjk.split_cjk = false;
  CHECK(ft::WordPieceTokenizer::from_tokens(small_vocab(), no_cjk).tokenize("中国") ==
        Pieces{"[UNK]"});
}

TEST_CASE("accents stripped when uncased, kept (NFC) when cased") {
  const auto tok = small();
  CHECK(tok.tokenize("H\xC3\xA9llo") == Pieces{"hello"});           // Héllo, precomposed
  CHECK(tok.tokenize("He\xCC\x81llo WORLD") == Pieces{"hello", "world"});  // e + U+0301

  auto v = small_vocab();
  v.push_back("H\xC3\xA9llo");  // 27 "Héllo" (NFC)
  const auto cased = ft::WordPieceTokenizer::from_tokens(v);
  REQUIRE_FALSE(cased.lowercase());
  CHECK(cased.tokenize("H\xC3\xA9llo") == Pieces{"H\xC3\xA9llo"});
  CHECK(cased.tokenize_to_ids("He\xCC\x81llo") == Ids{27});  // NFC composes e + U+0301
  CHECK(cased.tokenize("hello Hello") == Pieces{"hello", "[UNK]"});
}

TEST_CASE("Python lower(): final sigma and dotted capital I") {
  // ΟΔΟΣ lower-cases to οδος with a final ς; a lone Σ stays σ.
  auto v = small_vocab();
  v.push_back("\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82");  // 27 οδος
  v.push_back("\xCF\x83");                          // 28 σ
  v.push_back("istanbul");                          // 29
  const auto tok = ft::WordPieceTokenizer::from_tokens(v);
  CHECK(tok.tokenize_to_ids("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3 \xCE\xA3") == Ids{27, 28});
  // İ -> i + U+0307, the mark is then stripped.
  CHECK(tok.tokenize_to_ids("\xC4\xB0stanbul") == Ids{29});
}

TEST_CASE("text cleaning: controls dropped, whitespace splits") {
  const auto tok = small();
  // NUL, BEL, U+FFFD, U+200B (Cf) and \x0c (Cc, not whitespace for BERT) vanish
  // inside a word; \t \n \r, U+00A0, U+3000 and U+2028 separate words.
  CHECK(tok.tokenize(std::string("hel\0lo", 6)) == Pieces{"hello"});
  CHECK(tok.tokenize("he\x07ll\xEF\xBF\xBDo w\xE2\x80\x8Bor\x0cld") == Pieces{"hello", "world"});
  CHECK(tok.tokenize("hello\tworld\nhello\r\nworld") == Pieces{"hello", "world", "hello", "world"});
  CHECK(tok.tokenize("hello\xC2\xA0world\xE3\x80\x80hello\xE2\x80\xA8world") ==
        Pieces{"hello", "world", "hello", "world"});
  CHECK(tok.tokenize("").empty());
  CHECK(tok.tokenize(" \t\n ").empty());
  // A word made only of combining marks disappears once they are stripped.
  CHECK(tok.tokenize("\xCC\x81\xCC\x81 hello") == Pieces{"hello"});
}

TEST_CASE("special tokens in the text are kept whole") {
  const auto tok = small();
  CHECK(tok.tokenize("[CLS] hello [SEP]") == Pieces{"[CLS]", "hello", "[SEP]"});
  CHECK(tok.tokenize_to_ids("hello[MASK]world[PAD]") == Ids{17, 4, 18, 0});
  // Case-sensitive: "[cls]" is ordinary text ("[", "cls", "]"; all unknown).
  CHECK(tok.tokenize("[cls]") == Pieces{"[UNK]", "[UNK]", "[UNK]"});
  // A special made whole by cleaning is kept too (HF's never_split).
  CHECK(tok.tokenize("[CL\xE2\x80\x8BS]") == Pieces{"[CLS]"});
  // [MASK] is a special even when the vocab lacks it: piece kept, id [UNK].
  const auto no_mask = ft::WordPieceTokenizer::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"});
  CHECK_FALSE(no_mask.mask_id().has_value());
  CHECK(no_mask.tokenize("hello [MASK]") == Pieces{"hello", "[MASK]"});
  CHECK(no_mask.tokenize_to_ids("hello [MASK]") == Ids{4, 1});
}

TEST_CASE("invalid UTF-8 is an error naming the byte") {
  const auto tok = small();
  auto message = [&](std::string_view s) {
    try {
      tok.tokenize(s);
    } catch (const ft::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("ab\xFF") == "invalid UTF-8 at byte 2");
  CHECK(message("hello \xC3") == "invalid UTF-8 at byte 6");         // truncated
  CHECK(message("\xC0\xAF") == "invalid UTF-8 at byte 0");           // overlong
  CHECK(message("a\xED\xA0\x80") == "invalid UTF-8 at byte 1");      // surrogate
  CHECK(message("ab\xF4\x90\x80\x80") == "invalid UTF-8 at byte 2");  // > U+10FFFF
  CHECK_THROWS_AS(tok.encode("ok", std::string_view("\x80"), 8, true), ft::Error);
  CHECK_THROWS_AS(ft::basic_tokenize("\xFE", true), ft::Error);
}

TEST_CASE("encode: single, pair, truncation, padding") {
  const auto tok = small();
  SUBCASE("single, no padding") {
    const auto e = tok.encode("hello world", std::nullopt, 0, true);
    CHECK(e.input_ids == Ids{2, 17, 18, 3});
    CHECK(e.attention_mask == Ids{1, 1, 1, 1});
    CHECK(e.token_type_ids == Ids{0, 0, 0, 0});
  }
  SUBCASE("single, padded") {
    const auto e = tok.encode("hello world", std::nullopt, 7, true);
    CHECK(e.input_ids == Ids{2, 17, 18, 3, 0, 0, 0});
    CHECK(e.attention_mask == Ids{1, 1, 1, 1, 0, 0, 0});
    CHECK(e.token_type_ids == Ids{0, 0, 0, 0, 0, 0, 0});
  }
  SUBCASE("single, truncated at the end") {
    const auto e = tok.encode("hello world hello world", std::nullopt, 4, true);
    CHECK(e.input_ids == Ids{2, 17, 18, 3});
    CHECK(tok.encode("hello world", std::nullopt, 4, false).input_ids == Ids{2, 17, 18, 3});
    CHECK(tok.encode("hello", std::nullopt, 2, false).input_ids == Ids{2, 3});
  }
  SUBCASE("pair with token types and padding") {
    const auto e = tok.encode("hello", std::string_view("world !"), 8, true);
    CHECK(e.input_ids == Ids{2, 17, 3, 18, 22, 3, 0, 0});
    CHECK(e.attention_mask == Ids{1, 1, 1, 1, 1, 1, 0, 0});
    CHECK(e.token_type_ids == Ids{0, 0, 0, 1, 1, 1, 0, 0});
    CHECK(tok.encode("hello", std::string_view("world !"), 8, false).input_ids.size() == 6);
  }
  SUBCASE("pair, longest_first truncation: where the fast and slow rules agree") {
    for (const auto rule : {ft::PairTruncation::kFast, ft::PairTruncation::kSlow}) {
      CAPTURE(static_cast<int>(rule));
      // a = 5 tokens, b = 2 tokens, budget 9-3 = 6: one off a (b fits in half).
      auto e = tok.encode("hello world hello world hello", std::string_view("low lowest"), 9, true, rule);
      CHECK(e.input_ids == Ids{2, 17, 18, 17, 18, 3, 15, 16, 3});
      CHECK(e.token_type_ids == Ids{0, 0, 0, 0, 0, 0, 1, 1, 1});
      // a = 3, b = 3, even budget 7-3 = 4: two each.
      e = tok.encode("hello world low", std::string_view("want runn a"), 7, false, rule);
      CHECK(e.input_ids == Ids{2, 17, 18, 3, 8, 12, 3});
      // a = 5 longer than b = 3, odd budget 8-3 = 5: the longer a keeps the spare token (3 + 2).
      e = tok.encode("hello world hello world hello", std::string_view("want runn a"), 8, false, rule);
      CHECK(e.input_ids == Ids{2, 17, 18, 17, 3, 8, 12, 3});
      // Empty pair side stays empty; a absorbs all cuts.
      e = tok.encode("hello world low", std::string_view(""), 5, true, rule);
      CHECK(e.input_ids == Ids{2, 17, 18, 3, 3});
      CHECK(e.token_type_ids == Ids{0, 0, 0, 0, 1});
    }
  }
  SUBCASE("pair truncation: where they differ (both over half an odd budget, b not the shorter)") {
    const auto fast = ft::PairTruncation::kFast, slow = ft::PairTruncation::kSlow;
    // a = 3, b = 3, budget 8-3 = 5. slow: b loses one on the tie and the sum fits: a 3, b 2.
    // fast: on equal lengths a counts as the shorter and gets floor(5/2): a 2, b 3.
    CHECK(tok.encode("hello world low", std::string_view("want runn a"), 8, false, slow).input_ids ==
          Ids{2, 17, 18, 15, 3, 8, 12, 3});
    CHECK(tok.encode("hello world low", std::string_view("want runn a"), 8, false, fast).input_ids ==
          Ids{2, 17, 18, 3, 8, 12, 26, 3});
    // a = 3 shorter than b = 5, budget 5. slow: b down to 3, then the tie cuts b again: a 3, b 2.
    // fast: the shorter a gets floor(5/2) = 2, the longer b the other 3.
    CHECK(tok.encode("hello world low", std::string_view("want runn a a a"), 8, false, slow).input_ids ==
          Ids{2, 17, 18, 15, 3, 8, 12, 3});
    CHECK(tok.encode("hello world low", std::string_view("want runn a a a"), 8, false, fast).input_ids ==
          Ids{2, 17, 18, 3, 8, 12, 26, 3});
    // The default is the fast rule (AutoTokenizer, transformers v5).
    CHECK(tok.encode("hello world low", std::string_view("want runn a"), 8, false).input_ids ==
          Ids{2, 17, 18, 3, 8, 12, 26, 3});
  }
  SUBCASE("max_length too small") {
    CHECK_THROWS_AS(tok.encode("hello", std::nullopt, 1, true), ft::Error);
    CHECK_THROWS_AS(tok.encode("hello", std::string_view("x"), 2, true), ft::Error);
  }
}

TEST_CASE("vocab errors name the file and the token") {
  auto message = [](auto&& make) {
    try {
      make();
    } catch (const ft::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([] { ft::WordPieceTokenizer::from_tokens({"[PAD]", "[CLS]", "[SEP]", "a"}); }) ==
        "<tokens>: vocab has no '[UNK]' token; a BERT vocab.txt needs [PAD], [UNK], [CLS] and "
        "[SEP]");
  CHECK(message([] { ft::WordPieceTokenizer::from_tokens({}); }) ==
        "<tokens>: vocab is empty; expected one token per line");

  ft_test::TempDir dir("tokenizer");
  const auto missing = (dir.path() / "nope.txt").string();
  CHECK(message([&] { ft::WordPieceTokenizer::from_file(missing); }).find(missing) !=
        std::string::npos);
  const auto empty = (dir.path() / "empty.txt").string();
  std::ofstream(empty).close();
  CHECK(message([&] { ft::WordPieceTokenizer::from_file(empty); }) ==
        empty + ": vocab is empty; expected one token per line");
  const auto no_sep = (dir.path() / "nosep.txt").string();
  std::ofstream(no_sep) << "[PAD]\n[UNK]\n[CLS]\nhello\n";
  CHECK(message([&] { ft::WordPieceTokenizer::from_file(no_sep); }) ==
        no_sep + ": vocab has no '[SEP]' token; a BERT vocab.txt needs [PAD], [UNK], [CLS] and "
                 "[SEP]");
  const auto bad = (dir.path() / "bad.txt").string();
  std::ofstream(bad) << "[PAD]\n[UNK]\nab\xFF\n";
  CHECK(message([&] { ft::WordPieceTokenizer::from_file(bad); }) ==
        bad + ": line 3: invalid UTF-8 at byte 2");
}

TEST_CASE("vocab file: CRLF lines, save round trip") {
  ft_test::TempDir dir("tokenizer");
  const auto crlf = (dir.path() / "crlf.txt").string();
  std::ofstream(crlf, std::ios::binary) << "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello\r\n";
  const auto tok = ft::WordPieceTokenizer::from_file(crlf);
  CHECK(tok.vocab_size() == 5);
  CHECK(tok.tokenize_to_ids("Hello") == Ids{4});

  const auto saved = (dir.path() / "vocab.txt").string();
  small().save(saved);
  std::string expected;
  for (const auto& t : small_vocab()) expected += t + "\n";
  CHECK(read_all(saved) == expected);
  const auto again = ft::WordPieceTokenizer::from_file(saved);
  CHECK(again.tokens() == small_vocab());
  CHECK(again.convert_tokens_to_ids({"hello", "nope", "##ing"}) == Ids{17, 1, 13});
}

TEST_CASE("bert-base-uncased: exact ids") {
  if (!std::filesystem::exists(bert_vocab())) {
    ft_test::skip("needs " + bert_vocab().string() + " (run scripts/fetch-data.sh)");
    return;
  }
  const auto tok = ft::WordPieceTokenizer::from_file(bert_vocab().string());
  CHECK(tok.vocab_size() == 30522);
  CHECK(tok.lowercase());
  CHECK(tok.pad_id() == 0);
  CHECK(tok.unk_id() == 100);
  CHECK(tok.cls_id() == 101);
  CHECK(tok.sep_id() == 102);
  CHECK(tok.mask_id() == std::optional<int64_t>(103));
  CHECK(tok.tokens()[1] == "[unused0]");

  CHECK(tok.encode("Hello, World!", std::nullopt, 0, false).input_ids ==
        Ids{101, 7592, 1010, 2088, 999, 102});
  CHECK(tok.tokenize_to_ids("the") == Ids{1996});
  // Greedy: "una" (14477) exists, so un ##aff ##able is not what BERT produces.
  CHECK(tok.tokenize("unaffable") == Pieces{"una", "##ffa", "##ble"});
  CHECK(tok.tokenize_to_ids("unaffable") == Ids{14477, 20961, 3468});
  CHECK(tok.tokenize_to_ids("I don't like it.") == Ids{1045, 2123, 1005, 1056, 2066, 2009, 1012});
  CHECK(tok.tokenize_to_ids("Unwanted running") == Ids{18162, 2770});
  CHECK(tok.tokenize_to_ids("Café 中国") == Ids{7668, 1746, 1799});
  CHECK(tok.tokenize_to_ids("ΟΔΟΣ") == Ids{1169, 29722, 15297});
  const auto pair = tok.encode("hello", std::string_view("world"), 6, true);
  CHECK(pair.input_ids == Ids{101, 7592, 102, 2088, 102, 0});
  CHECK(pair.token_type_ids == Ids{0, 0, 0, 1, 1, 0});
  CHECK(pair.attention_mask == Ids{1, 1, 1, 1, 1, 0});
}

TEST_CASE("basic_tokenize") {
  CHECK(ft::basic_tokenize("Héllo, WORLD!  中国", true) ==
        Pieces{"hello", ",", "world", "!", "中", "国"});
  CHECK(ft::basic_tokenize("Héllo, WORLD!", false) == Pieces{"Héllo", ",", "WORLD", "!"});
}

TEST_CASE("vocab builder: deterministic, covers every character") {
  const std::vector<std::string> texts = {
      "The cat sat on the mat.", "The dog sat on the log!", "Zoë's café: naïve, 中国人 ok?",
      "the the the cat cat", "unaffable unaffable running runner"};
  ft::VocabBuildOptions o;
  o.vocab_size = 80;
  o.min_frequency = 2;
  const auto vocab = ft::build_wordpiece_vocab(texts, o);
  CHECK(vocab == ft::build_wordpiece_vocab(texts, o));
  // Input order of texts does not matter either (counts only).
  auto reversed = texts;
  std::reverse(reversed.begin(), reversed.end());
  CHECK(vocab == ft::build_wordpiece_vocab(reversed, o));

  REQUIRE(vocab.size() >= 5);
  CHECK(Pieces(vocab.begin(), vocab.begin() + 5) ==
        Pieces{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"});
  // Characters come next in code-point order: "!" is the smallest seen.
  CHECK(vocab[5] == "!");
  CHECK(vocab[6] == "##!");
  // 29 distinct characters after lower-casing and accent stripping (ë, é, ï fold
  // into e, i): ids 5..62 hold each and its "##" form, CJK last.
  CHECK(vocab[61] == "国");
  CHECK(vocab[62] == "##国");
  // Then candidates by count, ties in byte order: "the" occurs 7 times, so do its
  // prefix "th" and suffix "##he"; "##at" 6 (cat 3, sat 2, mat 1); "ca" 4 (cat 3,
  // café 1); "cat" 3; the rest occur twice and fill the 80-token target.
  CHECK(vocab.size() == 80);
  CHECK(Pieces(vocab.begin() + 63, vocab.begin() + 71) ==
        Pieces{"##he", "th", "the", "##at", "ca", "cat", "##able", "##affable"});
  CHECK(vocab.back() == "run");

  const auto tok = ft::WordPieceTokenizer::from_tokens(vocab);
  CHECK(tok.lowercase());
  for (const auto& t : texts) {
    const auto ids = tok.tokenize_to_ids(t);
    CHECK(std::find(ids.begin(), ids.end(), tok.unk_id()) == ids.end());
  }
  CHECK(tok.tokenize("The cat sat") == Pieces{"the", "cat", "s", "##at"});

  CHECK_THROWS_AS(ft::build_wordpiece_vocab({"ok", "bad\xFF"}, o), ft::Error);
  try {
    ft::build_wordpiece_vocab({"ok", "bad\xFF"}, o);
  } catch (const ft::Error& e) {
    CHECK(std::string(e.what()) == "text 1: invalid UTF-8 at byte 3");
  }
}
