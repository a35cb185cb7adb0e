// `ft bench`: the strategy matrix that reproduces the seeds' timing table
// (BENCHMARK.md). Every row runs `ft run` in fresh processes with the same
// CPU budget; the summaries become results.{json,csv,md} and chart.svg.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before {fmt} 11, e.g. the copy in LibTorch 2.x wheels)
#include <nlohmann/json.hpp>

#include "bench_proc.h"
#include "commands.h"
#include "bench_report.h"
#include "ft/parallel/abilities.h"
#include "ft/config/config.h"
#include "ft/parallel/cost_model.h"
#include "ft/base/error.h"
#include "ft/comm/launcher.h"
#include "ft/model/model.h"
#include "ft/config/options.h"
#include "ft/plugin/plugin_host.h"
#include "ft/tasks/run_inputs.h"
#include "ft/parallel/strategy.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;

struct BenchFlags {
  std::string workload = "mini";
  std::string strategies;  // comma list of row ids; empty: all installed
  int nproc = 2;
  int64_t steps = -1;  // -1: the workload's default
  std::string out = "bench-out";
  std::vector<std::string> sets;
  std::vector<std::string> plugin_dirs;
  int cores = 0;  // 0: hardware_concurrency
  int global_batch = 32;
  double row_timeout_s = 1800;
  std::string machine;
  bool memory_model = false;
  std::vector<std::string> argv;
};

/// How a row's processes are started. A strategy that says it runs in one
/// process (the OneProcess ability: single, dp) gets one with all the cores
/// instead, and the row's ranks through its ranks_option().
enum class Launch {
  Spawn,     // ft run --nproc N
  External,  // N plain `ft run` processes from torchrun-style variables
};

struct RowDef {
  std::string id, label, strategy;
  Launch launch = Launch::Spawn;
  std::string seed_row;
  double seed_minutes = std::nan("");
  std::vector<std::string> sets;  // row-specific overrides (before the user's)
  /// > 0: the ranks split the model, not the data (pipeline stages, a
  /// tensor-parallel group), so the whole global batch goes through them,
  /// in this many micro-batches (train.grad_accum).
  int micro_batches = 0;
};

/// The seed table's rows in its order (BENCHMARK.md's mapping), with the
/// seeds' minutes. `trainer` and `ddp_launcher` are rows, not strategies.
std::vector<RowDef> known_rows() {
  return {
      {"single", "single", "single", Launch::Spawn, "single GPU", 2.8276, {}},
      {"dp", "dp", "dp", Launch::Spawn, "DataParallel", 2.0301, {}},
      {"ddp_launcher", "ddp (external launcher)", "ddp", Launch::External, "torch.distributed.launch", 1.4120, {}},
      {"ddp", "ddp (ft run --nproc)", "ddp", Launch::Spawn, "mp.spawn", 1.4921, {}},
      {"ddp_amp", "ddp_amp", "ddp_amp", Launch::Spawn, "mp.spawn + amp", 0.6336, {}},
      {"horovod", "horovod (fp16 compression)", "horovod", Launch::Spawn, "horovod, fp16 compression", 5.1228,
       {"strategy.options.compression=fp16"}},
      {"zero1", "zero1", "zero1", Launch::Spawn, "deepspeed (ran ZeRO-3)", 1.0114, {}},
      {"zero2", "zero2", "zero2", Launch::Spawn, "deepspeed (ran ZeRO-3)", 1.0114, {}},
      {"zero3", "zero3", "zero3", Launch::Spawn, "deepspeed ZeRO-3", 1.0114, {}},
      {"auto", "auto", "auto", Launch::Spawn, "accelerate", 1.3667, {}},
      {"trainer", "Trainer preset", "ddp_amp", Launch::Spawn, "Trainer fp16", 0.4900, {}},
      {"fsdp", "fsdp", "fsdp", Launch::Spawn, "", std::nan(""), {}},
      {"pipeline", "pipeline (1f1b, 4 micro-batches)", "pipeline", Launch::Spawn, "", std::nan(""), {}, 4},
      {"tensor", "tensor (Megatron)", "tensor", Launch::Spawn, "", std::nan(""), {}, 1},
  };
}

struct Workload {
  std::string label, config;
  int64_t default_steps = 0;
};

