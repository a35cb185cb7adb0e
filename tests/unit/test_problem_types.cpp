// Multi-label and regression sequence classification (docs/tasks.md), and
// sentence pairs at prediction: reading, losses, metrics, ft predict.
//
// The losses are checked against the model's own outputs: with lr 1e-12 and no
// dropout, the first step's logged loss is the loss of the logits `ft
// predict --logits` prints for the same rows, computed here from its
// definition (MSE, Huber, BCE-with-logits).
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/data/data.h"
#include "ft/base/error.h"
#include "ft/observe/metrics.h"
#include "ft_proc.h"
#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;
using nlohmann::json;

ft::TextData parse(const std::string& bytes, ft::DataFormat format, ft::DataSource src = {}) {
  src.path = "rows";
  src.format = format;
  return ft::parse_text_data(bytes, src);
}

// The sixteen tiny-task texts with a label each; written as JSON Lines.
const char* const kTexts[] = {"the film was good", "very good plot", "good good film !", "a good film",
                              "the plot was very good", "good films", "a very good plot !", "the good film",
                              "the film was bad", "very bad plot", "bad bad film !", "a bad film",
                              "the plot was very bad", "bad films", "a very bad plot !", "the bad film"};

void write_rows(const fsys::path& file, const std::vector<json>& labels, const char* pair_field = nullptr) {
  std::ofstream out(file);
  for (size_t i = 0; i < labels.size(); ++i) {
    json row{{"text", kTexts[i]}, {"label", labels[i]}};
    if (pair_field) row[pair_field] = kTexts[15 - i];
    out << row.dump() << "\n";
  }
}

// One full-batch step at lr 1e-12 without dropout: the logged loss is the
// loss of the initial weights' logits, which the checkpoint keeps.
std::string one_step(const fsys::path& dir, const std::string& extra) {
  return fmt::format(
      "run --config {0}/run.yaml --set data.train={0}/rows.jsonl --set data.labels=[] --set model.dropout=0 "
      "--set train.lr=1e-12 --set train.warmup_steps=0 --set train.batch_size=16 --set train.shuffle=false "
      "--max-steps 1 --output-dir {0}/out --metrics-out {0}/m.jsonl {1}",
      dir.string(), extra);
}

// `ft predict --logits` on every text: one logits vector per row.
std::vector<std::vector<double>> predicted_logits(const fsys::path& checkpoint, std::vector<json>* records = nullptr,
                                                  const std::string& extra = "") {
  std::string args = fmt::format("predict --checkpoint {} --logits {}", checkpoint.string(), extra);
  for (const char* t : kTexts) args += fmt::format(" '{}'", t);
  const auto run = ft_test::run_ft(args);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::vector<std::vector<double>> out;
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const json j = json::parse(line);
    out.push_back(j.at("logits").get<std::vector<double>>());
    if (records) records->push_back(j);
  }
  REQUIRE(out.size() == 16);
  return out;
}

}  // namespace

TEST_CASE("the problem type is inferred from the labels as transformers infers it") {
  SUBCASE("scores with a fraction are regression, divided by label_scale") {
    ft::DataSource src;
    src.label_scale = 5;
    const auto d = parse("text,label\na,3.8\nb,0\nc,5.0\n", ft::DataFormat::Csv, src);
    CHECK(d.problem_type == ft::ProblemType::kRegression);
    CHECK(d.label_names.empty());
    REQUIRE(d.rows.size() == 3);
    CHECK(d.rows[0].score == doctest::Approx(0.76).epsilon(1e-12));
    CHECK(d.rows[1].score == 0.0);
    CHECK(d.rows[2].score == 1.0);
  }
  SUBCASE("whole numbers stay class ids") {
    const auto d = parse("text,label\na,1\nb,0\nc,2\n", ft::DataFormat::Csv);
    CHECK(d.problem_type == ft::ProblemType::kSingleLabel);
    CHECK((d.label_names == std::vector<std::string>{"0", "1", "2"}));
  }
  SUBCASE("lists of labels are multi-label, names sorted over every list") {
    const auto d = parse("{\"text\":\"a\",\"label\":[\"sports\",\"news\"]}\n{\"text\":\"b\",\"label\":[]}\n"
                         "{\"text\":\"c\",\"label\":[\"arts\",\"news\",\"news\"]}\n",
                         ft::DataFormat::JsonLines);
    CHECK(d.problem_type == ft::ProblemType::kMultiLabel);
    CHECK((d.label_names == std::vector<std::string>{"arts", "news", "sports"}));
    CHECK((d.rows[0].label_set == std::vector<int64_t>{1, 2}));
    CHECK(d.rows[1].label_set.empty());
    CHECK((d.rows[2].label_set == std::vector<int64_t>{0, 1}));
  }
  SUBCASE("a label delimiter cuts one cell into a set") {
    ft::DataSource src;
    src.label_delimiter = "|";
    src.label_names = {"x", "y", "z"};
    const auto d = parse("text\tlabel\na\tz|x\nb\ty\n", ft::DataFormat::Tsv, src);
    CHECK(d.problem_type == ft::ProblemType::kMultiLabel);
    CHECK((d.rows[0].label_set == std::vector<int64_t>{0, 2}));
    CHECK(d.rows[1].label_set == std::vector<int64_t>{1});
  }
}

