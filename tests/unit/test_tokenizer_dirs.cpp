// Model directories without a tokenizer.json (a SentencePiece model, or
// RoBERTa's vocab.json + merges.txt) against the ids transformers'
// AutoTokenizer gives for them (scripts/hf-tokenizer-fixtures.py; the
// directories are described in tests/data/hf/README.md), what a directory
// missing its weights or tokenizer is told, and the tokenizer_config.json a
// checkpoint of such a directory carries. No Python runs here.
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/checkpoint/checkpoint.h"  // before doctest: LibTorch's c10 logging defines its own CHECK
#include "ft/config/config.h"
#include "ft/tasks/run_inputs.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft_fixture_texts.h"
#include "ft_test.h"

namespace fsys = std::filesystem;
using nlohmann::json;

namespace {

fsys::path dirs() { return ft_test::source_dir() / "tests/data/hf/tokenizers/dirs"; }

// CamemBERT's directory is XLM-R's model file under CamemBERT's config (not committed twice).
fsys::path camembert_dir(const ft_test::TempDir& tmp) {
  const fsys::path d = tmp.path() / "camembert-spm";
  fsys::create_directories(d);
  fsys::copy_file(dirs() / "xlmr-spm/sentencepiece.bpe.model", d / "sentencepiece.bpe.model");
  std::ofstream(d / "config.json") << R"({"model_type": "camembert"})";
  return d;
}

// A copy of dirs/`name` with tokenizer_config.json replaced by `config`.
fsys::path with_config(const ft_test::TempDir& tmp, const std::string& name, const json& config) {
  static int copies = 0;
  const fsys::path d = tmp.path() / fmt::format("{}-{}", name, ++copies);
  fsys::copy(dirs() / name, d);
  std::ofstream(d / "tokenizer_config.json") << config.dump();
  return d;
}

std::vector<int64_t> ids(const ft::Tokenizer& tok, const std::string& text) {
  return tok.encode(text, std::nullopt, 0, false).input_ids;
}

}  // namespace

TEST_CASE("every converted model directory gives the ids of AutoTokenizer: singles and pairs, 128 and 32, padded") {
  if (!fsys::exists(ft_test::source_dir() / "data/imdb/train.jsonl")) {
    ft_test::skip("needs data/imdb/train.jsonl (scripts/fetch-data.sh)");
    return;
  }
  const bool weibo = ft_test::have_shared("data/weibo-emotion");
  if (!weibo) ft_test::skip("needs ../shared/data/weibo-emotion for the Weibo texts (IMDB still compared)");
  const ft_test::TempDir tmp("tokdirs");
  for (const std::string name : {"deberta-v3-spm", "xlmr-spm", "camembert-spm", "roberta-vocab-merges"}) {
    const fsys::path dir = name == "camembert-spm" ? camembert_dir(tmp) : dirs() / name;
    const auto tok = ft::load_model_dir_tokenizer(dir.string());
    REQUIRE_MESSAGE(tok, name);
    std::ifstream in(dirs() / (name + ".ids.json"));
    const auto [compared, mismatched] = ft_test::compare_fixture_ids(*tok, json::parse(in), name, weibo);
    CHECK_MESSAGE(mismatched == 0, name);
    CHECK(compared == (weibo ? 2 : 1) * (64 + 63) * (128 + 32));
  }
}

TEST_CASE("each family's layout: fairseq's ids for XLM-R and CamemBERT, DeBERTa's [MASK] after the pieces") {
  const ft_test::TempDir tmp("tokdirs-layout");
  const auto deberta = ft::load_model_dir_tokenizer((dirs() / "deberta-v3-spm").string());
  CHECK(deberta->vocab_size() == 2001);
  CHECK(deberta->pad_id() == 0);
  CHECK(deberta->cls_id() == 1);
  CHECK(deberta->sep_id() == 2);
  CHECK(deberta->unk_id() == 3);
  CHECK(deberta->mask_id() == std::optional<int64_t>(2000));
  // Runs of whitespace and line breaks are one space (the Replace regex), trailing ones go.
  CHECK(ids(*deberta, "a  good\n\tfilm  ") == ids(*deberta, "a good film"));
  CHECK(deberta->config_keys().tokenizer_class == "DebertaV2Tokenizer");  // from config.json's model_type
  CHECK(deberta->config_keys().add_prefix_space == std::optional<bool>(true));
  CHECK(deberta->config_keys().do_lower_case == std::optional<bool>(false));

  const auto xlmr = ft::load_model_dir_tokenizer((dirs() / "xlmr-spm").string());
  CHECK(xlmr->vocab_size() == 2002);  // <s> <pad> </s> <unk>, SentencePiece's pieces from id 3 on, <mask>
  CHECK(xlmr->cls_id() == 0);
  CHECK(xlmr->pad_id() == 1);
  CHECK(xlmr->sep_id() == 2);
  CHECK(xlmr->unk_id() == 3);
  CHECK(xlmr->mask_id() == std::optional<int64_t>(2001));
  CHECK(xlmr->config_keys().tokenizer_class == "XLMRobertaTokenizer");

  const auto camembert = ft::load_model_dir_tokenizer(camembert_dir(tmp).string());
  CHECK(camembert->vocab_size() == 2005);
  CHECK(camembert->cls_id() == 5);  // SentencePiece's own <s>, after the NOTUSED placeholders
  CHECK(camembert->sep_id() == 6);
  CHECK(camembert->pad_id() == 1);
  CHECK(camembert->unk_id() == 3);
  CHECK(camembert->mask_id() == std::optional<int64_t>(2004));
  // The same piece, three further on than in XLM-R.
  CHECK(ids(*camembert, "film")[1] == ids(*xlmr, "film")[1] + 3);

  const auto roberta = ft::load_model_dir_tokenizer((dirs() / "roberta-vocab-merges").string());
  CHECK(roberta->vocab_size() == 5000);
  CHECK(roberta->unk_id() == -1);
  CHECK(roberta->config_keys().trim_offsets == std::optional<bool>(true));
  CHECK(roberta->config_keys().add_prefix_space == std::optional<bool>(false));
  // The converted tokenizer.json is what a checkpoint carries; it reads back the same.
  const fsys::path saved = tmp.path() / "saved.tokenizer.json";
  std::ofstream(saved) << roberta->tokenizer_json();
  CHECK(ids(*ft::load_tokenizer_json(saved.string()), "A film, 1999.") == ids(*roberta, "A film, 1999."));
}

