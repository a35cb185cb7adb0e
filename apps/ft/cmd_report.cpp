// `ft report DIR [DIR ...]`: (re)builds a run's report.html from its
// metrics, or one page overlaying several runs.
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ft/base/error.h"
#include "ft/observe/run_report.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;

struct ReportFlags {
  std::vector<std::string> runs;
  std::string out;
  std::string title = "ft run report";
};

// A run directory (its metrics.jsonl) or a metrics file itself.
ReportRun run_of(const std::string& arg) {
  const fsys::path p(arg);
  std::error_code ec;
  if (fsys::is_directory(p, ec)) {
    const fsys::path metrics = p / "metrics.jsonl";
    if (!fsys::exists(metrics, ec)) {
      fail("{}: no metrics.jsonl here (a run writes it into train.output_dir unless --metrics-out sends it "
           "elsewhere; pass that file instead)",
           arg);
    }
    return {p.lexically_normal().string(), metrics};
  }
  if (!fsys::exists(p, ec)) fail("{}: no such run directory or metrics file", arg);
  return {p.parent_path().empty() ? p.string() : p.parent_path().lexically_normal().string(), p};
}

int build(const ReportFlags& f) {
  std::vector<ReportRun> runs;
  for (const auto& r : f.runs) runs.push_back(run_of(r));
  fsys::path out = f.out;
  if (out.empty()) {
    // One run: its own report.html; several: a page of their own, here.
    out = runs.size() == 1 && fsys::is_directory(f.runs[0]) ? fsys::path(f.runs[0]) / "report.html" : "report.html";
  }
  write_run_report(out, runs, f.title);
  std::cout << fmt::format("wrote {} ({} run{})\n", out.string(), runs.size(), runs.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ReportFlags>();
  auto* cmd = app.add_subcommand("report", "build report.html from a run's metrics; several runs overlay in one page");
  cmd->add_option("runs", flags->runs, "run directories (holding metrics.jsonl) or metrics files")->required();
  cmd->add_option("-o,--out", flags->out, "the page to write (default: DIR/report.html for one run, else ./report.html)");
  cmd->add_option("--title", flags->title, "the page's title");
  cmd->callback([flags, &exit_code] { exit_code = build(*flags); });
}

}  // namespace ft::app
