// Token classification building blocks: word/tag readers, label alignment,
// pre-split word encoding against Hugging Face's ids, seqeval's entity
// metrics and the pipeline's "simple" entity grouping.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/tasks/token_classification.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft_test.h"

namespace {

using Words = std::vector<std::string>;
using Ids = std::vector<int64_t>;

ft::TaggedData parse(const std::string& bytes, ft::TaggedFormat format, std::vector<std::string> label_names = {}) {
  ft::TaggedSource src;
  src.path = "tags.data";
  src.format = format;
  src.label_names = std::move(label_names);
  return ft::parse_tagged_data(bytes, src);
}

std::string error_parsing(const std::string& bytes, ft::TaggedFormat format, std::vector<std::string> names = {}) {
  return ft_test::error_of([&] { parse(bytes, format, names); });
}

}  // namespace

TEST_CASE("JSON Lines: tag names give run_ner.py's sorted label set") {
  const auto d = parse(
      "{\"tokens\": [\"EU\", \"rejects\", \"German\", \"call\"], \"ner_tags\": [\"B-ORG\", \"O\", \"B-MISC\", \"O\"]}\n"
      "\n"
      "{\"tokens\": [\"Peter\", \"Blackburn\"], \"ner_tags\": [\"B-PER\", \"I-PER\"], \"id\": 7}\n",
      ft::TaggedFormat::JsonLines);
  // Plain byte order, "O" after the B- and I- tags: get_label_list in run_ner.py.
  CHECK(d.label_names == Words{"B-MISC", "B-ORG", "B-PER", "I-PER", "O"});
  REQUIRE(d.rows.size() == 2u);
  CHECK(d.rows[0].words == Words{"EU", "rejects", "German", "call"});
  CHECK(d.rows[0].tags == Ids{1, 4, 0, 4});
  CHECK(d.rows[1].tags == Ids{2, 3});
  CHECK(d.source == "tags.data");
}

TEST_CASE("JSON Lines: integer tags with and without label names, other field names") {
  const std::string ints = "{\"tokens\": [\"a\", \"b\", \"c\"], \"ner_tags\": [0, 3, 1]}\n";
  const auto named = parse(ints, ft::TaggedFormat::JsonLines, {"O", "B-PER", "I-PER", "B-LOC"});
  CHECK(named.label_names == Words{"O", "B-PER", "I-PER", "B-LOC"});
  CHECK(named.rows[0].tags == Ids{0, 3, 1});
  const auto bare = parse(ints, ft::TaggedFormat::JsonLines);
  CHECK(bare.label_names == Words{"0", "1", "2", "3"});
  CHECK(bare.rows[0].tags == Ids{0, 3, 1});

  ft::TaggedSource src;
  src.path = "pos.jsonl";
  src.format = ft::TaggedFormat::JsonLines;
  src.words_field = "words";
  src.tags_field = "upos";
  src.scheme = ft::TagScheme::Any;  // POS tags are not IOB2
  const auto pos = ft::parse_tagged_data("{\"words\": [\"I\", \"run\"], \"upos\": [\"PRON\", \"VERB\"]}\n", src);
  CHECK(pos.label_names == Words{"PRON", "VERB"});
}

TEST_CASE("CoNLL: word first, tag last, blank lines end sentences, -DOCSTART- skipped") {
  const auto d = parse(
      "-DOCSTART- -X- -X- O\n"
      "\n"
      "EU NNP B-NP B-ORG\n"
      "rejects VBZ B-VP O\r\n"
      "German\tJJ\tB-NP\tB-MISC\n"
      "\n"
      "\n"
      "Peter NNP B-NP B-PER\n"
      "Blackburn NNP I-NP I-PER",
      ft::TaggedFormat::Conll, {"O", "B-ORG", "B-MISC", "B-PER", "I-PER"});
  REQUIRE(d.rows.size() == 2u);
  CHECK(d.rows[0].words == Words{"EU", "rejects", "German"});
  CHECK(d.rows[0].tags == Ids{1, 0, 2});
  CHECK(d.rows[1].words == Words{"Peter", "Blackburn"});
  CHECK(d.rows[1].tags == Ids{3, 4});

  // From a file, the format by extension.
  ft_test::TempDir dir("tagged");
  const auto path = dir.path() / "train.conll";
  ft::fs::write_file_atomic(path, "Paris B-LOC\nis O\n");
  ft::TaggedSource src;
  src.path = path.string();
  const auto read = ft::read_tagged_data(src);
  CHECK(read.label_names == Words{"B-LOC", "O"});
  CHECK(read.rows[0].tags == Ids{0, 1});
}

