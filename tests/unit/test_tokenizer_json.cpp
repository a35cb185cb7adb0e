// tokenizer.json files of every model ft reads, against the ids the Rust
// `tokenizers` library gives (scripts/hf-tokenizer-fixtures.py; the files and
// what each exercises are in tests/data/hf/README.md). No Python runs here.
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/model/model.h"
#include "ft/tasks/run_inputs.h"
#include "ft/io/safetensors.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft_fixture_texts.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace fsys = std::filesystem;
using nlohmann::json;

namespace {

fsys::path fixtures() { return ft_test::source_dir() / "tests/data/hf/tokenizers"; }

const char* const kFiles[] = {"roberta-bpe",      "modern-bpe",      "wordend-bpe",   "xlmr-unigram",
                              "xlmr-precompiled", "deberta-unigram", "deberta-v3-hf5"};

json read_json(const fsys::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in, "cannot read " << p.string());
  return json::parse(in);
}

// `name`'s tokenizer.json with one key changed, written to `dir`; returns the path.
std::string edited(const ft_test::TempDir& dir, const std::string& name, const std::function<void(json&)>& edit) {
  json j = read_json(fixtures() / (name + ".tokenizer.json"));
  edit(j);
  const fsys::path p = dir.path() / (name + ".tokenizer.json");
  std::ofstream(p) << j.dump();
  return p.string();
}

// The IMDB texts come from the fetched data (scripts/fetch-data.sh), not from the clone.
bool have_imdb() {
  if (fsys::exists(ft_test::source_dir() / "data/imdb/train.jsonl")) return true;
  ft_test::skip("needs data/imdb/train.jsonl (scripts/fetch-data.sh)");
  return false;
}

}  // namespace

TEST_CASE("every committed tokenizer.json gives the ids of tokenizers: singles and pairs, 128 and 32, padded") {
  if (!have_imdb()) return;
  const bool weibo = ft_test::have_shared("data/weibo-emotion");
  if (!weibo) ft_test::skip("needs ../shared/data/weibo-emotion for the Weibo texts (IMDB still compared)");
  int64_t total_ids = 0;
  for (const std::string name : kFiles) {
    const auto fx = read_json(fixtures() / (name + ".ids.json"));
    const auto tok = ft::load_tokenizer_json((fixtures() / fx.at("tokenizer").get<std::string>()).string());
    const auto [compared, mismatched] = ft_test::compare_fixture_ids(*tok, fx, name, weibo);
    CHECK_MESSAGE(mismatched == 0, name);
    // 64 singles and 63 pairs per source at 128 and 32 tokens, every one padded to its length.
    CHECK(compared == (weibo ? 2 : 1) * (64 + 63) * (128 + 32));
    total_ids += compared;
  }
  CHECK(total_ids == static_cast<int64_t>(std::size(kFiles)) * (weibo ? 2 : 1) * (64 + 63) * (128 + 32));
}

TEST_CASE("Oniguruma reads GPT-2's pattern as ft's own scanner does, and tokenizers' other patterns") {
  if (!have_imdb()) return;
  const bool weibo = ft_test::have_shared("data/weibo-emotion");
  const ft_test::TempDir dir("tokjson-onig");
  // The same expression in a group is not the exact string ft scans by hand: Oniguruma runs it.
  const auto onig = ft::load_tokenizer_json(edited(dir, "modern-bpe", [](json& j) {
    auto& re = j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
    re = "(?:" + re.get<std::string>() + ")";
  }));
  const auto [compared, mismatched] =
      ft_test::compare_fixture_ids(*onig, read_json(fixtures() / "modern-bpe.ids.json"), "modern-bpe on Oniguruma", weibo);
  CHECK(mismatched == 0);
  CHECK(compared > 0);
  // \s is Unicode's White_Space, \A the text's start, and an empty match inserts the replacement.
  const auto replaced = ft::load_tokenizer_json(edited(dir, "xlmr-unigram", [](json& j) {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "Replace"}, {"pattern", {{"Regex", "\\s{2,}|[\\n\\r\\t]"}}}, {"content", " "}},
                         {{"type", "Replace"}, {"pattern", {{"Regex", "\\Ax*"}}}, {"content", "the "}}}}};
  }));
  CHECK(replaced->encode("film\xE3\x80\x80\xC2\xA0good\nday", std::nullopt, 0, false).input_ids ==
        replaced->encode("film good day", std::nullopt, 0, false).input_ids);
  CHECK(replaced->tokens()[replaced->encode("film", std::nullopt, 0, false).input_ids[1]] == "▁the");
}

