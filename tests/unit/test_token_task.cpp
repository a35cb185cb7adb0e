// `ft run --task token-classification` end to end on the tiny task's
// vocabulary: a tagger trained from word/tag lines, its checkpoint (a
// BertForTokenClassification directory), ft eval's entity scores, ft
// predict's entities with character offsets, class weights under any split
// of the batch, and the bad inputs' lines.
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft_run.h"
#include "ft_tiny_task.h"

namespace fsys = std::filesystem;
using json = nlohmann::json;

namespace {

// The tiny task's sentences, "good" tagged POS and "bad" NEG (a run of them one entity).
void write_tags(const fsys::path& file, int copies) {
  const char* const sentences[] = {"the film was good", "very good plot", "good good film !", "a bad film",
                                   "the plot was very bad", "bad films", "a very good plot !", "the bad film"};
  std::ofstream out(file);
  for (int c = 0; c < copies; ++c) {
    for (const char* s : sentences) {
      std::istringstream words(s);
      json tokens = json::array(), tags = json::array();
      std::string prev;
      for (std::string w; words >> w; prev = w) {
        tokens.push_back(w);
        const std::string type = w == "good" ? "POS" : w.rfind("bad", 0) == 0 ? "NEG" : "";
        tags.push_back(type.empty() ? "O" : (prev == w ? "I-" : "B-") + type);
      }
      out << json{{"tokens", tokens}, {"ner_tags", tags}}.dump() << "\n";
    }
  }
}

std::string train_args(const fsys::path& dir, int steps, const std::string& extra = "") {
  return fmt::format(
      "run --config {0}/run.yaml --task token-classification --set data.train={0}/tags.jsonl "
      "--set data.dev={0}/tags.jsonl --set data.labels=[] --set model.dropout=0 "
      "--max-steps {1} --output-dir {0}/out --metrics-out {0}/m.jsonl {2}",
      dir.string(), steps, extra);
}

}  // namespace

TEST_CASE("a tagger trains, saves as BertForTokenClassification, evaluates with seqeval and predicts entities") {
  ft_test::TempDir tmp("token-task");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  write_tags(dir / "tags.jsonl", 4);
  ft_test::run_ok(train_args(dir, 200));
  const json summary = ft_test::summary_of(dir / "m.jsonl");
  INFO(summary.dump());
  CHECK(summary.at("eval_f1").get<double>() == doctest::Approx(1.0));
  CHECK(summary.at("eval_accuracy").get<double>() == doctest::Approx(1.0));
  const json config = json::parse(ft_test::read_text(dir / "out/final/config.json"));
  CHECK(config.at("architectures") == json::array({"BertForTokenClassification"}));
  // The sorted tags the file holds (it has no I-NEG), as run_ner.py lists them.
  CHECK(config.at("id2label") == json{{"0", "B-NEG"}, {"1", "B-POS"}, {"2", "I-POS"}, {"3", "O"}});
  CHECK_FALSE(config.contains("problem_type"));

  const auto eval = ft_test::run_ft(fmt::format("eval --checkpoint {0}/out/final --data {0}/tags.jsonl", dir.string()));
  INFO(eval.output);
  REQUIRE(eval.exit_code == 0);
  CHECK(eval.output.find("f1 1.0000") != std::string::npos);
  CHECK(eval.output.find("token accuracy") != std::string::npos);

  // Offsets are characters: "é" before the entity moves it by one, not two.
  const auto pred = ft_test::run_ft(
      fmt::format("predict --checkpoint {}/out/final 'the film was good' 'good good film !' 'é, the film was good'", dir.string()));
  INFO(pred.output);
  REQUIRE(pred.exit_code == 0);
  std::istringstream lines(pred.output);
  std::vector<json> records;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') records.push_back(json::parse(line));
  REQUIRE(records.size() == 3);
  const json& good = records[0].at("entities");
  REQUIRE(good.size() == 1);
  CHECK(good[0].at("entity_group") == "POS");
  CHECK(good[0].at("word") == "good");
  CHECK(good[0].at("start") == 13);
  CHECK(good[0].at("end") == 17);
  CHECK(good[0].at("score").get<double>() > 0.5);
  const json& twice = records[1].at("entities");
  REQUIRE(twice.size() == 1);  // B-POS I-POS: one entity
  CHECK(twice[0].at("entity_group") == "POS");
  CHECK(twice[0].at("word") == "good good");
  CHECK(twice[0].at("start") == 0);
  CHECK(twice[0].at("end") == 9);
  const json& accented = records[2].at("entities");
  REQUIRE(accented.size() == 1);
  CHECK(accented[0].at("word") == "good");
  CHECK(accented[0].at("start") == 16);  // 17 in bytes
  CHECK(accented[0].at("end") == 20);
}

