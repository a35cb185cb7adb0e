// `ft bench`: the report writers on hand-made rows, the Trainer preset
// against configs/trainer-preset.yaml, and one real tiny matrix with a row
// that fails while the others still measure.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_report.h"
#include "ft/config/config.h"
#include "ft/base/error.h"
#include "ft_run.h"

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// `line`'s value in the column the header names `name`.
std::string csv_field(const std::vector<std::string>& header, const std::string& line, const std::string& name) {
  const auto row = csv_fields(line);
  for (size_t i = 0; i < header.size() && i < row.size(); ++i) {
    if (header[i] == name) return row[i];
  }
  return "<no column " + name + ">";
}

// The largest of a CSV cell's per-rank byte counts ("6492688;6491664"): the
// theory is the fullest rank's (a table whose rows do not split evenly leaves
// the last rank a row short).
long long fullest_rank(const std::string& per_rank) {
  long long most = -1;
  for (size_t at = 0; at <= per_rank.size();) {
    const size_t end = std::min(per_rank.find(';', at), per_rank.size());
    most = std::max(most, std::stoll(per_rank.substr(at, end - at)));
    at = end + 1;
  }
  return most;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

ft::BenchReport sample_report() {
  ft::BenchReport rep;
  rep.workload = "tiny";
  rep.config = "configs/bench-tiny.yaml";
  rep.nproc = 2;
  rep.cores = 2;
  rep.steps = 5;
  ft::BenchRow single;
  single.id = single.label = single.strategy = "single";
  single.seed_row = "single GPU";
  single.seed_minutes = 2.8276;
  single.theory_formula = "16Ψ";  // what the plugin's MemoryModel says
  single.theory_bytes = 16000;
  ft::fill_row_from_summary(
      single,
      R"({"event":"summary","strategy":"single","precision":"fp32","world_size":1,"threads_per_rank":2,"steps":5,)"
      R"("samples":160,"train_seconds":10.0,"samples_per_s":16.0,"peak_rss_mb":[300.4],"model_state_bytes":[16000],)"
      R"("param_bytes":[4000],"grad_bytes":[4000],"optimizer_bytes":[8000],"trainable_params":1000,"final_loss":1.5,)"
      R"("eval_accuracy":0.75,"eval_macro_f1":0.5})");
  single.ok = true;
  ft::BenchRow zero;
  zero.id = zero.label = zero.strategy = zero.theory_strategy = "zero2";
  // Two units of 600 and 400: 4·1000 params + 4·1000/2 grad shards + 4·600
  // pool + 8·1000/2 Adam.
  zero.theory_formula = "4Ψ+12Ψ/N+B";
  zero.theory_bytes = 12400;
  ft::fill_row_from_summary(
      zero,
      R"({"event":"summary","strategy":"zero2","precision":"fp32","world_size":2,"threads_per_rank":1,"steps":5,)"
      R"("samples":160,"train_seconds":4.0,"samples_per_s":40.0,"peak_rss_mb":[200.0,210.0],)"
      R"("model_state_bytes":[10000,10000],"trainable_params":1000,"final_loss":1.25})");
  zero.ok = true;
  ft::BenchRow bad;
  bad.id = bad.label = bad.strategy = "nope";
  bad.error = "ft: error: unknown strategy 'nope'";
  rep.rows = {single, zero, bad};
  return rep;
}

}  // namespace

TEST_CASE("a summary line fills a row; anything else is refused") {
  const ft::BenchReport rep = sample_report();
  const ft::BenchRow& r = rep.rows[0];
  CHECK(r.world_size == 1);
  CHECK(r.threads_per_rank == 2);
  CHECK(r.samples == 160);
  CHECK(r.train_seconds == 10.0);
  CHECK(r.peak_rss_mb == std::vector<double>{300.4});
  CHECK(r.model_state_bytes == std::vector<int64_t>{16000});
  CHECK(r.dev_accuracy == 0.75);
  CHECK(std::isnan(rep.rows[1].dev_accuracy));
  ft::BenchRow x;
  x.id = "x";
  CHECK_THROWS_WITH_AS(ft::fill_row_from_summary(x, R"({"event":"step","step":1})"),
                       doctest::Contains("bench row x: the metrics line is not a summary event"), ft::Error);
}

