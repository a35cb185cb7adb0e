// End-to-end runs of the `ft` binary on a small text task made in the test:
// train, save, resume, eval and predict agree with each other.
#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <torch/version.h>

#include "ft/io/safetensors.h"
#include "ft_run.h"

namespace {

namespace fsys = std::filesystem;

// "good"/"bad" reviews: learnable in a few dozen steps by a tiny model.
void write_task(const fsys::path& dir) {
  std::ofstream vocab(dir / "vocab.txt");
  for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film", "plot", "the",
                        "very", "was", "a", "##s", "!"})
    vocab << t << "\n";
  std::ofstream data(dir / "train.jsonl");
  const char* good[] = {"the film was good", "very good plot", "good good film !", "a good film", "the plot was very good"};
  const char* bad[] = {"the film was bad", "very bad plot", "bad bad film !", "a bad film", "the plot was very bad"};
  for (int i = 0; i < 16; ++i) {
    data << nlohmann::json{{"text", good[i % 5]}, {"label", "pos"}}.dump() << "\n";
    data << nlohmann::json{{"text", bad[i % 5]}, {"label", "neg"}}.dump() << "\n";
  }
  std::ofstream cfg(dir / "run.yaml");
  cfg << fmt::format(R"(model:
  config: tiny
  dropout: 0.1
data:
  train: {0}/train.jsonl
  labels: [neg, pos]
  vocab: {0}/vocab.txt
  dev_fraction: 0.25
  max_seq_len: 16
train:
  epochs: 6
  batch_size: 8
  lr: 2.0e-3
  warmup_ratio: 0.1
  log_every: 1
  seed: 5
strategy:
  name: single
runtime:
  threads: 1
)",
                     dir.string());
}

std::vector<std::string> sorted_entries(const fsys::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fsys::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string flags(const fsys::path& dir, const std::string& extra) {
  return fmt::format("run --config {}/run.yaml --metrics-out {}/m.jsonl {}", dir.string(), dir.string(), extra);
}

}  // namespace

TEST_CASE("train, save, eval and predict agree on a small text task") {
  ft_test::TempDir tmp("cli");
  write_task(tmp.path());
  auto out = ft_test::run_ft(flags(tmp.path(), "--output-dir " + (tmp.path() / "out").string()));
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  auto evals = ft_test::read_events(tmp.path() / "m.jsonl", "eval");
  REQUIRE(evals.size() == 6);  // one per epoch
  const double acc = evals.back().at("accuracy").get<double>();
  CHECK(acc == 1.0);
  CHECK(evals.back().at("samples").get<int>() == 8);
  auto summary = ft_test::read_events(tmp.path() / "m.jsonl", "summary").at(0);
  CHECK(summary.at("steps").get<int>() == 18);  // 24 train rows / 8 per step * 6 epochs
  CHECK(summary.at("world_size").get<int>() == 1);

  const auto final_dir = tmp.path() / "out" / "final";
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "training_state/optimizer.safetensors",
                        "training_state/trainer_state.json", "training_state/run.yaml"}) {
    INFO(f);
    CHECK(fsys::exists(final_dir / f));
  }
  auto weights = ft::safetensors::load((final_dir / "model.safetensors").string());
  auto word = std::find_if(weights.begin(), weights.end(),
                           [](const auto& w) { return w.first == "bert.embeddings.word_embeddings.weight"; });
  REQUIRE(word != weights.end());
  CHECK(word->second.size(0) == 15);  // random init sized to the vocab
  CHECK(weights.size() == 41);

  auto ev = ft_test::run_ft(fmt::format("eval --config {}/run.yaml --checkpoint {}", tmp.path().string(),
                                        final_dir.string()));
  INFO(ev.output);
  CHECK(ev.exit_code == 0);
  CHECK(ev.output.find("accuracy 1.0000") != std::string::npos);

  // eval tokenises as training did: the checkpoint's model_max_length (16)
  // beats the config's max_seq_len; --max-length beats both. At 3 tokens
  // most rows lose the word that decides them.
  {
    std::ifstream in(tmp.path() / "run.yaml");
    std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    yaml.replace(yaml.find("max_seq_len: 16"), 15, "max_seq_len: 3");
    std::ofstream(tmp.path() / "short.yaml") << yaml;
  }
  auto ev_ckpt_len = ft_test::run_ft(fmt::format("eval --config {}/short.yaml --checkpoint {}", tmp.path().string(),
                                                 final_dir.string()));
  INFO(ev_ckpt_len.output);
  CHECK(ev_ckpt_len.output.find("accuracy 1.0000") != std::string::npos);
  auto ev_short = ft_test::run_ft(fmt::format("eval --config {}/run.yaml --checkpoint {} --max-length 3",
                                              tmp.path().string(), final_dir.string()));
  INFO(ev_short.output);
  CHECK(ev_short.exit_code == 0);
  CHECK(ev_short.output.find("accuracy 1.0000") == std::string::npos);

  // A file with other column names: --text-field / --label-field, as on ft run.
  {
    std::ofstream csv(tmp.path() / "renamed.csv");
    csv << "review,sentiment\nthe film was good,pos\nthe plot was very bad,neg\na good film,pos\n";
  }
  auto ev_fields = ft_test::run_ft(fmt::format("eval --checkpoint {} --data {}/renamed.csv --text-field review "
                                               "--label-field sentiment",
                                               final_dir.string(), tmp.path().string()));
  INFO(ev_fields.output);
  CHECK(ev_fields.exit_code == 0);
  CHECK(ev_fields.output.find("(3 rows)") != std::string::npos);
  CHECK(ev_fields.output.find("accuracy 1.0000") != std::string::npos);

  auto pred = ft_test::run_ft(fmt::format("predict --checkpoint {} 'a very good film' 'the plot was bad'",
                                          final_dir.string()));
  INFO(pred.output);
  REQUIRE(pred.exit_code == 0);
  std::istringstream lines(pred.output);
  std::string l1, l2;
  std::getline(lines, l1);
  std::getline(lines, l2);
  auto j1 = nlohmann::json::parse(l1), j2 = nlohmann::json::parse(l2);
  CHECK(j1.at("label") == "pos");
  CHECK(j2.at("label") == "neg");
  const double p = j1.at("probabilities").at("pos").get<double>() + j1.at("probabilities").at("neg").get<double>();
  CHECK(std::abs(p - 1.0) < 1e-6);
}