TEST_CASE("special ids the pipeline needs come from the post-processor and the usual names") {
  const auto roberta = ft::load_tokenizer_json((fixtures() / "roberta-bpe.tokenizer.json").string());
  CHECK(roberta->cls_id() == 0);
  CHECK(roberta->pad_id() == 1);
  CHECK(roberta->sep_id() == 2);
  CHECK(roberta->mask_id() == std::optional<int64_t>(4));
  CHECK(roberta->unk_id() == -1);  // byte-level: every byte has a token
  CHECK(roberta->vocab_size() == 5000);
  CHECK(roberta->token_to_id("<mask>") == std::optional<int64_t>(4));
  // RoBERTa's pair: <s> A </s></s> B </s>, all type ids 0.
  const auto pair = roberta->encode("a", std::string_view("b"), 0, false);
  CHECK(pair.input_ids == std::vector<int64_t>{0, *roberta->token_to_id("a"), 2, 2, *roberta->token_to_id("b"), 2});
  CHECK(pair.token_type_ids == std::vector<int64_t>(6, 0));

  const auto xlmr = ft::load_tokenizer_json((fixtures() / "xlmr-unigram.tokenizer.json").string());
  CHECK(xlmr->unk_id() == 3);
  CHECK(xlmr->mask_id() == std::optional<int64_t>(5000));
  CHECK(xlmr->vocab_size() == 5001);  // <mask> comes after the pieces
  CHECK(xlmr->tokens()[5000] == "<mask>");
  // A character no piece covers is <unk>; the mask token takes the space before it (lstrip).
  const auto masked = xlmr->encode("\xE2\x98\x83 <mask>", std::nullopt, 0, false);
  CHECK(masked.input_ids == std::vector<int64_t>{0, 4, 3, 5000, 2});  // <s> ▁ <unk> <mask> </s>

  const auto wordend = ft::load_tokenizer_json((fixtures() / "wordend-bpe.tokenizer.json").string());
  CHECK(wordend->cls_id() == 2);
  CHECK(wordend->sep_id() == 3);
  CHECK(wordend->pad_id() == 0);
  CHECK(wordend->unk_id() == 1);
  CHECK(ft_test::error_of([&] { wordend->encode("a", std::string_view("b"), 2, false); }) ==
        "max_length 2 leaves no room for the 3 special tokens; use >= 3");
}

TEST_CASE("Precompiled folds what NFKC folds; WordPiece files stay WordPieceTokenizer") {
  const auto tok = ft::load_tokenizer_json((fixtures() / "xlmr-precompiled.tokenizer.json").string());
  // Full-width letters, a circled digit and a no-break space are SentencePiece's nmt_nfkc cases.
  const auto folded = tok->encode("\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3\xC2\xA0\xE2\x91\xA0", std::nullopt, 0, false);
  CHECK(folded.input_ids == tok->encode("ABC 1", std::nullopt, 0, false).input_ids);
  CHECK(folded.input_ids == std::vector<int64_t>{0, 69, 427, 307, 415, 2});
  const fsys::path minilm = ft_test::source_dir() / "data/all-minilm-l6-v2/tokenizer.json";
  if (!fsys::exists(minilm)) {
    ft_test::skip("needs data/all-minilm-l6-v2 (scripts/fetch-data.sh) for the WordPiece half");
    return;
  }
  const auto wp = ft::load_tokenizer_json(minilm.string());
  REQUIRE(dynamic_cast<const ft::WordPieceTokenizer*>(wp.get()) != nullptr);
  // bert-base-uncased: [CLS] hello world [SEP].
  CHECK(wp->encode("Hello world", std::nullopt, 0, false).input_ids == std::vector<int64_t>{101, 7592, 2088, 102});
}

TEST_CASE("a model directory's BPE or Unigram tokenizer.json is the run's tokenizer and `ft tokenize` uses it") {
  if (!have_imdb()) return;
  const ft_test::TempDir dir("tokjson");
  fsys::copy_file(fixtures() / "roberta-bpe.tokenizer.json", dir.path() / "tokenizer.json");
  const auto tok = ft::load_model_dir_tokenizer(dir.path().string());
  REQUIRE(tok);
  CHECK(tok->vocab_size() == 5000);
  const auto fx = read_json(fixtures() / "roberta-bpe.ids.json");
  const auto& imdb = fx.at("sources").at(0);
  const auto texts = ft_test::fixture_texts(imdb);
  // Row 0 at 128 tokens, without its padding: what `ft tokenize --max-length 128` prints.
  auto want = imdb.at("cases").at(0).at("input_ids").at(0).get<std::vector<int64_t>>();
  while (!want.empty() && want.back() == 1) want.pop_back();
  CHECK(tok->encode(texts[0], std::nullopt, 128, false).input_ids == want);
  std::ofstream(dir.path() / "in.txt") << texts[0] << "\n";
  const auto out = ft_test::run_ok(
      fmt::format("tokenize --model {} --max-length 128 < {}", dir.path().string(), (dir.path() / "in.txt").string()));
  // The one JSON line (anything else ft printed is not ids).
  const auto line = out.substr(out.find('{'), out.find('\n', out.find('{')) - out.find('{'));
  CHECK(json::parse(line).at("input_ids").get<std::vector<int64_t>>() == want);
}