// The bench configs name their fixtures from the repository root
// (../shared/fixtures/...): the rows run there, wherever ft bench was started.
// The working directory when it is a checkout, else the one ft was built in
// (build/bin/ft); empty for an installed ft.
fsys::path repo_root() {
  if (fsys::exists("configs/bench-mini.yaml")) return fsys::current_path();
  const fsys::path exe = fsys::read_symlink("/proc/self/exe");
  for (fsys::path p = exe.parent_path(); p.has_relative_path(); p = p.parent_path()) {
    if (fsys::exists(p / "configs" / "bench-mini.yaml")) return p;
  }
  return {};
}

Workload resolve_workload(const std::string& name, const fsys::path& repo) {
  struct Named {
    const char* name;
    const char* file;
    int64_t steps;
  };
  // mini: 20 steps keeps the whole matrix well inside 15 minutes on 2 cores.
  static const Named kNamed[] = {{"tiny", "configs/bench-tiny.yaml", 0},
                                 {"mini", "configs/bench-mini.yaml", 20},
                                 {"weibo", "configs/bench-weibo.yaml", 0},
                                 {"imdb", "configs/bench-imdb.yaml", 0}};
  for (const auto& n : kNamed) {
    if (name == n.name) {
      if (repo.empty()) {
        fail("--workload {}: {} not found; run ft bench from the repository root or pass --workload <config.yaml>",
             name, n.file);
      }
      return {name, n.file, n.steps};
    }
  }
  if (!fsys::exists(name)) fail("--workload {}: neither tiny|mini|weibo|imdb nor an existing config file", name);
  // The rows run from the repository root: a file of the user's is named absolutely.
  return {name, repo.empty() ? name : fsys::absolute(name).string(), 0};
}

// Everything a row needs, checked before the first row runs: a matrix that
// cannot work fails in one line, not once per row.
void preflight(const std::vector<RowDef>& rows, const BenchFlags& flags, const Workload& wl) {
  std::vector<fsys::path> dirs(flags.plugin_dirs.begin(), flags.plugin_dirs.end());
  const PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(dirs));
  std::vector<std::string> installed;
  for (const auto& info : host.list()) installed.push_back(info.name);
  for (const auto& r : rows) {
    if (std::find(installed.begin(), installed.end(), r.strategy) == installed.end()) {
      fail("--strategies: unknown strategy '{}' (row {}); installed: {}", r.strategy, r.id, fmt::join(installed, ", "));
    }
  }
  const RunConfig c = load_config(wl.config, flags.sets);
  std::vector<std::pair<std::string, std::string>> files{{"data.train", c.data.train}};
  for (const auto& f : c.data.dev.files) files.emplace_back(DevFiles::key(f), f.path);
  for (const auto& [key, path] : files) {
    if (!path.empty() && !fsys::exists(path)) {
      fail("--workload {}: {} {} not found from {} (scripts/fetch-data.sh, or the ../shared fixtures)", wl.label, key,
           path, fsys::current_path().string());
    }
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<RowDef> select_rows(const BenchFlags& flags) {
  std::vector<RowDef> known = known_rows();
  auto find_known = [&](const std::string& id) -> const RowDef* {
    for (const auto& r : known) {
      if (r.id == id) return &r;
    }
    return nullptr;
  };
  std::vector<RowDef> rows;
  if (!flags.strategies.empty()) {
    for (const auto& id : split_list(flags.strategies)) {
      if (const RowDef* r = find_known(id)) {
        rows.push_back(*r);
      } else {
        // Any other name is run as a distributed strategy (preflight refuses an unknown one).
        rows.push_back({id, id, id, Launch::Spawn, "", std::nan(""), {}});
      }
    }
    return rows;
  }
  std::vector<fsys::path> dirs(flags.plugin_dirs.begin(), flags.plugin_dirs.end());
  const PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(dirs));
  std::vector<std::string> installed;
  for (const auto& info : host.list()) installed.push_back(info.name);
  auto has = [&](const std::string& n) { return std::find(installed.begin(), installed.end(), n) != installed.end(); };
  for (const auto& r : known) {
    if (has(r.strategy)) rows.push_back(r);
  }
  for (const auto& name : installed) {
    if (!find_known(name)) rows.push_back({name, name, name, Launch::Spawn, "", std::nan(""), {}});
  }
  return rows;
}