TEST_CASE("bad multi-label and regression labels get one line naming the row") {
  ft::DataSource names;
  names.label_names = {"a", "b"};
  CHECK(ft_test::error_of([&] {
          parse("{\"text\":\"t\",\"label\":[\"a\"]}\n{\"text\":\"u\",\"label\":[\"b\",\"c\"]}\n",
                ft::DataFormat::JsonLines, names);
        }) == "rows: row 2: unknown label 'c' (label names: a, b); fix or remove the row, or skip bad rows "
              "(data.bad_rows: skip)");
  ft::DataSource regression;
  regression.problem_type = ft::ProblemType::kRegression;
  CHECK(ft_test::error_of([&] { parse("text,label\nt,0.5\nu,high\n", ft::DataFormat::Csv, regression); }) ==
        "rows: row 3: regression label 'high' is not a number; give a number (or set model.problem_type); fix or "
        "remove the row, or skip bad rows (data.bad_rows: skip)");
  CHECK(ft_test::error_of([&] { parse("text,label\nt,0.5\nu,high\n", ft::DataFormat::Csv); }) ==
        "rows: row 3: regression label 'high' is not a number (earlier rows hold scores with a fraction); give a "
        "number; fix or remove the row, or skip bad rows (data.bad_rows: skip)");
  CHECK(ft_test::error_of([&] {
          parse("{\"text\":\"t\",\"label\":[\"a\"]}\n{\"text\":\"u\",\"label\":\"b\"}\n", ft::DataFormat::JsonLines);
        }) == "rows: row 2: label 'b' is a single label but earlier rows hold lists of labels (multi-label); give "
              "every row a list, e.g. [\"a\"]; fix or remove the row, or skip bad rows (data.bad_rows: skip)");
}

TEST_CASE("multi-label metrics are scikit-learn's") {
  // Three rows, three labels. Truth [[1,0,1],[0,1,0],[1,1,0]], predicted
  // [[1,0,0],[0,1,0],[1,0,1]]. scikit-learn 1.x gives f1_score micro
  // 0.6666666666666666, macro (zero_division=0) 0.5555555555555555,
  // accuracy_score 0.3333333333333333, precision [1, 1, 0], recall [1, .5, 0].
  const std::vector<uint8_t> truth{1, 0, 1, 0, 1, 0, 1, 1, 0}, predicted{1, 0, 0, 0, 1, 0, 1, 0, 1};
  const auto r = ft::multi_label_report(ft::multi_label_counts(predicted, truth, 3), 0.25);
  CHECK(*r.score("micro_f1") == doctest::Approx(2.0 / 3.0).epsilon(1e-12));
  CHECK(r.macro_f1 == doctest::Approx(0.5555555555555555).epsilon(1e-12));
  CHECK(*r.score("subset_accuracy") == doctest::Approx(1.0 / 3.0).epsilon(1e-12));
  CHECK((r.precision == std::vector<double>{1.0, 1.0, 0.0}));
  CHECK((r.recall == std::vector<double>{1.0, 0.5, 0.0}));
  CHECK((r.support == std::vector<int64_t>{2, 2, 1}));
}