TEST_CASE("is_iob2_tag: O, B-X, I-X and nothing else") {
  for (const char* ok : {"O", "B-PER", "I-PER", "B-a-b", "I-X"}) CHECK_MESSAGE(ft::is_iob2_tag(ok), ok);
  for (const char* bad : {"", "B-", "I-", "B", "PER", "E-PER", "S-LOC", "b-per", "BPER", "O-X"})
    CHECK_MESSAGE(!ft::is_iob2_tag(bad), bad);
}

TEST_CASE("bad word/tag data: one line naming the file and the line") {
  using F = ft::TaggedFormat;
  CHECK(error_parsing("{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]}\n{\"tokens\": [\"a\", \"b\"], \"ner_tags\": [\"O\"]}\n",
                      F::JsonLines) == "tags.data: line 2: 2 words but 1 tags; give one tag per word");
  CHECK(error_parsing("a O\nb PER\n", F::Conll) ==
        "tags.data: line 2: tag 'PER' is not an IOB2 tag (O, B-<type>, I-<type>); fix the tag, or set "
        "data.tag_scheme=any for tags without entity spans");
  CHECK(error_parsing("a O\n\nb B-PER\nc B-LOC\n", F::Conll, {"O", "B-PER"}) ==
        "tags.data: line 4: tag 'B-LOC' is not one of the label names (O, B-PER)");
  CHECK(error_parsing("\n{\"tokens\": [\"a\", \"\"], \"ner_tags\": [\"O\", \"O\"]}\n", F::JsonLines) ==
        "tags.data: line 2: word 2 is empty; remove it and its tag");
  CHECK(error_parsing("a O\nlonely\n", F::Conll) ==
        "tags.data: line 2: one column 'lonely'; CoNLL lines are 'word ... tag' (a blank line ends a sentence)");
  CHECK(error_parsing("{\"tokens\": [\"a\"], \"ner_tags\": [5]}\n", F::JsonLines, {"O", "B-X"}) ==
        "tags.data: line 1: tag 1 is id 5, outside the 2 label names [0, 2)");
  CHECK(error_parsing("{\"tokens\": [\"a\", \"b\"], \"ner_tags\": [0, \"O\"]}\n", F::JsonLines) ==
        "tags.data: line 1: tags mix names and integer ids; use one kind in the whole file");
  CHECK(error_parsing("{\"words\": [\"a\"]}\n", F::JsonLines) ==
        "tags.data: line 1: no list 'tokens'; give the words as a list of strings (or name the field with data.tokens_field)");
  CHECK(error_parsing("a O\n", F::Conll, {"O", "PER"}) ==
        "tags.data: label name 'PER' is not an IOB2 tag (O, B-<type>, I-<type>); fix the label names or set "
        "data.tag_scheme=any");
  CHECK(error_parsing("-DOCSTART- O\n\n", F::Conll) ==
        "tags.data: the file has no sentences; give a file with at least one tagged sentence");
  CHECK(error_parsing("{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]}\n{oops\n", F::JsonLines)
            .rfind("tags.data: line 2: not valid JSON (", 0) == 0);
  CHECK(error_parsing("caf\xC3 O\n", F::Conll).rfind("tags.data: line 1: invalid UTF-8 at byte", 0) == 0);
}

TEST_CASE("align labels: first sub-token, or every one with B- turned into I-") {
  const Words names{"B-LOC", "B-PER", "I-LOC", "I-PER", "O"};
  const Ids word_ids{-1, 0, 0, 1, 2, 2, 2, -1, -1};  // [CLS] Je ##an lives Mont ##ré ##al [SEP] [PAD]
  const Ids tags{1, 4, 0};                         // B-PER O B-LOC
  const ft::LabelAligner first(names, false);
  CHECK(first.align(word_ids, tags) == Ids{-100, 1, -100, 4, 0, -100, -100, -100, -100});
  const ft::LabelAligner all(names, true);
  CHECK(all.continuation() == Ids{2, 3, 2, 3, 4});
  CHECK(all.align(word_ids, tags) == Ids{-100, 1, 3, 4, 0, 2, 2, -100, -100});
  // A B- tag without its I- keeps itself; run_ner.py's str.replace turns
  // every "B-" of the name into "I-".
  CHECK(ft::LabelAligner({"B-MISC", "O", "B-X-B-Y", "I-X-I-Y"}, true).continuation() == Ids{0, 1, 3, 3});
  // A word id counts from the token before it: a word split by a special token restarts.
  CHECK(first.align({0, -1, 0}, {1}) == Ids{1, -100, 1});
  CHECK(ft_test::error_of([&] { first.align({0, 3}, tags); }) ==
        "align labels: token 1 belongs to word 3, but the sentence has 3 tags; the word ids and the tags must "
        "come from the same sentence");
  CHECK(ft_test::error_of([&] { first.align({0}, {9}); }) == "align labels: word 0 has tag id 9, outside the 5 labels");
}