TEST_CASE("markdown, CSV, JSON and SVG carry every row, the theory and the failure") {
  const ft::BenchReport rep = sample_report();
  CHECK(ft::speedup_vs_single(rep, rep.rows[1]) == 2.5);

  const std::string md = ft::bench_markdown(rep);
  CHECK(md.find("measured over 5 steps per row") != std::string::npos);
  CHECK(md.find("N ranks use 2/N = 1 thread(s) each") != std::string::npos);
  CHECK(md.find("16Ψ") != std::string::npos);
  CHECK(md.find("| single | single | 1 | fp32 | 10.00 | 16.0 | 1.00x | 300 | 0.02 [16Ψ = 0.02] | 1.5000 | 0.7500 | "
                "0.5000 | 2.8276 (single GPU) |") != std::string::npos);
  CHECK(md.find("| zero2 | zero2 | 2 | fp32 | 4.00 | 40.0 | 2.50x | 200 / 210 |") != std::string::npos);
  CHECK(md.find("FAILED: ft: error: unknown strategy 'nope'") != std::string::npos);

  const auto csv = lines_of(ft::bench_csv(rep));
  REQUIRE(csv.size() == 4);
  CHECK(csv[0] == ft::bench_csv_header());
  const auto header = csv_fields(csv[0]);
  const auto z = csv_fields(csv[2]);
  REQUIRE(z.size() == header.size());
  auto field = [&](const std::vector<std::string>& row, const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return row[i];
    }
    return std::string("<no column " + name + ">");
  };
  CHECK(field(z, "speedup_vs_single") == "2.5000");
  CHECK(field(z, "peak_rss_mb_per_rank") == "200.0;210.0");
  CHECK(field(z, "theory_formula") == "4Ψ+12Ψ/N+B");
  CHECK(field(z, "theory_bytes_per_rank") == "12400");
  const auto bad = csv_fields(csv[3]);
  CHECK(field(bad, "status") == "failed");
  CHECK(field(bad, "error") == "ft: error: unknown strategy 'nope'");
  CHECK(field(bad, "train_seconds").empty());

  const auto json = nlohmann::json::parse(ft::bench_json(rep));
  REQUIRE(json.at("rows").size() == 3);
  CHECK(json["rows"][1]["theory_bytes"] == 12400);
  CHECK(json["rows"][2]["ok"] == false);
  CHECK(json["rows"][2].contains("train_seconds") == false);

  const std::string svg = ft::bench_svg(rep);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(count(svg, "<rect") == 1 + 2 * 2);  // background + two bars per measured row
  CHECK(count(svg, ">failed</text>") == 1);

  // A long label ends right-aligned at the label column's edge: that edge
  // must leave room for it (about 7 px a character), or the chart cuts it.
  auto wide = rep;
  wide.rows[0].label = "pipeline (1f1b, 4 micro-batches)";
  const std::string wsvg = ft::bench_svg(wide);
  const auto at = wsvg.find(">pipeline (1f1b, 4 micro-batches)</text>");
  REQUIRE(at != std::string::npos);
  const auto x_at = wsvg.rfind("<text x=\"", at);
  const int x = std::stoi(wsvg.substr(x_at + 9));
  CHECK(x >= 7 * 32);
}

TEST_CASE("the Trainer row and configs/trainer-preset.yaml are the same preset") {
  const ft::RunConfig preset = ft::load_config((ft_test::source_dir() / "configs/trainer-preset.yaml").string(), {});
  const ft::RunConfig applied =
      ft::load_config((ft_test::source_dir() / "configs/bench-tiny.yaml").string(), ft::trainer_preset_overrides("ckpt"));
  CHECK(preset.strategy.name == "ddp_amp");  // ft bench runs the trainer row with ddp_amp too
  CHECK(preset.data.padding == "longest");
  CHECK(applied.data.padding == preset.data.padding);
  CHECK(applied.strategy.precision == preset.strategy.precision);
  CHECK(applied.train.eval_every == preset.train.eval_every);
  CHECK(applied.train.save_every == preset.train.save_every);
  CHECK(applied.train.save_total_limit == 3);
  CHECK(preset.train.save_total_limit == 3);
  CHECK(applied.train.best_metric == "macro_f1");
  CHECK(preset.train.best_metric == "macro_f1");
  CHECK(applied.train.output_dir == "ckpt");
}

