// The first hour of a Hugging Face user (issue 31): their own data, eval
// from a checkpoint, and a CLI that meets their habits. Every case runs the
// real `ft` binary; the embedded default's model and vocab are replaced by
// the tiny task's, so nothing here needs data/.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <torch/version.h>

#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;

// The tiny task's model and vocab in place of the default's (data/ may be absent).
std::string tiny_model(const fsys::path& dir) {
  return fmt::format("--set model.config={0}/config.json --set model.weights= --set data.vocab={0}/vocab.txt "
                     "--set data.max_seq_len=16 --threads 1",
                     dir.string());
}

// A 3-label CSV with a `sentence` column, as a user brings it.
void write_csv(const fsys::path& file, int rows) {
  std::ofstream out(file);
  out << "sentence,label\n";
  const char* text[] = {"the film was bad", "the film was", "the film was good", "a bad plot", "a plot", "a good plot"};
  const char* label[] = {"negative", "neutral", "positive"};
  for (int i = 0; i < rows; ++i) out << text[i % 6] << "," << label[i % 3] << "\n";
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("own data: all rows, labels from the file, no dev split, an output dir named after the data") {
  ft_test::TempDir tmp("first_own");
  ft_test::write_tiny_task(tmp.path());
  write_csv(tmp.path() / "mine.csv", 300);
  const auto shown = ft_test::run_ok("config show --data " + (tmp.path() / "mine.csv").string() + " --text-field sentence " +
                                     tiny_model(tmp.path()));
  CHECK(shown.find("\n  max_rows: 0\n") != std::string::npos);
  CHECK(shown.find("\n  take: first\n") != std::string::npos);
  CHECK(shown.find("\n  dev_fraction: 0\n") != std::string::npos);
  CHECK(shown.find("\n  output_dir: runs/mine\n") != std::string::npos);
  CHECK(shown.find("from the embedded default (configs/default.yaml") != std::string::npos);
  // --set data.train is the same as --data.
  const auto set = ft_test::run_ok("config show --set data.train=mine.csv");
  CHECK(set.find("\n  output_dir: runs/mine\n") != std::string::npos);
  CHECK(set.find("labels: [neg, pos]") == std::string::npos);

  const auto out = ft_test::run_ft("run --data mine.csv --text-field sentence --max-steps 2 " + tiny_model(tmp.path()), "",
                                   tmp.path());
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  CHECK(out.output.find("300 train / 0 dev rows, 3 labels") != std::string::npos);
  const auto saved = nlohmann::json::parse(ft_test::read_text(tmp.path() / "runs/mine/final/config.json"));
  CHECK(saved.at("id2label").at("0") == "negative");  // sorted, as HF's ClassLabel
  CHECK(saved.at("id2label").at("2") == "positive");
}

TEST_CASE("end to end: a 3-label CSV of 15 000 rows trains on 2 ranks and evaluates from another directory") {
  ft_test::TempDir tmp("first_e2e");
  ft_test::write_tiny_task(tmp.path());
  write_csv(tmp.path() / "mine.csv", 15000);
  const auto run = ft_test::run_ft("run --data mine.csv --text-field sentence --nproc 2 --max-steps 20 " +
                                       tiny_model(tmp.path()),
                                   "", tmp.path());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("15000 train / 0 dev rows, 3 labels") != std::string::npos);
  CHECK(run.output.find("2 processes and no --strategy: using ddp") != std::string::npos);
  CHECK(fsys::exists(tmp.path() / "runs/mine/final/model.safetensors"));

  fsys::create_directories(tmp.path() / "elsewhere");
  const auto ev = ft_test::run_ft("eval --checkpoint ../runs/mine/final --data ../mine.csv", "", tmp.path() / "elsewhere");
  INFO(ev.output);
  CHECK(ev.exit_code == 0);
  CHECK(ev.output.find("evaluating checkpoint ../runs/mine/final (step 20) on ../mine.csv (15000 rows), labels "
                       "negative, neutral, positive") != std::string::npos);
  CHECK(ev.output.find("accuracy") != std::string::npos);
  CHECK(ev.output.find("eval step 20:") != std::string::npos);

  // Re-heading (as from_pretrained(..., num_labels=4, ignore_mismatched_sizes=True)):
  // the 3-label checkpoint fine-tuned on a 4-label file gets a new classifier, said in one line each.
  {
    std::ofstream four(tmp.path() / "four.csv");
    four << "sentence,label\n";
    const char* labels[] = {"negative", "neutral", "positive", "mixed"};
    for (int i = 0; i < 400; ++i) four << (i % 2 ? "the film was good" : "a bad plot") << "," << labels[i % 4] << "\n";
  }
  const auto rehead = ft_test::run_ft("run --data four.csv --text-field sentence --max-steps 2 --threads 1 "
                                      "--set data.max_seq_len=16 --set model.config=runs/mine/final --output-dir runs/four",
                                      "", tmp.path());
  INFO(rehead.output);
  REQUIRE(rehead.exit_code == 0);
  CHECK(rehead.output.find("re-heading: the weights classify into [negative, neutral, positive], the data into "
                           "[mixed, negative, neutral, positive]: new classifier") != std::string::npos);
  CHECK(rehead.output.find("runs/mine/final: classifier replaced and newly initialised (as ignore_mismatched_sizes=True): "
                           "classifier.weight: 3x") != std::string::npos);
  const auto four = nlohmann::json::parse(ft_test::read_text(tmp.path() / "runs/four/final/config.json"));
  CHECK(four.at("id2label").size() == 4);
  CHECK(four.at("id2label").at("0") == "mixed");

  // Same size, other names: the classifier is replaced too (a 3-way head for other classes means nothing).
  {
    std::ofstream other(tmp.path() / "other.csv");
    other << "sentence,label\n";
    const char* labels[] = {"bad", "fine", "good"};
    for (int i = 0; i < 300; ++i) other << "the film was good," << labels[i % 3] << "\n";
  }
  const auto renamed = ft_test::run_ft("run --data other.csv --text-field sentence --max-steps 1 --threads 1 "
                                       "--set data.max_seq_len=16 --set model.config=runs/mine/final --output-dir runs/other",
                                       "", tmp.path());
  INFO(renamed.output);
  REQUIRE(renamed.exit_code == 0);
  CHECK(renamed.output.find("runs/mine/final: classifier replaced and newly initialised (as ignore_mismatched_sizes=True): "
                            "classifier.weight: new label set; classifier.bias: new label set") != std::string::npos);
}