TEST_CASE("regression metrics are MSE, MAE, Pearson and Spearman with average ranks") {
  const std::vector<double> pred{0.1, 0.4, 0.35, 0.8}, truth{0.0, 0.5, 0.5, 1.0};
  const auto r = ft::regression_report(pred, truth, 0.0);
  // Mean squared / absolute error by hand; r and rho as scipy.stats'
  // pearsonr and spearmanr give them.
  CHECK(*r.score("mse") == doctest::Approx((0.01 + 0.01 + 0.0225 + 0.04) / 4).epsilon(1e-12));
  CHECK(*r.score("mae") == doctest::Approx((0.1 + 0.1 + 0.15 + 0.2) / 4).epsilon(1e-12));
  CHECK(*r.score("pearson") == doctest::Approx(0.9862579351468856).epsilon(1e-12));
  CHECK(*r.score("spearman") == doctest::Approx(0.9486832980505139).epsilon(1e-12));
}

TEST_CASE("regression trains on MSE (or Huber) of the one logit, and predicts it as the score") {
  ft_test::TempDir tmp("regression");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  std::vector<json> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i < 8 ? 4.5 - 0.25 * i : 0.5 + 0.125 * (i - 8));
  write_rows(dir / "rows.jsonl", labels);
  for (const std::string loss : {"mse", "huber"}) {
    CAPTURE(loss);
    fsys::remove_all(dir / "out");
    fsys::remove(dir / "m.jsonl");
    ft_test::run_ok(one_step(dir, "--set train.regression_loss=" + loss + " --set data.label_scale=5"));
    const json config = json::parse(ft_test::read_text(dir / "out/final/config.json"));
    CHECK(config.at("problem_type") == "regression");
    CHECK(config.at("num_labels") == 1);
    const auto logits = predicted_logits(dir / "out/final");
    double want = 0;
    for (size_t i = 0; i < 16; ++i) {
      const double e = logits[i].at(0) - labels[i].get<double>() / 5;
      want += loss == "mse" ? e * e : (std::abs(e) < 1 ? 0.5 * e * e : std::abs(e) - 0.5);
    }
    const auto losses = ft_test::step_losses(dir / "m.jsonl");
    REQUIRE(losses.size() == 1);
    CHECK(losses[0] == doctest::Approx(want / 16).epsilon(1e-5));
  }
  // The evaluation reports the regression metrics under their names.
  const auto eval = ft_test::run_ft(fmt::format("eval --checkpoint {0}/out/final --data {0}/rows.jsonl", dir.string()));
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  for (const char* name : {"mse ", "mae ", "pearson ", "spearman "}) CHECK(eval.output.find(name) != std::string::npos);
}