TEST_CASE("ft bench: a tiny matrix writes four outputs, one row per strategy, from any working directory") {
  FT_REQUIRE_SHARED("fixtures/bench-tiny");
  ft_test::TempDir dir("bench");
  // Started outside the checkout: the fixtures are found from the repository root.
  const auto out = ft_test::run_ft("bench --workload tiny --strategies single,ddp --steps 2 --out '" +
                                   dir.path().string() + "'", "", dir.path());
  INFO(out.output);
  CHECK(out.exit_code == 0);
  CHECK(out.output.find("[1/2] single         running...") != std::string::npos);
  for (const char* f : {"results.json", "results.csv", "results.md", "chart.svg"}) {
    CHECK_MESSAGE(std::filesystem::exists(dir.path() / f), f);
  }
  const auto csv = lines_of(ft_test::read_text(dir.path() / "results.csv"));
  REQUIRE(csv.size() == 3);
  CHECK(csv[0] == ft::bench_csv_header());
  const auto header = csv_fields(csv[0]);
  auto field = [&](const std::string& line, const std::string& name) { return csv_field(header, line, name); };
  // single: one process, 2 threads, global batch 32; ddp: 2 ranks x 1 thread.
  CHECK(field(csv[1], "row") == "single");
  CHECK(field(csv[1], "status") == "ok");
  CHECK(field(csv[1], "world_size") == "1");
  CHECK(field(csv[1], "threads_per_rank") == "2");
  CHECK(field(csv[1], "steps") == "2");
  CHECK(field(csv[1], "samples") == "64");
  CHECK(field(csv[1], "trainable_params") == "3184262");
  CHECK(field(csv[1], "model_state_bytes_per_rank") == "50948192");  // 16Ψ
  CHECK(std::stod(field(csv[1], "train_seconds")) > 0);
  CHECK(field(csv[2], "row") == "ddp");
  CHECK(field(csv[2], "status") == "ok");
  CHECK(field(csv[2], "world_size") == "2");
  CHECK(field(csv[2], "threads_per_rank") == "1");
  CHECK(field(csv[2], "samples") == "64");
  CHECK(field(csv[2], "model_state_bytes_per_rank") == "50948192;50948192");
  CHECK(std::stod(field(csv[2], "samples_per_s")) > 0);
  // Parity between rows: same data, same seed, same global batch (dropout 0.1
  // draws differ per rank, so only closeness is expected).
  CHECK(std::abs(std::stod(field(csv[1], "final_loss")) - std::stod(field(csv[2], "final_loss"))) < 0.05);
  const std::string md = ft_test::read_text(dir.path() / "results.md");
  CHECK(md.find("*seeds' min* is the minutes the seed PyTorch scripts took") != std::string::npos);
  CHECK(out.output.find("| ddp (ft run --nproc) | ddp | 2 | fp32 |") != std::string::npos);
}