TEST_CASE("eval: the checkpoint's run and labels, a file's labels mapped by name, any working directory") {
  ft_test::TempDir tmp("first_eval");
  ft_test::write_tiny_task(tmp.path());
  ft_test::run_ok(fmt::format("run --config {0}/run.yaml --max-steps 3 --output-dir {0}/out", tmp.path().string()));
  // The labels in another order and only some of them: mapped by name.
  std::ofstream(tmp.path() / "other.jsonl") << R"({"text": "a good film", "label": "pos"})"
                                            << "\n"
                                            << R"({"text": "a bad film", "label": "pos"})"
                                            << "\n";
  const auto ev = ft_test::run_ft("eval --checkpoint out/final --data other.jsonl", "", tmp.path());
  INFO(ev.output);
  CHECK(ev.exit_code == 0);
  CHECK(ev.output.find("(2 rows), labels neg, pos") != std::string::npos);
  // A label the model never saw: one line naming it and the model's labels.
  std::ofstream(tmp.path() / "unseen.jsonl") << R"({"text": "a good film", "label": "meh"})" << "\n";
  const auto bad = ft_test::run_ft("eval --checkpoint out/final --data unseen.jsonl", "", tmp.path());
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("unknown label 'meh' (label names: neg, pos)") != std::string::npos);
  // Without --data: the run's own data (its run.yaml), which has no dev split here.
  const auto none = ft_test::run_ft("eval --checkpoint out/final", "", tmp.path());
  CHECK(none.exit_code == 1);
  CHECK(none.output.find("no dev data; pass --data FILE") != std::string::npos);
}