TEST_CASE("resume continues the exact loss curve, dropout RNG included") {
  ft_test::TempDir tmp("resume");
  write_task(tmp.path());
  const auto base = tmp.path() / "full";
  auto full = ft_test::run_ft(flags(tmp.path(), "--max-steps 8 --set train.save_every=4 --output-dir " + base.string()));
  INFO(full.output);
  REQUIRE(full.exit_code == 0);
  const auto all = ft_test::step_losses(tmp.path() / "m.jsonl");
  REQUIRE(all.size() == 8);
  auto resumed = ft_test::run_ft(flags(tmp.path(), "--max-steps 8 --resume " + (base / "checkpoint-4").string()));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto tail = ft_test::step_losses(tmp.path() / "m.jsonl");
  REQUIRE(tail.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(tail[i] == doctest::Approx(all[4 + i]).epsilon(1e-6));
}

TEST_CASE("bad input: one line naming the culprit, non-zero exit") {
  ft_test::TempDir tmp("bad");
  write_task(tmp.path());
  auto unknown = ft_test::run_ft(flags(tmp.path(), "--strategy nosuch"));
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.output.find("nosuch") != std::string::npos);
  CHECK(unknown.output.find("single") != std::string::npos);  // lists the known ones
  auto key = ft_test::run_ft(flags(tmp.path(), "--set train.lrr=1"));
  CHECK(key.exit_code != 0);
  CHECK(key.output.find("did you mean 'train.lr'") != std::string::npos);
  // An error thrown inside a plugin outlives the plugin's library during
  // unwinding: it must still end as a clean exit 1, not a crash.
  auto plugin_error = ft_test::run_ft(flags(tmp.path(), "--strategy ddp --set strategy.options.bogus=1"));
  CHECK(plugin_error.exit_code == 1);
  CHECK(plugin_error.output.find("strategy.options.bogus") != std::string::npos);
  // TrainingArguments' names without an ft flag are refused by name, with the reason.
  auto neftune = ft_test::run_ft(flags(tmp.path(), "--neftune_noise_alpha 5"));
  CHECK(neftune.exit_code != 0);
  CHECK(neftune.output.find("ft: error: --neftune_noise_alpha: NEFTune embedding noise is not in ft; remove it") !=
        std::string::npos);
  auto other = ft_test::run_ft(flags(tmp.path(), "--eval_accumulation_steps 2"));
  CHECK(other.exit_code != 0);
  CHECK(other.output.find("--eval_accumulation_steps: TrainingArguments' eval_accumulation_steps has no `ft run` "
                          "flag; put it in a JSON file for --training-args") != std::string::npos);
  auto missing = ft_test::run_ft("eval --checkpoint /nonexistent/ckpt");
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("ft: error:") != std::string::npos);
  // fp16 on the CPU (an imported DeepSpeed / TrainingArguments fp16 config
  // lands here): LibTorch 1.13's CPU autocast has only bf16. Later LibTorch
  // may train it; where it cannot, the line says what to do.
  auto fp16 = ft_test::run_ft(flags(tmp.path(), "--precision fp16 --max-steps 1"));
  INFO(fp16.output);
  if (fp16.exit_code != 0) {
    CHECK(fp16.output.find("ft: error: strategy.precision: fp16 needs a CUDA device") != std::string::npos);
    CHECK(fp16.output.find("use --precision bf16 on CPU") != std::string::npos);
  }
