// `ft trace DIR_OR_FILE [--merge OUT]`: prints the step profiler's traces
// summed up per rank (ft/observe/trace_analysis.h does the reading); --merge
// writes every rank into one file, so Perfetto shows the ranks one above the
// other.
#include <iostream>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ft/observe/trace_analysis.h"

namespace ft::app {

void add_trace_command(CLI::App& app, int& exit_code) {
  struct Flags {
    std::string target, merge_out;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("trace", "sum up profiler traces (ft run --profile-steps): phases, comm, overlap");
  cmd->add_option("path", flags->target, "a profile directory (rank<r>.trace.json files) or one trace file")->required();
  cmd->add_option("--merge", flags->merge_out, "also write all ranks into this one trace file (for Perfetto)");
  cmd->callback([flags, &exit_code] {
    const auto files = trace_files(flags->target);
    std::vector<nlohmann::json> docs;
    for (const auto& f : files) docs.push_back(load_trace(f));
    for (size_t i = 0; i < files.size(); ++i) std::cout << format_trace_summary(summarize_trace(files[i], docs[i]));
    if (!flags->merge_out.empty()) {
      merge_traces(docs, flags->merge_out);
      std::cout << fmt::format("merged {} rank trace(s) into {}\n", files.size(), flags->merge_out);
    }
    exit_code = 0;
  });
}

}  // namespace ft::app