TEST_CASE("a run with nowhere to save warns once; a non-empty output dir is refused") {
  ft_test::TempDir tmp("first_out");
  ft_test::write_tiny_task(tmp.path());
  const std::string base = fmt::format("run --config {}/run.yaml --max-steps 1", tmp.path().string());
  const auto nowhere = ft_test::run_ft(base);
  INFO(nowhere.output);
  CHECK(nowhere.exit_code == 0);
  CHECK(count(nowhere.output, "train.output_dir is not set: this run saves no checkpoint") == 1);

  fsys::create_directories(tmp.path() / "old");
  std::ofstream(tmp.path() / "old" / "keep.txt") << "an earlier run\n";
  const auto refused = ft_test::run_ft(base + " --output-dir " + (tmp.path() / "old").string());
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("is not empty (an earlier run?); pass --overwrite-output-dir") != std::string::npos);
  CHECK(!fsys::exists(tmp.path() / "old" / "final"));
  ft_test::run_ok(base + " --output-dir " + (tmp.path() / "old").string() + " --overwrite-output-dir");
  CHECK(fsys::exists(tmp.path() / "old" / "final"));
}

TEST_CASE("--nproc with no strategy is ddp; a distributed strategy on one process says so") {
  const auto two = ft_test::run_ok("config show --nproc 2");
  CHECK(two.find("\n  name: ddp\n") != std::string::npos);
  CHECK(two.find("# launch: --nproc 2") != std::string::npos);
  CHECK(two.find("2 processes and no --strategy: using ddp") != std::string::npos);
  const auto one = ft_test::run_ok("config show --strategy ddp");
  CHECK(one.find("strategy ddp on 1 process: running one rank") != std::string::npos);
  // An explicit strategy is kept.
  CHECK(ft_test::run_ok("config show --nproc 2 --strategy zero2").find("\n  name: zero2\n") != std::string::npos);
}

TEST_CASE("HF habits: --lr, --max_steps, --learning_rate and --set learning_rate map to ft keys") {
  const auto flags = ft_test::run_ok("config show --lr 3e-5 --max_steps 5 --batch-size 8 --epochs 2");
  CHECK(flags.find("\n  lr: 3e-05\n") != std::string::npos);
  CHECK(flags.find("\n  max_steps: 5\n") != std::string::npos);
  CHECK(flags.find("\n  batch_size: 8\n") != std::string::npos);
  CHECK(flags.find("\n  epochs: 2\n") != std::string::npos);
  const auto hf = ft_test::run_ok("config show --learning_rate 4e-5 --set per_device_train_batch_size=16");
  CHECK(hf.find("\n  lr: 4e-05\n") != std::string::npos);
  CHECK(hf.find("\n  batch_size: 16\n") != std::string::npos);
  CHECK(hf.find("--learning_rate: Hugging Face's name for train.lr") != std::string::npos);
  CHECK(hf.find("--set per_device_train_batch_size: Hugging Face's name for train.batch_size") != std::string::npos);
}

TEST_CASE("config show takes run's flags and shows the launch run would start") {
  const auto shown = ft_test::run_ok("config show --strategy zero2 --precision bf16 --nproc 3");
  CHECK(shown.find("\n  name: zero2\n") != std::string::npos);
  CHECK(shown.find("\n  precision: bf16\n") != std::string::npos);
  CHECK(shown.find("# launch: --nproc 3") != std::string::npos);
  const auto acc = ft_test::source_dir() / "tests" / "data" / "accelerate_fsdp.yaml";
  const auto over = ft_test::run_ok("config show --accelerate-config " + acc.string() + " --nproc 4");
  CHECK(over.find("# launch: --nproc 4") != std::string::npos);
  CHECK(over.find("--nproc 2") == std::string::npos);
}