TEST_CASE("ft bench: the theory column counts the model the run builds (a random-init table sized to its vocab)") {
  // A random-init model reading text gets as many word rows as its tokenizer
  // has tokens (here 13, not the preset's 21 128): the theory must count those.
  ft_test::TempDir dir("bench-vocab");
  const auto vocab = dir.path() / "vocab.txt";
  const auto data = dir.path() / "train.jsonl";
  const auto config = dir.path() / "run.yaml";
  {
    std::ofstream v(vocab);
    for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film", "a", "very", "not", "is",
                          "it"}) {
      v << t << "\n";
    }
    std::ofstream d(data);
    for (int i = 0; i < 64; ++i) d << (i % 2 ? R"({"text": "a very good film", "label": 1})" : R"({"text": "it is not good", "label": 0})") << "\n";
    std::ofstream c(config);
    c << "model: {config: tiny}\n"
      << "data: {train: " << data.string() << ", format: jsonl, labels: [neg, pos], vocab: " << vocab.string()
      << ", max_seq_len: 16}\n"
      << "train: {epochs: 1, batch_size: 32, seed: 1}\n";
  }
  const auto out = ft_test::run_ft("bench --workload '" + config.string() + "' --strategies zero1,zero3,tensor --steps 1 --out '" +
                                   (dir.path() / "out").string() + "'");
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  const auto csv = lines_of(ft_test::read_text(dir.path() / "out" / "results.csv"));
  REQUIRE(csv.size() == 4);
  const auto header = csv_fields(csv[0]);
  auto field = [&](const std::string& line, const std::string& name) { return csv_field(header, line, name); };
  for (size_t r = 1; r < csv.size(); ++r) {
    CAPTURE(field(csv[r], "row"));
    CHECK(field(csv[r], "status") == "ok");
    // The fullest rank holds exactly what the formula says, to the byte (a
    // table of 13 rows splits in 7 + 6).
    CHECK(fullest_rank(field(csv[r], "model_state_bytes_per_rank")) ==
          std::stoll(field(csv[r], "theory_bytes_per_rank")));
  }
  // The strategy's own options shape its theory: FSDP's SHARD_GRAD_OP keeps
  // every unit gathered from forward to backward, NO_SHARD is DDP's 16Ψ.
  for (const std::string mode : {"SHARD_GRAD_OP", "NO_SHARD"}) {
    CAPTURE(mode);
    const auto fsdp = ft_test::run_ft("bench --workload '" + config.string() + "' --strategies fsdp --steps 1 --set " +
                                      "strategy.options.sharding_strategy=" + mode + " --out '" +
                                      (dir.path() / mode).string() + "'");
    INFO(fsdp.output);
    REQUIRE(fsdp.exit_code == 0);
    const auto rows = lines_of(ft_test::read_text(dir.path() / mode / "results.csv"));
    REQUIRE(rows.size() == 2);
    CHECK(field(rows[1], "theory_formula") == (mode == "NO_SHARD" ? "16Ψ" : "4Ψ+12Ψ/N+B"));
    CHECK(fullest_rank(field(rows[1], "model_state_bytes_per_rank")) ==
          std::stoll(field(rows[1], "theory_bytes_per_rank")));
  }
}

TEST_CASE("ft bench runs on every encoder family, its theory column equal to what each rank holds") {
  // The committed tiny models of tests/data/hf/families with their own
  // pre-tokenized rows; ELECTRA's word table is narrower than its layers.
  const auto root = ft_test::source_dir() / "tests" / "data" / "hf" / "families";
  for (const std::string family : {"roberta", "xlm-roberta", "electra", "distilbert", "deberta-v2", "modernbert"}) {
    CAPTURE(family);
    ft_test::TempDir dir("bench-" + family);
    const auto out = ft_test::run_ft(fmt::format(
        "bench --workload mini --strategies zero2,zero3,tensor --steps 2 --set model.config={} --set data.train={} --out {}",
        (root / family).string(), (root / family / "train.safetensors").string(), dir.path().string()));
    INFO(out.output);
    REQUIRE(out.exit_code == 0);
    const auto csv = lines_of(ft_test::read_text(dir.path() / "results.csv"));
    REQUIRE(csv.size() == 4);
    const auto header = csv_fields(csv[0]);
    for (size_t r = 1; r < csv.size(); ++r) {
      CAPTURE(csv_field(header, csv[r], "row"));
      CHECK(csv_field(header, csv[r], "status") == "ok");
      CHECK(fullest_rank(csv_field(header, csv[r], "model_state_bytes_per_rank")) ==
            std::stoll(csv_field(header, csv[r], "theory_bytes_per_rank")));
    }
  }
}

TEST_CASE("ft bench: an unknown strategy fails before any row runs") {
  ft_test::TempDir dir("bench_nope");
  const auto out = ft_test::run_ft("bench --workload tiny --strategies single,nope --steps 2 --out '" +
                                   dir.path().string() + "'");
  INFO(out.output);
  CHECK(out.exit_code == 1);
  CHECK(out.output.find("--strategies: unknown strategy 'nope' (row nope); installed: ") != std::string::npos);
  CHECK(out.output.find("running...") == std::string::npos);
  CHECK(!std::filesystem::exists(dir.path() / "rows"));
}

TEST_CASE("ft bench: bad flags are one-line errors") {
  auto out = ft_test::run_ft("bench --workload nowhere.yaml");
  CHECK(out.exit_code == 1);
  CHECK(out.output.find("--workload nowhere.yaml: neither tiny|mini|weibo|imdb nor an existing config file") !=
        std::string::npos);
  out = ft_test::run_ft("bench --workload tiny --nproc 3");
  CHECK(out.exit_code == 1);
  CHECK(out.output.find("--global-batch 32: must be a positive multiple of --nproc 3") != std::string::npos);
}
