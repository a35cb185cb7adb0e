// report.html (a run's page, `ft report`; test_report_browser opens it) and `ft sweep`
// (trials, ASHA pruning, resume, best.yaml) on the tiny task
// (docs/training-loop.md).
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;
using nlohmann::json;

// The JSON the page embeds, cut back out of it.
json page_data(const fsys::path& page) {
  const std::string html = ft_test::read_text(page);
  const std::string token = "const DATA = ";
  const auto at = html.find(token);
  REQUIRE(at != std::string::npos);
  const auto end = html.find(";\n", at);
  std::string data = html.substr(at + token.size(), end - at - token.size());
  data = std::regex_replace(data, std::regex(R"(<\\/)"), "</");
  return json::parse(data);
}

// A sweep over lr on the tiny task, written to DIR/NAME.yaml, its trials in DIR/NAME.
void write_sweep(const fsys::path& dir, const std::string& extra, const std::string& name = "sweep",
                 const std::string& lrs = "5.0e-3, 2.0e-2, 2.0e-2", const std::string& scheduler = "asha") {
  std::ofstream(dir / (name + ".yaml")) << fmt::format(R"(base: {0}/run.yaml
output_dir: {0}/{2}
method: grid
parallel: 1
metric: loss
overrides: ["data.dev={0}/train.jsonl", "train.max_steps=32", "train.warmup_steps=0"]
params:
  train.lr: [{3}]
scheduler: {{type: {4}, min_steps: 8, reduction_factor: 2}}
{1})",
                                                       dir.string(), extra, name, lrs, scheduler);
}

}  // namespace

TEST_CASE("a run writes metrics.jsonl and report.html into its output directory; ft report rebuilds and overlays") {
  ft_test::TempDir tmp("report");
  ft_test::write_tiny_task(tmp.path());
  ft_test::run_ok(fmt::format("run --config {0}/run.yaml --set data.dev={0}/train.jsonl --set train.eval_every=4 "
                              "--max-steps 12 --output-dir {0}/out",
                              tmp.path().string()));
  const fsys::path page = tmp.path() / "out/report.html";
  REQUIRE(fsys::exists(page));
  const json data = page_data(page);
  REQUIRE(data.at("runs").size() == 1);
  const auto& records = data.at("runs")[0].at("records");
  CHECK(records[0].at("event") == "run");
  CHECK(records[0].at("command").get<std::string>().rfind("ft run --config", 0) == 0);
  CHECK(records[0].at("config").get<std::string>().find("eval_every: 4") != std::string::npos);
  size_t evals = 0;
  for (const auto& r : records) {
    if (r.at("event") != "eval") continue;
    ++evals;
    CHECK(r.at("confusion").size() == 2);
    CHECK(r.at("labels") == json({"neg", "pos"}));
    CHECK(r.contains("roc_auc"));
    CHECK(r.contains("mcc"));
  }
  CHECK(evals == 3);
  CHECK(records.back().at("event") == "summary");
  // `ft report` rebuilds the same records; two runs overlay.
  fsys::remove(page);
  ft_test::run_ok(fmt::format("report {}/out", tmp.path().string()));
  CHECK(page_data(page).at("runs")[0].at("records") == records);
  ft_test::run_ok(fmt::format("report {0}/out {0}/out/metrics.jsonl -o {0}/two.html", tmp.path().string()));
  CHECK(page_data(tmp.path() / "two.html").at("runs").size() == 2);
  const auto missing = ft_test::run_ft(fmt::format("report {}/nothing-here", tmp.path().string()));
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("nothing-here: no such run directory or metrics file") != std::string::npos);
}

TEST_CASE("ft sweep: a grid with ASHA prunes the trials that fall behind, writes best.yaml, and resumes") {
  ft_test::TempDir tmp("sweep");
  ft_test::write_tiny_task(tmp.path());
  write_sweep(tmp.path(), "");
  const fsys::path sweep = tmp.path() / "sweep";
  const std::string plan = ft_test::run_ok(fmt::format("sweep --config {}/sweep.yaml --dry-run", tmp.path().string()));
  CHECK(plan.find("trial 00: train.lr=5.0e-3") != std::string::npos);
  CHECK(plan.find("trial 02: train.lr=2.0e-2") != std::string::npos);
  CHECK_FALSE(fsys::exists(sweep));

  const std::string out = ft_test::run_ok(fmt::format("sweep --config {}/sweep.yaml", tmp.path().string()));
  const json state = json::parse(ft_test::read_text(sweep / "sweep_state.json"));
  const auto& trials = state.at("trials");
  REQUIRE(trials.size() == 3);
  // At step 8, lr 2e-2 has overshot (dev loss 0.70 against lr 5e-3's 0.69): the first such
  // trial is second of two at the rung, the next third of three; both are pruned there.
  CHECK(trials[0].at("status") == "done");
  CHECK(trials[0].at("rungs").size() == 3);  // steps 8, 16 and 32
  for (int i : {1, 2}) {
    INFO("trial " << i);
    CHECK(trials[i].at("status") == "pruned");
    CHECK(trials[i].at("pruned_at") == 8);
  }
  CHECK(out.find("trial 01 pruned at step 8") != std::string::npos);
  // The best is a finished trial, and best.yaml is a run config carrying its lr.
  CHECK(out.find("best: trial 0") != std::string::npos);
  const std::string best = ft_test::read_text(sweep / "best.yaml");
  CHECK(best.find("max_steps: 32") != std::string::npos);
  CHECK(best.find("lr: 0.005") != std::string::npos);
  CHECK(fsys::exists(sweep / "sweep.html"));
  CHECK(fsys::exists(sweep / "trial-00/final/model.safetensors"));
  // Run again: every trial has ended, nothing reruns.
  const std::string again = ft_test::run_ok(fmt::format("sweep --config {}/sweep.yaml", tmp.path().string()));
  CHECK(again.find("3 of 3 trials already ended") != std::string::npos);
  CHECK(again.find("started") == std::string::npos);
  // A different sweep into the same directory is refused.
  write_sweep(tmp.path(), "seed: 3");
  const auto changed = ft_test::run_ft(fmt::format("sweep --config {}/sweep.yaml", tmp.path().string()));
  CHECK(changed.exit_code != 0);
  CHECK(changed.output.find("was started from another") != std::string::npos);
  // Bad files get one line naming the key.
  std::ofstream(tmp.path() / "bad.yaml") << "params: {train.lr: {distribution: log_uniform, min: 0, max: 1}}\nmethod: random\ntrials: 2\n";
  const auto bad = ft_test::run_ft(fmt::format("sweep --config {}/bad.yaml", tmp.path().string()));
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("params.train.lr: log_uniform needs min > 0") != std::string::npos);
}

