#include "ft/observe/trace.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compat.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"

namespace ft {
namespace {

constexpr int kMainTid = 1;
constexpr int kFirstCommTid = 2;

std::optional<int64_t> parse_step(const std::string& s) {
  if (s.empty() || s.size() > 12) return std::nullopt;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  return std::stoll(s);
}

// Chrome trace timestamps are microseconds; steady_clock is CLOCK_MONOTONIC,
// shared by every process on a host, so ranks' files line up when merged.
double micros(Tracer::Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

std::string event_name(const char* name, int64_t index) {
  return index >= 0 ? fmt::format("{} {}", name, index) : std::string(name);
}

nlohmann::json thread_name(int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

std::optional<StepWindow> parse_step_window(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const auto a = parse_step(text.substr(0, colon));
  const auto b = parse_step(text.substr(colon + 1));
  if (!a || !b || *a < 1 || *b < *a) return std::nullopt;
  return StepWindow{*a, *b};
}

Tracer::Tracer(Options options) : options_(std::move(options)) {}

std::string Tracer::path() const {
  return (std::filesystem::path(options_.dir) / fmt::format("rank{}.trace.json", options_.rank)).string();
}

void Tracer::begin_step(int64_t step) {
  if (!options_.window || written_) return;
  if (!active() && options_.window->contains(step)) {  // a resumed run may start inside
    std::lock_guard<std::mutex> lock(mutex_);
    events_.clear();
    open_.clear();
    active_.store(true, std::memory_order_relaxed);
  }
  if (!active()) return;
  step_start_ = Clock::now();
  if (options_.nvtx) compat::nvtx_push(event_name("step", step).c_str());
}

std::optional<std::string> Tracer::end_step(int64_t step) {
  if (!active()) return std::nullopt;
  if (options_.nvtx) compat::nvtx_pop();
  complete("step", "step", TraceTrack::Main, step_start_, Clock::now(), step);
  if (step < options_.window->last) return std::nullopt;
  return write();
}

std::optional<std::string> Tracer::finish(int64_t last_step) {
  if (!options_.window || written_) return std::nullopt;
  if (active()) {
    auto line = write();
    return fmt::format("{} (training ended at step {}, before the window's end)", line, last_step);
  }
  return fmt::format("runtime.profile_steps {}:{}: training ended at step {}; nothing traced",
                     options_.window->first, options_.window->last, last_step);
}

std::string Tracer::write() {
  active_.store(false, std::memory_order_relaxed);
  written_ = true;
  const std::string json = to_json();
  try {
    std::filesystem::create_directories(options_.dir);
    fs::write_file_atomic(path(), json);
  } catch (const std::exception& e) {
    fail("runtime.profile_dir {}: cannot write the trace: {}", options_.dir, e.what());
  }
  return fmt::format("profile: steps {}..{} traced to {}/rank*.trace.json (open in ui.perfetto.dev; `ft trace {}` "
                     "sums them up)",
                     options_.window->first, options_.window->last, options_.dir, options_.dir);
}

void Tracer::complete(const char* name, const char* category, TraceTrack track, Clock::time_point start,
                      Clock::time_point end, int64_t index, int64_t bytes) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active()) return;  // the window closed while we waited
  events_.push_back(Event{name, category, track, index, bytes, start, end});
}

void Tracer::begin_async(const char* name, int64_t index) {
  if (!active()) return;
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  open_[{name, index}] = now;
}

void Tracer::end_async(const char* name, int64_t index, int64_t bytes) {
  if (!active()) return;
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = open_.find({name, index});
  if (it == open_.end()) return;
  events_.push_back(Event{name, "comm", TraceTrack::Comm, index, bytes, it->second, now});
  open_.erase(it);
}

std::string Tracer::to_json() const {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events = events_;
  }
  // Parents before children at equal start times: longer first.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  const int pid = options_.rank;
  nlohmann::json list = nlohmann::json::array();
  list.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", fmt::format("rank {}", pid)}}}});
  list.push_back(thread_name(pid, kMainTid, "main"));
  std::vector<Clock::time_point> lane_end;  // comm lanes: last end on each
  for (const Event& e : events) {
    int tid = kMainTid;
    if (e.track == TraceTrack::Comm) {
      size_t lane = 0;
      while (lane < lane_end.size() && lane_end[lane] > e.start) ++lane;
      if (lane == lane_end.size()) {
        lane_end.push_back(e.end);
        list.push_back(thread_name(pid, kFirstCommTid + static_cast<int>(lane),
                                   lane == 0 ? std::string("comm") : fmt::format("comm {}", lane + 1)));
      }
      lane_end[lane] = e.end;
      tid = kFirstCommTid + static_cast<int>(lane);
    }
    nlohmann::json j{{"ph", "X"},
                     {"name", event_name(e.name, e.index)},
                     {"cat", e.category},
                     {"pid", pid},
                     {"tid", tid},
                     {"ts", micros(e.start)},
                     {"dur", std::max(0.0, micros(e.end) - micros(e.start))}};
    if (e.bytes >= 0) j["args"] = {{"bytes", e.bytes}};
    list.push_back(std::move(j));
  }
  nlohmann::json doc{{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}};
  if (options_.window) {
    doc["otherData"] = {{"rank", pid},
                        {"profile_steps", fmt::format("{}:{}", options_.window->first, options_.window->last)}};
  }
  return doc.dump();
}

TraceRange::TraceRange(Tracer* tracer, const char* name, const char* category, int64_t index)
    : tracer_(tracer && tracer->active() ? tracer : nullptr), name_(name), category_(category), index_(index) {
  if (!tracer_) return;
  start_ = Tracer::Clock::now();
  if (tracer_->nvtx()) compat::nvtx_push(event_name(name_, index_).c_str());
}

void TraceRange::end() {
  if (!tracer_) return;
  const auto now = Tracer::Clock::now();
  if (tracer_->nvtx()) compat::nvtx_pop();
  tracer_->complete(name_, category_, TraceTrack::Main, start_, now, index_);
  tracer_ = nullptr;
}

}  // namespace ft