std::string read_text(const fsys::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string last_summary_line(const fsys::path& metrics) {
  std::ifstream in(metrics);
  std::string found;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"event\":\"summary\"") != std::string::npos) found = line;
  }
  return found;
}

// The first line that reads like an error; else the last non-empty line.
std::string first_error_line(const std::string& log) {
  std::istringstream in(log);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("error") != std::string::npos || lower.find("terminate called") != std::string::npos) return line;
    if (!line.empty()) last = line;
  }
  return last;
}

// What the row's strategy said about itself for the table: every
// strategy event's "bench_note" (pipeline: its bubble; auto: its pick), and
// the strategy a delegating one "picked", whose theory then applies.
void read_strategy_events(const fsys::path& metrics, BenchRow& row) {
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("event", "") != "strategy" || !j.contains("data") || !j["data"].is_object()) continue;
    const auto& data = j["data"];
    if (data.contains("bench_note") && data["bench_note"].is_string()) {
      row.note += (row.note.empty() ? "" : "; ") + data["bench_note"].get<std::string>();
    }
    if (data.contains("picked") && data["picked"].is_string()) row.theory_strategy = data["picked"].get<std::string>();
  }
}

// The theory column: the formula and bytes per rank the row's strategy (or
// the one it picked) says it holds, from the model the run builds (one
// config load with the row's overrides) and the options that change it.
// Strategies without a MemoryModel leave it empty.
void fill_theory(BenchRow& row, const Workload& wl, const std::vector<std::string>& sets,
                 const std::vector<std::string>& plugin_dirs, int ranks) {
  std::vector<fsys::path> dirs(plugin_dirs.begin(), plugin_dirs.end());
  const PluginHost host = PluginHost::discover(DiscoveryOptions::from_environment(dirs));
  const std::shared_ptr<Strategy> strategy = host.create(row.theory_strategy);
  const MemoryModel* theory = strategy->ability<MemoryModel>();
  if (theory == nullptr) return;
  const RunConfig config = load_config(wl.config, sets);
  TheoryInputs in;
  for (const auto& key : theory->memory_options()) {
    auto it = config.strategy.options.find(key);
    if (it != config.strategy.options.end()) in.options.insert(*it);
  }
  // Full fine-tuning: every parameter trains.
  const EncoderModel model(planned_model_config(config));
  in.model = model_shape(model, {}, ranks);
  in.world_size = ranks;
  row.theory_formula = theory->memory_formula(in.options);
  row.theory_bytes = theory->theory_bytes(in);
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    const bool plain = !a.empty() && a.find_first_of(" \t\"'$\\|&;<>(){}*?") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

BenchRow run_row(const RowDef& def, const BenchFlags& flags, const Workload& wl, int64_t steps, int cores,
                 const fsys::path& exe, const fsys::path& row_dir) {
  BenchRow row;
  row.id = def.id;
  row.label = def.label;
  row.strategy = def.strategy;
  row.seed_row = def.seed_row;
  row.seed_minutes = def.seed_minutes;
  row.theory_strategy = def.strategy;
  fsys::remove_all(row_dir);
  fsys::create_directories(row_dir);
  const fsys::path metrics = row_dir / "metrics.jsonl";
  const fsys::path log = row_dir / "output.log";

  const std::optional<std::string> in_process = one_process_ranks(def.strategy, flags.plugin_dirs);
  const bool one_process = in_process.has_value();
  const int ranks = one_process ? 1 : flags.nproc;
  const int threads = one_process ? cores : std::max(1, cores / ranks);
  // Model-parallel ranks share each micro-batch; data-parallel ranks split the batch.
  const int batch = def.micro_batches > 0 ? std::max(1, flags.global_batch / def.micro_batches) : flags.global_batch / ranks;
  std::vector<std::string> args = {exe.string(), "run", "--config", wl.config, "--strategy", def.strategy,
                                   "--metrics-out", metrics.string(), "--threads", std::to_string(threads)};
  for (const auto& d : flags.plugin_dirs) {
    args.push_back("--plugin-dir");
    args.push_back(d);
  }
  if (steps > 0) {
    args.push_back("--max-steps");
    args.push_back(std::to_string(steps));
  }
  std::vector<std::string> sets = {fmt::format("train.batch_size={}", batch), "runtime.progress=false"};
  if (def.id == "trainer") {
    for (auto& s : trainer_preset_overrides((row_dir / "checkpoints").string())) sets.push_back(s);
  } else {
    sets.push_back("train.output_dir=\"\"");  // no checkpoints: the loop alone is timed
  }
  if (in_process && !in_process->empty()) sets.push_back(fmt::format("strategy.options.{}={}", *in_process, flags.nproc));
  if (def.micro_batches > 0) sets.push_back(fmt::format("train.grad_accum={}", def.micro_batches));
  sets.insert(sets.end(), def.sets.begin(), def.sets.end());
  sets.insert(sets.end(), flags.sets.begin(), flags.sets.end());
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }

  std::vector<ChildSpec> children;
  auto shown = [&](std::vector<std::string> a) {
    a[0] = "ft";
    return shell_join(a);
  };
  if (def.launch == Launch::External) {
    // What torchrun hands each worker; no --nproc, no FT_LAUNCHED.
    const int port = pick_free_port("127.0.0.1");
    for (int r = 0; r < ranks; ++r) {
      children.push_back({args,
                          {{"RANK", std::to_string(r)},
                           {"LOCAL_RANK", std::to_string(r)},
                           {"WORLD_SIZE", std::to_string(ranks)},
                           {"LOCAL_WORLD_SIZE", std::to_string(ranks)},
                           {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", std::to_string(port)}}});
    }
    row.command = fmt::format("RANK=0..{} WORLD_SIZE={} MASTER_ADDR=127.0.0.1 MASTER_PORT={} {}", ranks - 1, ranks,
                              port, shown(args));
  } else {
    if (!one_process) {
      args.push_back("--nproc");
      args.push_back(std::to_string(ranks));
    }
    children.push_back({args, {}});
    row.command = shown(args);
  }

  const auto t0 = Clock::now();
  const ChildrenResult result = run_children(children, log.string(), flags.row_timeout_s);
  row.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string output = read_text(log);
  const std::string summary = last_summary_line(metrics);
  if (result.exit_code == 0 && !summary.empty()) {
    fill_row_from_summary(row, summary);
    row.ok = true;
  } else if (result.timed_out) {
    row.error = fmt::format("timed out after {:.0f} s (--row-timeout)", flags.row_timeout_s);
  } else {
    row.error = first_error_line(output);
    if (row.error.empty()) row.error = result.exit_code ? fmt::format("exit code {}", result.exit_code) : "no summary in the metrics";
  }
  read_strategy_events(metrics, row);
  try {
    fill_theory(row, wl, sets, flags.plugin_dirs, ranks);
  } catch (const Error& e) {
    // A row keeps its measurements when its options have no theory.
    row.note += (row.note.empty() ? "theory: " : "; theory: ") + std::string(e.what());
  }
  return row;
}

void write_file(const fsys::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) fail("{}: cannot write", p.string());
}

int run_bench(const BenchFlags& flags) {
  if (flags.memory_model) {
    std::fputs(zero_table1_report().c_str(), stdout);
    return 0;
  }
  if (flags.nproc < 1) fail("--nproc {}: need at least 1 rank", flags.nproc);
  if (flags.global_batch < 1 || flags.global_batch % flags.nproc != 0) {
    fail("--global-batch {}: must be a positive multiple of --nproc {} (per-rank batch = global / ranks)",
         flags.global_batch, flags.nproc);
  }
  const fsys::path repo = repo_root();
  const Workload wl = resolve_workload(flags.workload, repo);
  const int64_t steps = flags.steps >= 0 ? flags.steps : wl.default_steps;
  const int cores = flags.cores > 0 ? flags.cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const fsys::path exe = fsys::read_symlink("/proc/self/exe");
  const fsys::path out_dir = fsys::absolute(flags.out);
  BenchFlags rooted = flags;
  for (auto& d : rooted.plugin_dirs) d = fsys::absolute(d).string();
  if (!repo.empty()) fsys::current_path(repo);
  const std::vector<RowDef> defs = select_rows(rooted);
  preflight(defs, rooted, wl);
  fsys::create_directories(out_dir / "rows");

  BenchReport report;
  report.workload = wl.label;
  report.config = wl.config;
  report.nproc = flags.nproc;
  report.cores = cores;
  report.global_batch = flags.global_batch;
  report.steps = steps;
  report.machine = flags.machine.empty() ? fmt::format("{}-core machine", cores) : flags.machine;
  report.command = "ft " + shell_join(flags.argv);

  std::printf("ft bench: workload %s (%s), %zu row(s), %d rank(s), %s, outputs in %s\n", wl.label.c_str(),
              wl.config.c_str(), defs.size(), flags.nproc,
              steps > 0 ? fmt::format("{} steps per row", steps).c_str() : "one epoch per row",
              out_dir.string().c_str());
  std::fflush(stdout);
  for (size_t i = 0; i < defs.size(); ++i) {
    const RowDef& def = defs[i];
    std::printf("[%zu/%zu] %-14s running...\n", i + 1, defs.size(), def.id.c_str());
    std::fflush(stdout);
    BenchRow row = run_row(def, rooted, wl, steps, cores, exe, out_dir / "rows" / def.id);
    if (row.ok) {
      std::printf("[%zu/%zu] %-14s done in %.1f s: train %.2f s, %.1f samples/s, final loss %.4f%s\n", i + 1,
                  defs.size(), def.id.c_str(), row.wall_seconds, row.train_seconds, row.samples_per_s, row.final_loss,
                  row.note.empty() ? "" : (" (" + row.note + ")").c_str());
    } else {
      std::printf("[%zu/%zu] %-14s FAILED after %.1f s: %s\n", i + 1, defs.size(), def.id.c_str(), row.wall_seconds,
                  row.error.c_str());
    }
    std::fflush(stdout);
    report.rows.push_back(std::move(row));
    // Rewritten after every row: an interrupted bench still leaves its rows.
    write_file(out_dir / "results.json", bench_json(report));
  }
  const std::string md = bench_markdown(report);
  write_file(out_dir / "results.csv", bench_csv(report));
  write_file(out_dir / "results.md", md);
  write_file(out_dir / "chart.svg", bench_svg(report));
  std::printf("\n%s\nwrote %s/results.{json,csv,md} and chart.svg\n", md.c_str(), out_dir.string().c_str());
  std::fflush(stdout);
  const bool all_ok = std::all_of(report.rows.begin(), report.rows.end(), [](const BenchRow& r) { return r.ok; });
  return all_ok ? 0 : 3;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code, const std::vector<std::string>& argv) {
  auto flags = std::make_shared<BenchFlags>();
  flags->argv = argv;
  auto* cmd = app.add_subcommand("bench", "run the strategy matrix (BENCHMARK.md) and write results + chart");
  cmd->add_option("--workload", flags->workload, "tiny | mini | weibo | imdb | <config.yaml> (default mini)");
  cmd->add_option("--strategies", flags->strategies,
                  "comma list of rows (default: every installed strategy; extra rows: ddp_launcher, trainer)");
  cmd->add_option("--nproc", flags->nproc, "ranks of the distributed rows; dp replicas (default 2)");
  cmd->add_option("--steps", flags->steps, "optimizer steps per row; 0 = one epoch (default: mini 20, others 0)");
  cmd->add_option("--out", flags->out, "output directory (default bench-out)");
  cmd->add_option("--set", flags->sets, "config override applied to every row (repeatable)");
  cmd->add_option_function<std::string>(
      "--task", [flags](const std::string& task) { flags->sets.insert(flags->sets.begin(), "task=" + task); },
      "what every row trains: text-classification (default), token-classification or sentence-embedding (--set task=...)");
  cmd->add_option("--plugin-dir", flags->plugin_dirs, "extra plugin directory to list strategies from");
  cmd->add_option("--cores", flags->cores, "CPU cores to share out per row (default: all)");
  cmd->add_option("--global-batch", flags->global_batch, "global batch; per rank = global / ranks (default 32)");
  cmd->add_option("--row-timeout", flags->row_timeout_s, "seconds before a row is killed (default 1800)");
  cmd->add_option("--machine", flags->machine, "text describing the machine, for the table header");
  cmd->add_flag("--memory-model", flags->memory_model,
                "print ZeRO Table 1 (7.5 B parameters, K = 12, 64 ranks) through ft's cost model and exit");
  cmd->callback([flags, &exit_code] { exit_code = run_bench(*flags); });
}

}  // namespace ft::app