TEST_CASE("tokenizer_config.json settings the family's class reads") {
  const ft_test::TempDir tmp("tokdirs-settings");
  const auto plain = ft::load_model_dir_tokenizer((dirs() / "deberta-v3-spm").string());
  const auto lower = ft::load_model_dir_tokenizer(
      with_config(tmp, "deberta-v3-spm", {{"do_lower_case", true}, {"split_by_punct", true}}).string());
  CHECK(ids(*lower, "GOOD FILM") == ids(*plain, "good film"));
  CHECK(ids(*lower, "good,film") == ids(*plain, "good , film"));
  // add_prefix_space false: only the text's first word gets the word marker.
  const auto first = ft::load_model_dir_tokenizer(
      with_config(tmp, "deberta-v3-spm", {{"add_prefix_space", false}, {"mask_token", "<m>"}}).string());
  CHECK(ids(*first, "film") == ids(*plain, "film"));
  CHECK(first->tokens()[2000] == "<m>");  // the named mask token, added after the pieces
  const auto prefixed = ft::load_model_dir_tokenizer(
      with_config(tmp, "roberta-vocab-merges", {{"add_prefix_space", true}}).string());
  const auto roberta = ft::load_model_dir_tokenizer((dirs() / "roberta-vocab-merges").string());
  CHECK(ids(*prefixed, "film") == ids(*roberta, " film"));
  CHECK(prefixed->config_keys().tokenizer_class == "RobertaTokenizer");
}

TEST_CASE("a directory ft cannot convert: one line naming the file and what to do") {
  const ft_test::TempDir tmp("tokdirs-bad");
  const fsys::path d = tmp.path() / "m";
  fsys::create_directories(d);
  CHECK(ft::load_model_dir_tokenizer(d.string()) == nullptr);
  fsys::copy_file(dirs() / "deberta-v3-spm/spm.model", d / "spm.model");
  CHECK(ft_test::error_of([&] { ft::load_model_dir_tokenizer(d.string()); }) ==
        d.string() + ": a tokenizer model file is here but not which family it belongs to; set model_type in "
                     "config.json (deberta-v2, xlm-roberta, camembert, roberta) or tokenizer_class in "
                     "tokenizer_config.json");
  std::ofstream(d / "tokenizer_config.json") << R"({"tokenizer_class": "T5TokenizerFast"})";
  CHECK(ft_test::error_of([&] { ft::load_model_dir_tokenizer(d.string()); }) ==
        (d / "tokenizer_config.json").string() +
            ": tokenizer_class: 'T5Tokenizer' has no tokenizer.json here, and ft converts only DebertaV2Tokenizer, "
            "XLMRobertaTokenizer, CamembertTokenizer and RobertaTokenizer directories; save a tokenizer.json with "
            "transformers");
  std::ofstream(d / "tokenizer_config.json") << R"({"tokenizer_class": "XLMRobertaTokenizer"})";
  CHECK(ft_test::error_of([&] { ft::load_model_dir_tokenizer(d.string()); }) ==
        d.string() + ": XLMRobertaTokenizer reads sentencepiece.bpe.model, which this directory lacks; copy the "
                     "file(s) saved with the model here");
  std::ofstream(d / "tokenizer_config.json") << R"({"tokenizer_class": "DebertaV2Tokenizer"})";
  std::ofstream(d / "spm.model") << "not a model";
  CHECK(ft_test::error_of([&] { ft::load_model_dir_tokenizer(d.string()); }) ==
        (d / "spm.model").string() +
            ": not a SentencePiece model (no pieces could be read); it should be the .model file SentencePiece "
            "trained");
  const fsys::path r = tmp.path() / "r";
  fsys::copy(dirs() / "roberta-vocab-merges", r);
  std::ofstream(r / "merges.txt") << "#version: 0.2\nG h\nabc\n";
  CHECK(ft_test::error_of([&] { ft::load_model_dir_tokenizer(r.string()); }) ==
        (r / "merges.txt").string() + ": line 3: 'abc' is not two tokens separated by one space");
}