TEST_CASE("multi-label trains on BCE-with-logits and predicts a sigmoid per label") {
  ft_test::TempDir tmp("multi-label");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  std::vector<json> labels;
  for (int i = 0; i < 16; ++i) {
    json set = json::array();
    if (i < 8) set.push_back("positive");
    if (i % 3 == 0) set.push_back("plot");
    if (i % 4 == 1) set.push_back("film");
    labels.push_back(set);
  }
  write_rows(dir / "rows.jsonl", labels);
  ft_test::run_ok(one_step(dir, ""));
  const json config = json::parse(ft_test::read_text(dir / "out/final/config.json"));
  CHECK(config.at("problem_type") == "multi_label_classification");
  CHECK((config.at("id2label") == json{{"0", "film"}, {"1", "plot"}, {"2", "positive"}}));
  std::vector<json> records;
  const auto logits = predicted_logits(dir / "out/final", &records);
  const std::vector<std::string> names{"film", "plot", "positive"};
  double want = 0;
  for (size_t i = 0; i < 16; ++i) {
    for (size_t j = 0; j < 3; ++j) {
      const double x = logits[i].at(j);
      const bool y = std::find(labels[i].begin(), labels[i].end(), names[j]) != labels[i].end();
      want += std::max(x, 0.0) - x * (y ? 1 : 0) + std::log1p(std::exp(-std::abs(x)));
      const double p = 1 / (1 + std::exp(-x));
      CHECK(records[i].at("probabilities").at(names[j]).get<double>() == doctest::Approx(p).epsilon(1e-6));
      const auto& chosen = records[i].at("labels");
      CHECK((std::find(chosen.begin(), chosen.end(), names[j]) != chosen.end()) == (p >= 0.5));
    }
  }
  const auto losses = ft_test::step_losses(dir / "m.jsonl");
  REQUIRE(losses.size() == 1);
  CHECK(losses[0] == doctest::Approx(want / 48).epsilon(1e-5));
  // class_weights: auto is BCE's pos_weight, each label's negatives over its
  // positives: film 12 / 4, plot 10 / 6, positive 8 / 8. Same seed, same logits.
  ft_test::run_ok(one_step(dir, "--set train.class_weights=auto --overwrite-output-dir"));
  const double pos_weight[] = {3.0, 10.0 / 6.0, 1.0};
  double weighted = 0;
  for (size_t i = 0; i < 16; ++i) {
    for (size_t j = 0; j < 3; ++j) {
      const double x = logits[i].at(j);
      const bool y = std::find(labels[i].begin(), labels[i].end(), names[j]) != labels[i].end();
      const double softplus_neg = std::max(-x, 0.0) + std::log1p(std::exp(-std::abs(x)));  // -log sigmoid(x)
      weighted += y ? pos_weight[j] * softplus_neg : softplus_neg + x;                      // -log(1 - sigmoid(x))
    }
  }
  const auto weighted_losses = ft_test::step_losses(dir / "m.jsonl");
  REQUIRE(weighted_losses.size() == 1);
  CHECK(weighted_losses[0] == doctest::Approx(weighted / 48).epsilon(1e-5));
  CHECK(std::abs(weighted_losses[0] - losses[0]) > 1e-3);
  const auto focal = ft_test::run_ft(one_step(dir, "--set train.focal_loss_gamma=2 --overwrite-output-dir"));
  CHECK(focal.exit_code != 0);
  CHECK(focal.output.find("train.focal_loss_gamma: shapes cross-entropy over classes; multi_label_classification takes "
                          "train.class_weights alone (BCE's pos_weight)") != std::string::npos);
  // A best metric the problem type does not report is refused up front.
  const auto wrong = ft_test::run_ft(one_step(dir, "--set train.best_metric=pearson --overwrite-output-dir"));
  INFO(wrong.output);
  CHECK(wrong.exit_code != 0);
  CHECK(wrong.output.find("train.best_metric: 'pearson' is not a metric of multi_label_classification (its metrics: "
                          "loss, micro_f1, macro_f1, subset_accuracy, micro_precision, micro_recall, roc_auc, pr_auc)") !=
        std::string::npos);
}

TEST_CASE("a transformers directory saying multi_label_classification is predicted with sigmoids") {
  ft_test::TempDir tmp("hf-multi-label");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  write_rows(dir / "rows.jsonl", std::vector<json>(16, "pos"));
  ft_test::run_ok(one_step(dir, "--set data.labels=[neg,pos]"));
  json config = json::parse(ft_test::read_text(dir / "out/final/config.json"));
  CHECK(config.at("problem_type") == "single_label_classification");
  // A plain model directory, as transformers saves one, saying multi-label.
  fsys::create_directory(dir / "hf");
  for (const auto& e : fsys::directory_iterator(dir / "out/final"))
    if (e.is_regular_file() && e.path().filename() != "manifest.json") fsys::copy(e.path(), dir / "hf" / e.path().filename());
  config["problem_type"] = "multi_label_classification";
  std::ofstream(dir / "hf/config.json") << config.dump(2);
  std::vector<json> records;
  const auto logits = predicted_logits(dir / "hf", &records);
  for (size_t i = 0; i < 16; ++i) {
    CHECK(records[i].contains("labels"));
    CHECK(records[i].at("probabilities").at("pos").get<double>() ==
          doctest::Approx(1 / (1 + std::exp(-logits[i].at(1)))).epsilon(1e-6));
  }
}