#if TORCH_VERSION_MAJOR < 2
  CHECK(fp16.exit_code == 1);
#endif
}

TEST_CASE("checkpoint rotation keeps the newest save_total_limit, never the best") {
  ft_test::TempDir tmp("rotate");
  write_task(tmp.path());
  const auto out_dir = tmp.path() / "out";
  // 3 steps per epoch, eval per epoch: the best checkpoint is the one saved after the best eval.
  auto run = ft_test::run_ft(flags(tmp.path(), "--max-steps 12 --set train.save_every=2 --set train.save_total_limit=2 "
                                               "--set train.best_metric=loss --output-dir " + out_dir.string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::vector<std::string> kept = sorted_entries(out_dir);
  // Saves at 2,4,6,8,10 (step 12 is `final`); evals after steps 3,6,9,12 with a falling loss,
  // so the best is always the newest save and rotation keeps exactly the two newest.
  CHECK(kept == std::vector<std::string>{"checkpoint-10", "checkpoint-8", "final", "report.html"});
}

TEST_CASE("save_each_epoch checkpoints every epoch but the last, which is final; eval_batch_size changes no metric") {
  ft_test::TempDir tmp("epochs");
  write_task(tmp.path());
  const auto out_dir = tmp.path() / "out";
  // 3 steps per epoch; save_every=6 lands on the end of epoch 2: saved once.
  auto run = ft_test::run_ft(flags(tmp.path(), "--max-steps 9 --set train.save_each_epoch=true --set train.save_every=6 "
                                               "--set train.save_total_limit=0 --output-dir " + out_dir.string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::vector<std::string> kept = sorted_entries(out_dir);
  CHECK(kept == std::vector<std::string>{"checkpoint-3", "checkpoint-6", "final", "report.html"});

  auto eval_line = [&](const std::string& extra) {
    auto ev = ft_test::run_ft(fmt::format("eval --config {}/run.yaml --checkpoint {} {}", tmp.path().string(),
                                          (out_dir / "final").string(), extra));
    REQUIRE(ev.exit_code == 0);
    return ev.output;
  };
  const std::string by_8 = eval_line("");
  CHECK(by_8.find("accuracy") != std::string::npos);
  CHECK(eval_line("--set train.eval_batch_size=3") == by_8);
}

TEST_CASE("ft vocab build makes a vocabulary the run can use") {
  ft_test::TempDir tmp("vocab");
  write_task(tmp.path());
  const auto vocab = tmp.path() / "built.txt";
  auto built = ft_test::run_ft(fmt::format("vocab build --config {}/run.yaml --out {} --size 60 --min-frequency 1",
                                           tmp.path().string(), vocab.string()));
  INFO(built.output);
  REQUIRE(built.exit_code == 0);
  const std::string text = ft_test::read_text(vocab);
  CHECK(text.rfind("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", 0) == 0);
  CHECK(text.find("\ngood\n") != std::string::npos);
  auto run = ft_test::run_ft(flags(tmp.path(), "--max-steps 2 --set data.vocab=" + vocab.string()));
  INFO(run.output);
  CHECK(run.exit_code == 0);
}

TEST_CASE("ft config show: a DeepSpeed config becomes strategy and precision; one warning line per unsupported key") {
  const auto ds = ft_test::source_dir() / "tests" / "data" / "ds_zero2_bf16.json";
  auto shown = ft_test::run_ft("config show --deepspeed " + ds.string());
  INFO(shown.output);
  REQUIRE(shown.exit_code == 0);
  CHECK(shown.output.find("\n  name: zero2\n") != std::string::npos);
  CHECK(shown.output.find("\n  precision: bf16\n") != std::string::npos);

  ft_test::TempDir tmp("cli_import");
  std::ofstream(tmp.path() / "ds.json") << R"({"zero_optimization": {"stage": 3}, "flux_capacitor": 88})";
  auto one = ft_test::run_ft("config show --deepspeed " + (tmp.path() / "ds.json").string() + " --set train.lr=3e-4");
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  std::istringstream lines(one.output);
  int warnings = 0;
  for (std::string line; std::getline(lines, line);) warnings += line.find("warning:") != std::string::npos ? 1 : 0;
  CHECK(warnings == 1);
  CHECK(one.output.find("ds.json: flux_capacitor: not a DeepSpeed key ft maps; ignored") != std::string::npos);
  CHECK(one.output.find("\n  name: zero3\n") != std::string::npos);
  CHECK(one.output.find("\n  lr: 0.0003\n") != std::string::npos);

  // A key that would change the run: one error line, non-zero exit.
  std::ofstream(tmp.path() / "bad.json") << R"({"optimizer": {"type": "OneBitAdam"}})";
  auto bad = ft_test::run_ft("config show --deepspeed " + (tmp.path() / "bad.json").string());
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("bad.json: optimizer.type: 'OneBitAdam' is not in ft") != std::string::npos);
}
