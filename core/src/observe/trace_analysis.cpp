// Reading the step profiler's traces back (ft/observe/trace_analysis.h).
#include "ft/observe/trace_analysis.h"

#include <algorithm>
#include <regex>
#include <utility>

#include <fmt/format.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"

namespace ft {
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

std::string ms(double us) { return fmt::format("{:9.3f} ms", us / 1000.0); }

}  // namespace

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

TraceSummary summarize_trace(const fsys::path& file, const nlohmann::json& doc) {
  static const std::regex kStep("step ([0-9]+)");
  TraceSummary s;
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

std::string format_trace_summary(const TraceSummary& s) {
  std::string out;
  const double per_step = s.steps.empty() ? 0 : 1.0 / static_cast<double>(s.steps.size());
  out += fmt::format("rank {} ({}): {} step(s){}, {:.3f} ms traced, {:.3f} ms/step\n", s.rank,
                     s.file.string(), s.steps.size(),
                     s.steps.empty() ? "" : fmt::format(" {}..{}", s.steps.front(), s.steps.back()),
                     s.step_us / 1000.0, s.step_us * per_step / 1000.0);
  for (const char* phase : {"data", "forward", "backward", "optimizer"}) {
    const auto it = s.phase_us.find(phase);
    const double us = it == s.phase_us.end() ? 0.0 : it->second;
    out += fmt::format("  {:<10}{}  {:5.1f}% of step time\n", phase, ms(us),
                       s.step_us > 0 ? 100.0 * us / s.step_us : 0.0);
  }
  out += fmt::format("  {:<10}{}  in flight ({} collective(s), {:.2f} MB, {:.3f} ms summed over ranges)\n",
                     "comm", ms(s.comm_us), s.comm_ranges, static_cast<double>(s.comm_bytes) / 1e6,
                     s.comm_sum_us / 1000.0);
  if (s.comm_us > 0) {
    out += fmt::format("  overlap   {:.3f} of comm time overlaps backward ({} of {})\n",
                       s.comm_in_backward_us / s.comm_us, ms(s.comm_in_backward_us), ms(s.comm_us));
  } else {
    out += "  overlap   n/a (no communication traced)\n";
  }
  return out;
}

void merge_traces(const std::vector<nlohmann::json>& docs, const fsys::path& out) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& doc : docs)
    for (const auto& e : doc["traceEvents"]) events.push_back(e);
  nlohmann::json merged_doc{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  if (out.has_parent_path()) fsys::create_directories(out.parent_path());
  fs::write_file_atomic(out, merged_doc.dump());
}

}  // namespace ft