TEST_CASE("ft predict runs batches sorted by length and answers in input order, from arguments or stdin") {
  ft_test::TempDir tmp("batched-predict");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  std::vector<json> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 3 == 0 ? "neg" : "pos");
  write_rows(dir / "rows.jsonl", labels);
  ft_test::run_ok(one_step(dir, ""));
  // One text per forward pass is the reference: what predict did before it batched.
  std::vector<json> alone_records, batched_records;
  const auto alone = predicted_logits(dir / "out/final", &alone_records, "--batch-size 1");
  // Batches of 5 over texts of 3 to 7 tokens: each batch mixes lengths, and the last is short.
  const auto batched = predicted_logits(dir / "out/final", &batched_records, "--batch-size 5 --threads 1");
  for (size_t i = 0; i < 16; ++i) {
    CHECK(batched_records[i].at("text") == kTexts[i]);
    CHECK(alone_records[i].at("text") == kTexts[i]);
    for (size_t k = 0; k < alone[i].size(); ++k) CHECK(batched[i][k] == doctest::Approx(alone[i][k]).epsilon(1e-5));
  }
  // Logits that differ by row: equal answers would hide a mixed-up order.
  CHECK(alone[0] != alone[8]);
  // stdin with an empty line (skipped), 20 inputs: at batch size 1 a window holds 16, so the
  // second window starts mid-stream. The same answers, in order.
  std::ofstream in(dir / "texts.txt");
  for (size_t i = 0; i < 20; ++i) in << kTexts[i % 16] << (i == 7 ? "\n\n" : "\n");
  in.close();
  const auto piped = ft_test::run_ft(
      fmt::format("predict --checkpoint {}/out/final --logits --batch-size 1 < {}/texts.txt", dir.string(), dir.string()));
  REQUIRE(piped.exit_code == 0);
  std::istringstream lines(piped.output);
  size_t row = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    REQUIRE(row < 20);
    const json j = json::parse(line);
    CHECK(j.at("text") == kTexts[row % 16]);
    const auto l = j.at("logits").get<std::vector<double>>();
    for (size_t k = 0; k < l.size(); ++k) CHECK(l[k] == doctest::Approx(alone[row % 16][k]).epsilon(1e-5));
    ++row;
  }
  CHECK(row == 20);
}

TEST_CASE("a model trained on pairs predicts pairs, and refuses a single text") {
  ft_test::TempDir tmp("pairs");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  std::vector<json> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i < 8 ? "pos" : "neg");
  write_rows(dir / "rows.jsonl", labels, "second");
  ft_test::run_ok(one_step(dir, "--set data.pair_field=second"));
  const std::string ckpt = (dir / "out/final").string();
  CHECK(json::parse(ft_test::read_text(dir / "out/final/config.json")).at("text_pair") == true);
  const auto single = ft_test::run_ft(fmt::format("predict --checkpoint {} 'the film was good'", ckpt));
  CHECK(single.exit_code != 0);
  CHECK(single.output.find("ft: error: input 1: the model was trained on sentence pairs (config.json text_pair); give "
                           "each input as text<TAB>text_pair or as a JSON line {\"text\": ..., \"text_pair\": ...}") !=
        std::string::npos);
  // The TAB form and the JSON form are the same input.
  const auto tab = ft_test::run_ft(fmt::format("predict --checkpoint {} 'the film was good\tthe bad film'", ckpt));
  const auto obj = ft_test::run_ft(fmt::format(
      "predict --checkpoint {} '{{\"text\": \"the film was good\", \"text_pair\": \"the bad film\"}}'", ckpt));
  REQUIRE(tab.exit_code == 0);
  REQUIRE(obj.exit_code == 0);
  CHECK(tab.output == obj.output);
  const json record = json::parse(tab.output.substr(tab.output.find('{')));
  CHECK(record.at("text_pair") == "the bad film");
  // The second text changes the probabilities: it is really read.
  const auto other = ft_test::run_ft(fmt::format("predict --checkpoint {} 'the film was good\tvery good plot'", ckpt));
  REQUIRE(other.exit_code == 0);
  const json other_record = json::parse(other.output.substr(other.output.find('{')));
  CHECK(other_record.at("probabilities").at("pos").get<double>() !=
        record.at("probabilities").at("pos").get<double>());
}

TEST_CASE("a checkpoint of a head ft does not build gets one line naming it") {
  ft_test::TempDir tmp("unbuilt-head");
  const fsys::path& dir = tmp.path();
  ft_test::write_tiny_task(dir);
  write_rows(dir / "rows.jsonl", std::vector<json>(16, "pos"));
  ft_test::run_ok(one_step(dir, "--set data.labels=[neg,pos]"));
  json config = json::parse(ft_test::read_text(dir / "out/final/config.json"));
  config["architectures"] = {"BertForQuestionAnswering"};
  std::ofstream(dir / "out/final/config.json") << config.dump(2);
  const auto run = ft_test::run_ft(fmt::format("predict --checkpoint {}/out/final 'a good film'", dir.string()));
  CHECK(run.exit_code != 0);
  CHECK(run.output.find("its architecture BertForQuestionAnswering is a head ft does not build; ft runs "
                        "BertForSequenceClassification and BertForTokenClassification") != std::string::npos);
}
