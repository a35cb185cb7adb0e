// report.html: one self-contained page (no network, no external script)
// that draws a run's metrics JSON Lines: the training curves, every eval
// metric per dev set, the last confusion matrix and per-class table, the
// facts of the summary, the command line and the effective config. Several
// runs overlay in the same charts (`ft report DIR1 DIR2 ...`).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ft {

struct ReportRun {
  std::string name;                // the legend's label (a run's directory)
  std::filesystem::path metrics;   // its metrics JSON Lines
};

/// The page for `runs`. A line that does not parse (a file still being
/// written ends in a partial line) is skipped; a missing file is an
/// ft::Error naming it.
std::string render_run_report(const std::vector<ReportRun>& runs, const std::string& title = "ft run report");

/// render_run_report written to `out` atomically (a reader never sees half a page).
void write_run_report(const std::filesystem::path& out, const std::vector<ReportRun>& runs,
                      const std::string& title = "ft run report");

}  // namespace ft