TEST_CASE("a run from a directory with a BPE tokenizer.json trains on its ids; the checkpoint carries the file") {
  const ft_test::TempDir dir("tokjson-run");
  ft_test::write_tiny_task(dir.path());
  fsys::remove(dir.path() / "vocab.txt");
  fsys::copy_file(fixtures() / "roberta-bpe.tokenizer.json", dir.path() / "tokenizer.json");
  json config = read_json(dir.path() / "config.json");
  config["vocab_size"] = 5000;
  std::ofstream(dir.path() / "config.json") << config.dump(2);
  // A model directory has weights: ft's own random init, as a pretrained checkpoint would ship them.
  const ft::EncoderModel model(ft::BertConfig::from_json_file((dir.path() / "config.json").string()));
  ft::safetensors::save((dir.path() / "model.safetensors").string(), model.weights(), {{"format", "pt"}});
  const auto out = dir.path() / "out";
  ft_test::run_ok(fmt::format("run --config {}/run.yaml --set model.config={} --set data.vocab= --max-steps 2 "
                              "--output-dir {}",
                              dir.path().string(), dir.path().string(), out.string()));
  const auto final_dir = out / "final";
  CHECK(ft_test::read_text(final_dir / "tokenizer.json") ==
        ft_test::read_text(fixtures() / "roberta-bpe.tokenizer.json"));
  CHECK_FALSE(fsys::exists(final_dir / "vocab.txt"));
  const json tc = read_json(final_dir / "tokenizer_config.json");
  CHECK(tc.at("tokenizer_class") == "PreTrainedTokenizerFast");
  CHECK(tc.at("model_max_length") == 12);
  CHECK(tc.at("pad_token") == "<pad>");
  CHECK(tc.at("cls_token") == "<s>");
  CHECK(tc.at("sep_token") == "</s>");
  CHECK(tc.at("mask_token") == "<mask>");
  CHECK_FALSE(tc.contains("unk_token"));  // byte-level BPE has none
  const auto predicted = ft_test::run_ok(fmt::format("predict --checkpoint {} \"the film was good\"", final_dir.string()));
  CHECK(predicted.find("\"text\":\"the film was good\"") != std::string::npos);
}

TEST_CASE("tokenizer.json settings ft does not implement: one line naming the key and the value") {
  const ft_test::TempDir dir("tokjson-bad");
  auto error = [&](const std::string& name, const std::function<void(json&)>& edit) {
    const std::string path = edited(dir, name, edit);
    const std::string msg = ft_test::error_of([&] { ft::load_tokenizer_json(path); });
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.rfind(path + ": ", 0) == 0);
    return msg.substr(path.size() + 2);
  };
  CHECK(error("roberta-bpe", [](json& j) { j["model"]["type"] = "WordLevel"; }) ==
        "model.type: 'WordLevel' is not supported; ft reads WordPiece, BPE and Unigram");
  CHECK(error("xlmr-unigram", [](json& j) { j["normalizer"]["normalizers"][0] = {{"type", "Nmt"}}; }) ==
        "normalizer.normalizers[0].type: 'Nmt' is not supported; ft reads NFC, NFD, NFKC, NFKD, Lowercase, "
        "Strip, StripAccents, Replace, Prepend, Precompiled and Sequence (BertNormalizer with WordPiece models)");
  CHECK(error("xlmr-precompiled", [](json& j) { j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "AAAAAA=="; }) ==
        "normalizer.normalizers[0].precompiled_charsmap: its trie size 0 does not fit the 4 bytes of the map");
  CHECK(error("roberta-bpe", [](json& j) { j["pre_tokenizer"] = {{"type", "UnicodeScripts"}}; }) ==
        "pre_tokenizer.type: 'UnicodeScripts' is not supported; ft reads ByteLevel, Metaspace, Whitespace, "
        "WhitespaceSplit, BertPreTokenizer, Punctuation, Digits, CharDelimiterSplit, Split and Sequence");
  CHECK(error("deberta-unigram", [](json& j) { j["post_processor"]["type"] = "Wrapper"; }) ==
        "post_processor.type: 'Wrapper' is not supported; ft reads BertProcessing, RobertaProcessing, "
        "TemplateProcessing, ByteLevel and Sequence");
  CHECK(error("roberta-bpe", [](json& j) { j["model"]["dropout"] = 0.1; }) ==
        "model.dropout: 0.1 is not supported; ft tokenizes deterministically (use null)");
  CHECK(error("modern-bpe", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+"; }) ==
        "pre_tokenizer.pretokenizers[0].pattern.Regex: the regular expression '(\\p{L}+' does not compile: end "
        "pattern with unmatched parenthesis");
  CHECK(error("xlmr-unigram", [](json& j) { j["normalizer"]["normalizers"][1]["pattern"]["Regex"] = "\\p{Nope}"; }) ==
        "normalizer.normalizers[1].pattern.Regex: the regular expression '\\p{Nope}' does not compile: invalid "
        "character property name {Nope}");
  CHECK(error("xlmr-unigram", [](json& j) { j["pre_tokenizer"]["prepend_scheme"] = "sometimes"; }) ==
        "pre_tokenizer.prepend_scheme: 'sometimes' is not supported; ft reads always, first and never");
  CHECK(error("roberta-bpe", [](json& j) { j["model"]["merges"][0] = {"Ġ", "no-such-token"}; }) ==
        "model.merges[0]: 'Ġ' + 'no-such-token' -> 'Ġno-such-token': a token is not in model.vocab");
}
