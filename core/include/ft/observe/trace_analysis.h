// Reading the step profiler's traces back (rank<r>.trace.json, written by
// `ft run --profile-steps A:B`; ft/observe/trace.h writes them): per rank the
// time in data / forward / backward / optimizer, the time a collective was in
// flight, and how much of that overlapped backward. `ft trace` prints it;
// tools and tests read the numbers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

/// One rank's trace, summed up.
struct TraceSummary {
  std::filesystem::path file;
  int rank = 0;
  std::vector<int64_t> steps;              ///< the traced step numbers, sorted
  double step_us = 0;                      ///< all traced steps together
  std::map<std::string, double> phase_us;  ///< data, forward, backward, optimizer
  int comm_ranges = 0;
  int64_t comm_bytes = 0;
  double comm_sum_us = 0;          ///< sum of range lengths (collectives in flight together count twice)
  double comm_us = 0;              ///< time at least one collective was in flight
  double comm_in_backward_us = 0;  ///< of that, time inside a backward range
};

/// The rank traces in `target`, ordered by rank: a profile directory's
/// rank<r>.trace.json files, or `target` itself when it is a file. Throws
/// ft::Error naming the path when there is none.
std::vector<std::filesystem::path> trace_files(const std::filesystem::path& target);

/// A Chrome trace document; ft::Error naming the file when it is not one.
nlohmann::json load_trace(const std::filesystem::path& file);

/// Sums up one rank's trace document.
TraceSummary summarize_trace(const std::filesystem::path& file, const nlohmann::json& doc);

/// The summary as `ft trace` prints it, lines ending in '\n'.
std::string format_trace_summary(const TraceSummary& s);

/// Every document's events in one trace file (atomically written), so
/// Perfetto shows the ranks one above the other.
void merge_traces(const std::vector<nlohmann::json>& docs, const std::filesystem::path& out);

}  // namespace ft
