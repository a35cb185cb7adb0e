// `ft trace DIR_OR_FILE [--merge OUT]`: sums up the step profiler's traces
// (rank<r>.trace.json, written by `ft run --profile-steps A:B`): per rank the
// time in data / forward / backward / optimizer, the time a collective was in
// flight, and how much of that overlapped backward. --merge writes every
// rank into one file, so Perfetto shows the ranks one above the other.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ft/error.h"
#include "ft/fs.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;
using Interval = std::pair<double, double>;  // [start, end) in microseconds

// Sorted, disjoint cover of `spans`.
std::vector<Interval> merged(std::vector<Interval> spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<Interval> out;
  for (const auto& s : spans) {
    if (!out.empty() && s.first <= out.back().second) {
      out.back().second = std::max(out.back().second, s.second);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

double length(const std::vector<Interval>& disjoint) {
  double total = 0;
  for (const auto& s : disjoint) total += s.second - s.first;
  return total;
}

// Length of the intersection of two sorted, disjoint covers.
double overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return total;
}

struct RankSummary {
  fsys::path file;
  int rank = 0;
  std::vector<int64_t> steps;
  double step_us = 0;
  std::map<std::string, double> phase_us;  // data, forward, backward, optimizer
  int comm_ranges = 0;
  int64_t comm_bytes = 0;
  double comm_sum_us = 0;    // sum of range lengths (collectives in flight together count twice)
  double comm_us = 0;        // time at least one collective was in flight
  double comm_in_backward_us = 0;
};

nlohmann::json load_trace(const fsys::path& file) {
  try {
    auto doc = nlohmann::json::parse(fs::read_file(file));
    if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
      fail("{}: not a Chrome trace (no traceEvents array)", file.string());
    }
    return doc;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", file.string(), e.what());
  }
}

RankSummary summarize(const fsys::path& file, const nlohmann::json& doc) {
  static const std::regex kStep("step ([0-9]+)");
  RankSummary s;
  s.file = file;
  std::vector<Interval> comm, backward;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    s.rank = e.value("pid", 0);
    const std::string name = e.value("name", "");
    const std::string cat = e.value("cat", "");
    const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    std::smatch m;
    if (cat == "comm") {
      comm.emplace_back(ts, ts + dur);
      s.comm_sum_us += dur;
      ++s.comm_ranges;
      if (e.contains("args")) s.comm_bytes += e["args"].value("bytes", int64_t{0});
    } else if (std::regex_match(name, m, kStep)) {
      s.steps.push_back(std::stoll(m[1]));
      s.step_us += dur;
    } else if (name == "data" || name == "forward" || name == "backward" || name == "optimizer") {
      s.phase_us[name] += dur;
      if (name == "backward") backward.emplace_back(ts, ts + dur);
    }
  }
  const auto comm_cover = merged(std::move(comm));
  s.comm_us = length(comm_cover);
  s.comm_in_backward_us = overlap(comm_cover, merged(std::move(backward)));
  std::sort(s.steps.begin(), s.steps.end());
  return s;
}

std::vector<fsys::path> trace_files(const fsys::path& target) {
  if (!fsys::exists(target)) fail("{}: no such file or directory", target.string());
  if (!fsys::is_directory(target)) return {target};
  static const std::regex kName("rank([0-9]+)\\.trace\\.json");
  std::vector<std::pair<int, fsys::path>> found;
  for (const auto& entry : fsys::directory_iterator(target)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, kName)) found.emplace_back(std::stoi(m[1]), entry.path());
  }
  if (found.empty()) {
    fail("{}: no rank<r>.trace.json in it; record one with `ft run --profile-steps A:B`", target.string());
  }
  std::sort(found.begin(), found.end());
  std::vector<fsys::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string ms(double us) { return fmt::format("{:9.3f} ms", us / 1000.0); }

void print(const RankSummary& s) {
  const double per_step = s.steps.empty() ? 0 : 1.0 / static_cast<double>(s.steps.size());
  std::cout << fmt::format("rank {} ({}): {} step(s){}, {:.3f} ms traced, {:.3f} ms/step\n", s.rank,
                           s.file.string(), s.steps.size(),
                           s.steps.empty() ? "" : fmt::format(" {}..{}", s.steps.front(), s.steps.back()),
                           s.step_us / 1000.0, s.step_us * per_step / 1000.0);
  for (const char* phase : {"data", "forward", "backward", "optimizer"}) {
    const auto it = s.phase_us.find(phase);
    const double us = it == s.phase_us.end() ? 0.0 : it->second;
    std::cout << fmt::format("  {:<10}{}  {:5.1f}% of step time\n", phase, ms(us),
                             s.step_us > 0 ? 100.0 * us / s.step_us : 0.0);
  }
  std::cout << fmt::format("  {:<10}{}  in flight ({} collective(s), {:.2f} MB, {:.3f} ms summed over ranges)\n",
                           "comm", ms(s.comm_us), s.comm_ranges, static_cast<double>(s.comm_bytes) / 1e6,
                           s.comm_sum_us / 1000.0);
  if (s.comm_us > 0) {
    std::cout << fmt::format("  overlap   {:.3f} of comm time overlaps backward ({} of {})\n",
                             s.comm_in_backward_us / s.comm_us, ms(s.comm_in_backward_us), ms(s.comm_us));
  } else {
    std::cout << "  overlap   n/a (no communication traced)\n";
  }
}

void merge(const std::vector<fsys::path>& files, const std::vector<nlohmann::json>& docs, const fsys::path& out) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& doc : docs)
    for (const auto& e : doc["traceEvents"]) events.push_back(e);
  nlohmann::json merged_doc{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  if (out.has_parent_path()) fsys::create_directories(out.parent_path());
  fs::write_file_atomic(out, merged_doc.dump());
  std::cout << fmt::format("merged {} rank trace(s) into {}\n", files.size(), out.string());
}

}  // namespace

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
    for (size_t i = 0; i < files.size(); ++i) print(summarize(files[i], docs[i]));
    if (!flags->merge_out.empty()) merge(files, docs, flags->merge_out);
    exit_code = 0;
  });
}

}  // namespace ft::app