TEST_CASE("logs: piped step lines carry elapsed time and ETA; the report prints once; eval says what it evaluated") {
  ft_test::TempDir tmp("first_logs");
  ft_test::write_tiny_task(tmp.path());
  const auto out = ft_test::run_ft(fmt::format("run --config {0}/run.yaml --set data.dev_fraction=0.25 --set train.eval_every=2 "
                                               "--max-steps 6 --output-dir {0}/out",
                                               tmp.path().string()));
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  CHECK(out.output.find("step 3/6 epoch 0 loss") != std::string::npos);
  CHECK(out.output.find(" elapsed, ETA ") != std::string::npos);
  CHECK(count(out.output, "eval step ") >= 3);
  CHECK(count(out.output, "weighted avg") == 1);  // the per-label table, at the end only

  const auto ev = ft_test::run_ft(fmt::format("eval --checkpoint {0}/out/final", tmp.path().string()));
  INFO(ev.output);
  CHECK(ev.exit_code == 0);
  CHECK(ev.output.find(fmt::format("evaluating checkpoint {}/out/final (step 6) on", tmp.path().string())) !=
        std::string::npos);
  CHECK(ev.output.find("the run's dev split") != std::string::npos);
  CHECK(ev.output.find("eval step 6:") != std::string::npos);
}

TEST_CASE("fp16 on CPU is refused before any worker starts; foreign strategy names answer with ft's") {
#if TORCH_VERSION_MAJOR < 2  // LibTorch 1.13's CPU autocast has no fp16
  const auto fp16 = ft_test::run_ft("run --precision fp16 --nproc 2");
  CHECK(fp16.exit_code == 1);
  CHECK(fp16.output.find("fp16 needs a CUDA device") != std::string::npos);
  CHECK(fp16.output.find("rank 1") == std::string::npos);
#endif
  const auto ds = ft_test::run_ft("run --strategy deepspeed");
  CHECK(ds.exit_code == 1);
  CHECK(ds.output.find("--strategy zero2") != std::string::npos);
  CHECK(ft_test::run_ft("run --strategy fsdp2").output.find("is --strategy fsdp") != std::string::npos);
  CHECK(ft_test::run_ft("run --strategy accelerate").output.find("--accelerate-config FILE") != std::string::npos);
}

TEST_CASE("data: empty texts and singleton labels warn once each; skipped rows are listed with their reason") {
  ft_test::TempDir tmp("first_data");
  ft_test::write_tiny_task(tmp.path());
  {
    std::ofstream data(tmp.path() / "train.jsonl", std::ios::app);
    data << R"({"text": "", "label": "pos"})" << "\n" << R"({"text": "a film", "label": "typo"})" << "\n";
    data << R"({"text": "a film"})" << "\n";
  }
  const auto out = ft_test::run_ft(fmt::format("run --config {0}/run.yaml --max-steps 1 --set data.labels=[] "
                                               "--set data.bad_rows=skip",
                                               tmp.path().string()));
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  CHECK(count(out.output, "row(s) have an empty text") == 1);
  CHECK(out.output.find("label(s) 'typo' occur in one row only") != std::string::npos);
  CHECK(out.output.find("skipped 1 bad row(s) (data.bad_rows=skip); the first: ") != std::string::npos);
  CHECK(out.output.find("train.jsonl: row 99: ") != std::string::npos);
}