TEST_CASE("ft sweep: random search draws the same trials from the same seed, log-uniform within its range") {
  ft_test::TempDir tmp("sweep-random");
  ft_test::write_tiny_task(tmp.path());
  std::ofstream(tmp.path() / "r.yaml") << fmt::format(
      "base: {}/run.yaml\nmethod: random\ntrials: 6\nseed: 5\nparams:\n"
      "  train.lr: {{distribution: log_uniform, min: 1.0e-5, max: 1.0e-3}}\n  train.batch_size: [2, 4, 8]\n",
      tmp.path().string());
  const std::string a = ft_test::run_ok(fmt::format("sweep --config {}/r.yaml --dry-run", tmp.path().string()));
  const std::string b = ft_test::run_ok(fmt::format("sweep --config {}/r.yaml --dry-run", tmp.path().string()));
  CHECK(a == b);
  const std::regex lr(R"(train\.lr=([0-9.e+-]+))");
  int n = 0;
  for (auto it = std::sregex_iterator(a.begin(), a.end(), lr); it != std::sregex_iterator(); ++it, ++n) {
    const double v = std::stod((*it)[1]);
    CHECK(v >= 1e-5);
    CHECK(v <= 1e-3);
  }
  CHECK(n == 6);
}

TEST_CASE("ft sweep: SHA decides a rung on every trial's value there, ASHA on the values seen so far") {
  ft_test::TempDir tmp("sweep-sha");
  ft_test::write_tiny_task(tmp.path());
  // lr 2e-2 is behind lr 5e-3 at step 8 (dev loss 0.7000 against 0.6932) and ahead by step 32
  // (0.6920 against 0.6928): both schedulers bet on step 8, only SHA with all three values in hand.
  const std::string lrs = "2.0e-2, 5.0e-3, 2.0e-2";
  write_sweep(tmp.path(), "", "asha", lrs, "asha");
  write_sweep(tmp.path(), "", "sha", lrs, "sha");
  ft_test::run_ok(fmt::format("sweep --config {}/asha.yaml", tmp.path().string()));
  const std::string out = ft_test::run_ok(fmt::format("sweep --config {}/sha.yaml", tmp.path().string()));
  const json asha = json::parse(ft_test::read_text(tmp.path() / "asha/sweep_state.json")).at("trials");
  const json sha = json::parse(ft_test::read_text(tmp.path() / "sha/sweep_state.json")).at("trials");
  INFO("asha: " << asha.dump());
  INFO("sha: " << sha.dump());
  // ASHA keeps trial 0, alone at step 8, to the end; trial 1 loses to it at the last rung.
  CHECK(asha[0].at("status") == "done");
  CHECK(asha[1].at("status") == "pruned");
  CHECK(asha[1].at("pruned_at") == 32);
  CHECK(asha[2].at("pruned_at") == 8);
  // SHA stops all three at step 8; only the best there (lr 5e-3) goes on, through steps 16 and 32.
  for (int i : {0, 2}) {
    INFO("trial " << i);
    CHECK(sha[i].at("status") == "pruned");
    CHECK(sha[i].at("pruned_at") == 8);
    CHECK(sha[i].at("steps") == 8);
  }
  CHECK(sha[1].at("status") == "done");
  const auto at = [&](const std::string& line) {
    INFO(line);
    const auto p = out.find(line);
    REQUIRE(p != std::string::npos);
    return p;
  };
  CHECK(at("trial 00 paused at step 8") < at("trial 01 started"));
  CHECK(at("trial 02 paused at step 8") < at("trial 01 goes on from rung 0"));
  CHECK(at("trial 01 goes on from rung 0") < at("trial 00 pruned at step 8"));
  CHECK(at("trial 00 pruned at step 8") < at("trial 01 done"));
  // A pause changes nothing in the run it stops: trial 1's values at steps 8, 16 and 32 are
  // those of its uninterrupted ASHA run, to the bit.
  CHECK(sha[1].at("rungs").size() == 3);
  CHECK(sha[1].at("rungs") == asha[1].at("rungs"));
  CHECK(out.find("best: trial 01") != std::string::npos);
}