TEST_CASE("encode_words: Hugging Face's ids and word ids for pre-split words") {
  namespace fsys = std::filesystem;
  const auto fixture_path = ft_test::source_dir() / "tests/data/hf/tokenizers/words.ids.json";
  std::ifstream in(fixture_path);
  REQUIRE(in);
  const auto fx = nlohmann::json::parse(in);
  const auto sentences = fx.at("sentences").get<std::vector<Words>>();
  ft_test::TempDir dir("words");
  int compared = 0;
  for (const auto& spec : fx.at("tokenizers")) {
    const std::string name = spec.at("name");
    fsys::path file = ft_test::source_dir() / spec.at("file").get<std::string>();
    if (!fsys::exists(file)) {
      ft_test::skip("needs " + file.string() + " (scripts/fetch-data.sh) for " + name);
      continue;
    }
    if (spec.contains("add_prefix_space")) {  // as the script: the ByteLevel flag set
      auto state = nlohmann::json::parse(ft::fs::read_file(file));
      state.at("pre_tokenizer")["add_prefix_space"] = spec.at("add_prefix_space").get<bool>();
      file = dir.path() / (name + ".tokenizer.json");
      ft::fs::write_file_atomic(file, state.dump());
    }
    const auto tok = ft::load_tokenizer_json(file.string());
    for (const auto& c : spec.at("cases")) {
      const int max_length = c.at("max_length");
      for (size_t k = 0; k < sentences.size(); ++k) {
        CAPTURE(name);
        CAPTURE(max_length);
        CAPTURE(k);
        const auto got = tok->encode_words(sentences[k], max_length, max_length > 0);
        CHECK(got.encoding.input_ids == c.at("input_ids").at(k).get<Ids>());
        CHECK(got.word_ids == c.at("word_ids").at(k).get<Ids>());
        CHECK(got.encoding.token_type_ids == c.at("token_type_ids").at(k).get<Ids>());
        Ids mask;
        for (int64_t id : c.at("input_ids").at(k).get<Ids>()) mask.push_back(id == tok->pad_id() ? 0 : 1);
        CHECK(got.encoding.attention_mask == mask);
        ++compared;
      }
    }
  }
  MESSAGE(compared << " word encodings compared");
  CHECK(compared >= 5 * 2 * static_cast<int>(sentences.size()));
}

TEST_CASE("encode_words: a word list encodes as the text it spells for WordPiece; bad words name the word") {
  const auto tok = ft::WordPieceTokenizer::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "new", "york", "##er", "is", "."});
  const auto w = tok.encode_words({"New", "Yorker", "is", "."}, 0, false);
  CHECK(w.encoding.input_ids == tok.encode("New Yorker is.", std::nullopt, 0, false).input_ids);
  CHECK(w.encoding.input_ids == Ids{2, 4, 5, 6, 7, 8, 3});
  CHECK(w.word_ids == Ids{-1, 0, 1, 1, 2, 3, -1});
  const auto cut = tok.encode_words({"New", "Yorker", "is", "."}, 4, true);
  CHECK(cut.encoding.input_ids == Ids{2, 4, 5, 3});
  CHECK(cut.word_ids == Ids{-1, 0, 1, -1});
  const auto padded = tok.encode_words({"is"}, 5, true);
  CHECK(padded.encoding.input_ids == Ids{2, 7, 3, 0, 0});
  CHECK(padded.encoding.attention_mask == Ids{1, 1, 1, 0, 0});
  CHECK(padded.word_ids == Ids{-1, 0, -1, -1, -1});
  CHECK(ft_test::error_of([&] { tok.encode_words({"ok", "caf\xC3"}, 0, false); }) ==
        "word 1: invalid UTF-8 at byte 3");
  CHECK(ft_test::error_of([&] { tok.encode_words({"ok"}, 1, false); }).rfind("max_length 1 leaves no room", 0) == 0);
}