TEST_CASE("CLI: --version, bare ft shows help, eval's help offers only what eval takes, predict's key order") {
  const auto version = ft_test::run_ok("--version");
  CHECK(version.find("ft 0.") == 0);
  CHECK(version.find("LibTorch ") != std::string::npos);
  CHECK(version.find("BLAS ") != std::string::npos);
  CHECK(version.find("plugin ABI ") != std::string::npos);
  const auto bare = ft_test::run_ft("");
  CHECK(bare.exit_code == 0);
  CHECK(bare.output.find("Subcommands:") != std::string::npos);
  const auto help = ft_test::run_ok("eval --help");
  CHECK(help.find("--deepspeed") == std::string::npos);
  CHECK(help.find("--checkpoint") != std::string::npos);

  ft_test::TempDir tmp("first_predict");
  ft_test::write_tiny_task(tmp.path());
  ft_test::run_ok(fmt::format("run --config {0}/run.yaml --max-steps 1 --output-dir {0}/out", tmp.path().string()));
  const auto pred = ft_test::run_ok(fmt::format("predict --checkpoint {}/out/final 'a good film'", tmp.path().string()));
  CHECK(pred.find(R"({"text":"a good film","label":")") == 0);
  CHECK(pred.find(R"(","probabilities":{"neg":)") != std::string::npos);
}

TEST_CASE("config problems of every section and of a DeepSpeed file come in one line") {
  const auto two = ft_test::run_ft("config show --set train.lr=0 --set data.format=xml");
  CHECK(two.exit_code == 1);
  CHECK(two.output.find("2 problems: ") != std::string::npos);
  CHECK(two.output.find("data.format: unknown value 'xml'") != std::string::npos);
  CHECK(two.output.find("train.lr: must be > 0") != std::string::npos);

  ft_test::TempDir tmp("first_ds");
  std::ofstream(tmp.path() / "ds.json")
      << R"({"optimizer": {"type": "OneBitAdam"}, "curriculum_learning": {"enabled": true}, "elasticity": {}})";
  const auto ds = ft_test::run_ft("config show --deepspeed " + (tmp.path() / "ds.json").string());
  INFO(ds.output);
  CHECK(ds.exit_code == 1);
  CHECK(ds.output.find("3 problems: ") != std::string::npos);
  CHECK(ds.output.find("optimizer.type: 'OneBitAdam'") != std::string::npos);
  CHECK(ds.output.find("curriculum_learning: changes what is trained") != std::string::npos);
  CHECK(ds.output.find("elasticity: changes what is trained") != std::string::npos);
}

TEST_CASE("auto estimates memory for the batch and length the run uses") {
  ft_test::TempDir tmp("first_auto");
  ft_test::write_tiny_task(tmp.path());
  const auto out = ft_test::run_ft(fmt::format("run --config {}/run.yaml --strategy auto --nproc 2 --max-steps 1 "
                                               "--set train.batch_size=8",
                                               tmp.path().string()));
  INFO(out.output);
  CHECK(out.exit_code == 0);
  CHECK(out.output.find("per-rank batch 8 x 12 tokens") != std::string::npos);
}

TEST_CASE("terminal: the logged step lines stay in the scrollback above the live bar") {
  if (std::system("command -v script >/dev/null 2>&1") != 0) return;  // util-linux's script gives ft a terminal
  ft_test::TempDir tmp("first_tty");
  ft_test::write_tiny_task(tmp.path());
  const std::string cmd = fmt::format(
      "script -qec \"'{}' run --config {}/run.yaml --max-steps 6 --set train.log_every=2\" /dev/null 2>&1",
      ft_test::ft_exe().string(), tmp.path().string());
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  ::pclose(pipe);
  INFO(out);
  CHECK(out.find("] 5/6") != std::string::npos);  // the bar was drawn
  for (const char* line : {"step 2/6 epoch 0 loss", "step 4/6 epoch 0 loss", "step 6/6 epoch 0 loss"}) {
    CHECK(out.find(line) != std::string::npos);
  }
  // Each step line starts on a cleared line, so the bar it replaces leaves no trace in it.
  CHECK(out.find("\r\033[Kstep 4/6") != std::string::npos);
}