TEST_CASE("a model directory missing its weights or its tokenizer: weights first, never `ft vocab build`") {
  const ft_test::TempDir tmp("tokdirs-missing");
  const fsys::path d = tmp.path() / "model";
  fsys::create_directories(d);
  fsys::copy_file(ft_test::source_dir() / "tests/data/hf/families/roberta/config.json", d / "config.json");
  std::ofstream(tmp.path() / "train.jsonl") << R"({"text": "a good film", "label": "pos"})" << "\n"
                                            << R"({"text": "a bad film", "label": "neg"})" << "\n";
  // Validation leaves a model directory to the run, which names what it lacks.
  const std::string yaml = fmt::format("model:\n  config: {}\ndata:\n  train: {}\n  dev_fraction: 0\n  max_seq_len: 64\n", d.string(),
                                       (tmp.path() / "train.jsonl").string());
  const ft::RunConfig config = ft::config_from_yaml_string(yaml, "run.yaml", {});
  const std::string no_weights = ft_test::error_of([&] { ft::prepare_inputs(config); });
  CHECK(no_weights.find(d.string() + " has no model.safetensors or pytorch_model.bin") != std::string::npos);
  CHECK(no_weights.find("vocab") == std::string::npos);
  fsys::copy_file(ft_test::source_dir() / "tests/data/hf/families/roberta/model.safetensors", d / "model.safetensors");
  const std::string no_tokenizer = ft_test::error_of([&] { ft::prepare_inputs(config); });
  CHECK(no_tokenizer == "model.config: no tokenizer.json, vocab.txt, vocab.json+merges.txt or "
                        "spm.model/sentencepiece.bpe.model in " +
                            d.string() +
                            "; copy the tokenizer files saved with the model into it, or point data.vocab at the "
                            "model's vocab.txt");
  CHECK(no_tokenizer.find("vocab build") == std::string::npos);
  // With vocab.json + merges.txt it reads.
  for (const char* f : {"vocab.json", "merges.txt"}) fsys::copy_file(dirs() / "roberta-vocab-merges" / f, d / f);
  CHECK(ft::prepare_inputs(config).tokenizer->vocab_size() == 5000);
}

TEST_CASE("a checkpoint of a converted directory keeps its tokenizer class and the keys that class reads") {
  const ft_test::TempDir tmp("tokdirs-ckpt");
  const auto tok = ft::load_model_dir_tokenizer(
      with_config(tmp, "roberta-vocab-merges",
                  {{"tokenizer_class", "RobertaTokenizerFast"}, {"add_prefix_space", true}, {"trim_offsets", false},
                   {"model_max_length", 512}})
          .string());
  ft::CheckpointData data;
  data.config = ft::BertConfig::from_json_file((ft_test::source_dir() / "tests/data/hf/families/roberta/config.json").string());
  data.tokenizer = tok.get();
  data.model_max_length = 48;  // the run's max_seq_len: what ft eval cuts at
  const fsys::path out = tmp.path() / "ckpt";
  ft::save_checkpoint(out, data);
  std::ifstream in(out / "tokenizer_config.json");
  const json tc = json::parse(in);
  CHECK(tc.at("tokenizer_class") == "RobertaTokenizerFast");
  CHECK(tc.at("add_prefix_space") == true);
  CHECK(tc.at("trim_offsets") == false);
  CHECK(tc.at("model_max_length") == 48);
  CHECK(tc.at("mask_token") == "<mask>");
  // The checkpoint reads back as the same tokenizer (tokenizer.json + its config).
  const auto again = ft::load_model_dir_tokenizer(out.string());
  CHECK(ids(*again, "film") == ids(*tok, "film"));
  CHECK(again->config_keys().add_prefix_space == std::optional<bool>(true));

  // A bare tokenizer.json directory still saves PreTrainedTokenizerFast.
  const auto bare = ft::load_tokenizer_json(
      (ft_test::source_dir() / "tests/data/hf/tokenizers/roberta-bpe.tokenizer.json").string());
  data.tokenizer = bare.get();
  ft::save_checkpoint(tmp.path() / "bare", data);
  std::ifstream bare_in(tmp.path() / "bare" / "tokenizer_config.json");
  const json bare_tc = json::parse(bare_in);
  CHECK(bare_tc.at("tokenizer_class") == "PreTrainedTokenizerFast");
  CHECK_FALSE(bare_tc.contains("add_prefix_space"));
}