TEST_CASE("bad token-classification input: one line naming the file, the line or the task") {
  ft_test::TempDir tmp("token-task-bad");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  struct Bad {
    const char* rows;
    const char* expect;
  };
  const Bad cases[] = {
      {R"({"tokens": ["a", "good", "film"], "ner_tags": ["O", "POS", "O"]})",
       "tags.jsonl: line 1: tag 'POS' is not an IOB2 tag (O, B-<type>, I-<type>)"},
      {R"({"tokens": ["a", "good", "film"], "ner_tags": ["O", "B-POS"]})",
       "tags.jsonl: line 1: 3 words but 2 tags; give one tag per word"},
      {R"({"text": "a good film", "label": "pos"})", "tags.jsonl: line 1: no list 'tokens'"},
  };
  for (const auto& c : cases) {
    std::ofstream(dir / "tags.jsonl") << c.rows << "\n";
    const auto run = ft_test::run_ft(train_args(dir, 1, "--overwrite-output-dir"));
    INFO(run.output);
    CHECK(run.exit_code != 0);
    CHECK(run.output.find(c.expect) != std::string::npos);
    CHECK_FALSE(fsys::exists(dir / "out/final"));
  }
  const auto masked = ft_test::run_ft(fmt::format("run --config {}/run.yaml --task fill-mask --max-steps 1", dir.string()));
  CHECK(masked.exit_code != 0);
  CHECK(masked.output.find("task fill-mask is masked-LM pretraining: run it with `ft pretrain`") != std::string::npos);
  const auto unknown = ft_test::run_ft(fmt::format("run --config {}/run.yaml --task question-answering", dir.string()));
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.output.find("task: 'question-answering' is not a task ft trains") != std::string::npos);
}

TEST_CASE("a token classifier evaluated on sentence labels, and per-token data run as text classification, are refused") {
  ft_test::TempDir tmp("token-task-head");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  write_tags(dir / "tags.jsonl", 1);
  ft_test::run_ok(train_args(dir, 1));
  // LoRA on a tagger: PEFT's adapter_config.json says TOKEN_CLS, so PeftModel builds a token classifier.
  ft_test::run_ok(train_args(dir, 1, "--set lora.rank=2 --overwrite-output-dir"));
  const json adapter = json::parse(ft_test::read_text(dir / "out/final/adapter_config.json"));
  CHECK(adapter.at("task_type") == "TOKEN_CLS");
  // The checkpoint knows its task: sentence-labelled rows are not word/tag rows.
  const auto eval = ft_test::run_ft(fmt::format("eval --checkpoint {0}/out/final --data {0}/train.jsonl", dir.string()));
  CHECK(eval.exit_code != 0);
  CHECK(eval.output.find("train.jsonl: line 1: no list 'tokens'") != std::string::npos);
  // Pre-tokenized labels per token need the token task.
  const auto fixture = ft_test::source_dir() / "tests/data/hf/tasks/bert-token-classification";
  if (!fsys::exists(fixture / "train.safetensors")) return;
  const auto run = ft_test::run_ft(fmt::format(
      "run --config tests/data/hf/minilm-trainer/ft.yaml --set model.config={0} --set data.train={0}/train.safetensors "
      "--max-steps 1",
      fixture.string()));
  CHECK(run.exit_code != 0);
  CHECK(run.output.find("its labels are per token (I64 [rows, seq]): train it with --task token-classification") !=
        std::string::npos);
}

TEST_CASE("a weighted tagger's step is the weighted mean over the global batch's tokens, however the batch is split") {
  ft_test::TempDir tmp("token-task-weights");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  write_tags(dir / "tags.jsonl", 4);
  // auto: the tags' balanced weights from the aligned training tokens.
  auto losses = [&](const std::string& extra) {
    ft_test::run_ok(train_args(
        dir, 3, "--set train.shuffle=false --set train.class_weights=auto --threads 1 --overwrite-output-dir " + extra));
    return ft_test::step_losses(dir / "m.jsonl");
  };
  const auto one = losses("--set train.batch_size=16");
  const auto ranks = losses("--strategy ddp --nproc 2 --set train.batch_size=8");
  const auto accumulated = losses("--set train.batch_size=8 --set train.grad_accum=2");
  REQUIRE(one.size() == 3);
  REQUIRE(ranks.size() == 3);
  REQUIRE(accumulated.size() == 3);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(ranks[i] == doctest::Approx(one[i]).epsilon(1e-5));
    CHECK(accumulated[i] == doctest::Approx(one[i]).epsilon(1e-5));
  }
  // The weights change the loss (the unweighted run, same seed).
  ft_test::run_ok(
      train_args(dir, 1, "--set train.shuffle=false --set train.batch_size=16 --threads 1 --overwrite-output-dir"));
  CHECK(std::abs(ft_test::step_losses(dir / "m.jsonl").at(0) - one[0]) > 1e-3);
}