TEST_CASE("extract_entities: seqeval's default-mode chunks") {
  using Spans = std::vector<ft::EntitySpan>;
  // seqeval 1.2.2: get_entities(["I-PER","I-LOC","B-PER","B-PER","O","I-X","I-X"])
  // == [('PER',0,0), ('LOC',1,1), ('PER',2,2), ('PER',3,3), ('X',5,6)] (inclusive ends).
  CHECK(ft::extract_entities({"I-PER", "I-LOC", "B-PER", "B-PER", "O", "I-X", "I-X"}) ==
        Spans{{"PER", 0, 1}, {"LOC", 1, 2}, {"PER", 2, 3}, {"PER", 3, 4}, {"X", 5, 7}});
  CHECK(ft::extract_entities({"O", "O"}).empty());
  CHECK(ft::extract_entities({"B-ORG", "I-ORG", "I-ORG"}) == Spans{{"ORG", 0, 3}});
  CHECK(ft::entity_types({"O", "B-PER", "I-PER", "B-LOC", "I-MISC"}) == Words{"LOC", "MISC", "PER"});
}

TEST_CASE("entity metrics: seqeval's numbers, and counts that add up across ranks") {
  const std::vector<Words> truth{{"B-PER", "I-PER", "O", "B-LOC"},
                                 {"B-ORG", "I-ORG", "I-ORG", "O", "B-PER"},
                                 {"I-MISC", "I-MISC", "B-MISC", "I-PER"}};
  const std::vector<Words> pred{{"B-PER", "I-PER", "O", "I-LOC"},
                                {"B-ORG", "I-ORG", "O", "O", "B-LOC"},
                                {"B-MISC", "I-MISC", "I-MISC", "I-PER"}};
  // By hand: true PER[0,2) LOC[3,4) | ORG[0,3) PER[4,5) | MISC[0,2) MISC[2,3) PER[3,4): 7;
  // predicted PER[0,2) LOC[3,4) (I- after O starts one) | ORG[0,2) LOC[4,5) | MISC[0,3) PER[3,4): 6;
  // correct PER[0,2), LOC[3,4), PER[3,4): 3. Tokens equal: 3 + 3 + 2 of 13.
  const auto c = ft::count_entities(truth, pred);
  CHECK(c.types == Words{"LOC", "MISC", "ORG", "PER"});
  CHECK(c.true_entities == Ids{1, 2, 1, 3});
  CHECK(c.predicted_entities == Ids{2, 1, 1, 2});
  CHECK(c.correct_entities == Ids{1, 0, 0, 2});
  const auto r = ft::entity_report(c);
  // seqeval 1.2.2 (precision_score, recall_score, f1_score, accuracy_score and
  // classification_report(output_dict=True) on these lists):
  // 0.5, 0.42857142857142855, 0.4615384615384615, 0.6153846153846154; per type
  // LOC 0.5/1.0/0.6666666666666666 (1), MISC 0/0/0 (2), ORG 0/0/0 (1), PER 1.0/0.6666666666666666/0.8 (3).
  CHECK(r.precision == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(r.recall == doctest::Approx(0.42857142857142855).epsilon(1e-15));
  CHECK(r.f1 == doctest::Approx(0.4615384615384615).epsilon(1e-15));
  CHECK(r.accuracy == doctest::Approx(0.6153846153846154).epsilon(1e-15));
  CHECK(r.tokens == 13);
  CHECK(r.true_entities == 7);
  REQUIRE(r.per_type.size() == 4u);
  CHECK(r.per_type[0].type == "LOC");
  CHECK(r.per_type[0].precision == 0.5);
  CHECK(r.per_type[0].recall == 1.0);
  CHECK(r.per_type[0].f1 == doctest::Approx(0.6666666666666666).epsilon(1e-15));
  CHECK(r.per_type[1].f1 == 0.0);
  CHECK(r.per_type[1].support == 2);
  CHECK(r.per_type[3].type == "PER");
  CHECK(r.per_type[3].recall == doctest::Approx(0.6666666666666666).epsilon(1e-15));
  CHECK(r.per_type[3].f1 == doctest::Approx(0.8).epsilon(1e-15));
  CHECK(r.per_type[3].support == 3);

  // Two ranks' halves, counted over the label set's types, summed as an all-reduce would.
  const auto types = ft::entity_types({"O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER",
                                       "B-DATE", "I-DATE"});
  const auto a = ft::count_entities({truth[0], truth[1]}, {pred[0], pred[1]}, types);
  const auto b = ft::count_entities({truth[2]}, {pred[2]}, types);
  auto summed = a.to_vector();
  const auto bv = b.to_vector();
  for (size_t i = 0; i < summed.size(); ++i) summed[i] += bv[i];
  const auto merged = ft::entity_report(ft::EntityCounts::from_vector(types, summed));
  auto added = a;
  added += b;
  CHECK(ft::entity_report(added).f1 == merged.f1);
  CHECK(merged.f1 == r.f1);
  CHECK(merged.accuracy == r.accuracy);
  CHECK(merged.per_type.size() == 4u);  // DATE has no entity on either side: not listed, as seqeval
  CHECK(ft_test::error_of([&] { ft::count_entities({{"B-GPE"}}, {{"O"}}, types); }) ==
        "entity metrics: sentence 1: entity type 'GPE' is not among the 5 types counted; count with entity_types "
        "of the label names that produced the tags");
  CHECK(ft_test::error_of([&] { ft::count_entities({{"O"}}, {{"O", "O"}}); }) ==
        "entity metrics: sentence 1 has 1 true tags but 2 predicted; give one prediction per tag");
  CHECK(ft_test::error_of([&] { ft::EntityCounts::from_vector(types, {1, 2}); }).rfind("entity counts: 2 numbers", 0) ==
        0);
  const auto none = ft::entity_report(ft::count_entities({}, {}));
  CHECK(none.f1 == 0.0);
  CHECK(none.accuracy == 0.0);
}

TEST_CASE("group_entities: the pipeline's simple aggregation") {
  const Words names{"B-LOC", "B-PER", "I-LOC", "I-PER", "O"};
  const std::string text = "Jean lives in Montr\xC3\xA9" "al";  // é is 2 bytes: Montréal is [14, 23)
  // [CLS] Je ##an lives in Mont ##réal [SEP]
  ft::TokenPredictions p;
  p.labels = {4, 1, 3, 4, 4, 0, 2, 4};
  p.word_ids = {-1, 0, 0, 1, 2, 3, 3, -1};
  p.offsets = {{0, 0}, {0, 2}, {2, 4}, {5, 10}, {11, 13}, {14, 18}, {18, 23}, {0, 0}};
  const std::vector<float> own{0.5f, 0.875f, 0.75f, 0.5f, 0.5f, 0.625f, 0.5f, 0.5f};
  for (size_t t = 0; t < own.size(); ++t) {
    std::vector<float> row(names.size(), (1.0f - own[t]) / 4);
    row[static_cast<size_t>(p.labels[t])] = own[t];
    p.scores.push_back(row);
  }
  // transformers 5.24.0's TokenClassificationPipeline.group_entities on these
  // tokens (MiniLM's tokenizer; O groups filtered as postprocess does) gives
  // PER 0.8125 [0, 4) and LOC 0.5625 [14, 23), with the words "jean" and
  // "montreal" rebuilt from the tokens; the second labelling below gives
  // PER [0, 2), PER [2, 10), LOC [11, 13), LOC [18, 23).
  const auto e = ft::group_entities(text, p, names);
  REQUIRE(e.size() == 2u);
  CHECK(e[0].entity_group == "PER");
  CHECK(e[0].score == doctest::Approx((0.875 + 0.75) / 2));
  CHECK(e[0].word == "Jean");
  CHECK(e[0].start == 0);
  CHECK(e[0].end == 4);
  CHECK(e[1].entity_group == "LOC");
  CHECK(e[1].score == doctest::Approx((0.625 + 0.5) / 2));
  CHECK(e[1].word == "Montr\xC3\xA9" "al");
  CHECK(e[1].start == 14);
  CHECK(e[1].end == 23);

  // B- always starts a group; I- of another type starts one named after it.
  p.labels = {4, 1, 1, 3, 2, 4, 2, 4};  // Je B-PER, ##an B-PER, lives I-PER, in I-LOC, Mont O, ##réal I-LOC
  const auto f = ft::group_entities(text, p, names);
  REQUIRE(f.size() == 4u);
  CHECK(f[0].word == "Je");
  CHECK(f[1].word == "an lives");
  CHECK(f[1].start == 2);
  CHECK(f[1].end == 10);
  CHECK(f[2].entity_group == "LOC");
  CHECK(f[2].word == "in");
  CHECK(f[3].word == "r\xC3\xA9" "al");  // I- after O starts a group

  p.offsets[3] = {5, 99};
  CHECK(ft_test::error_of([&] { ft::group_entities(text, p, names); }) ==
        "group_entities: token 3 has offsets [5, 99) outside the text's 23 bytes");
  p.word_ids.pop_back();
  CHECK(ft_test::error_of([&] { ft::group_entities(text, p, names); }) ==
        "group_entities: 8 labels, 8 score rows, 8 offsets and 7 word ids; give one of each per token");
}
