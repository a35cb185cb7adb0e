// Tracer: a step-window profiler that writes one Chrome trace event file per
// rank (<profile_dir>/rank<r>.trace.json), readable by ui.perfetto.dev and
// chrome://tracing. docs/observability.md explains the tracks.
//
// The Trainer owns one Tracer per run and hands it to the strategy through
// StrategyContext::trace. It is active only inside the `runtime.profile_steps`
// window (optimizer steps A..B, 1-based, inclusive); outside it every call is
// one relaxed atomic load, so strategies may call it unconditionally.
//
// Tracks (Chrome "threads" of process `rank`): `main` holds the nested ranges
// of the training loop (step N > data / forward / backward / optimizer);
// `comm` holds collectives from launch to completion, recorded from whatever
// thread saw them finish. Collectives overlap each other, so the file spreads
// them over lanes "comm", "comm 2", ... that each hold non-overlapping ranges.
//
// Threading: record calls (complete, begin_async/end_async, TraceRange) are
// thread-safe; begin_step/end_step/finish are for the Trainer's thread.
// On CUDA (Options::nvtx) main-track ranges are also pushed as NVTX ranges,
// so Nsight Systems shows them beside the kernels.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ft {


/// Optimizer steps first..last (1-based, inclusive).
struct StepWindow {
  int64_t first = 0;
  int64_t last = 0;
  bool contains(int64_t step) const { return step >= first && step <= last; }
};

/// "A:B" with 1 <= A <= B (decimal digits only) -> the window; anything else
/// (including "") -> nullopt. Callers name `runtime.profile_steps` in errors.
std::optional<StepWindow> parse_step_window(const std::string& text);

/// What a bad runtime.profile_steps is told.
inline constexpr const char* kStepWindowHelp =
    "expected A:B, optimizer steps with 1 <= A <= B (1-based, inclusive), e.g. 2:4";

enum class TraceTrack : uint8_t { Main, Comm };

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    int rank = 0;
    std::optional<StepWindow> window;  ///< nullopt: never active
    std::string dir = "profile";       ///< where rank<r>.trace.json goes
    bool nvtx = false;                 ///< also push NVTX ranges (CUDA runs)
  };

  /// Never active.
  Tracer() = default;
  explicit Tracer(Options options);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool active() const { return active_.load(std::memory_order_relaxed); }
  int rank() const { return options_.rank; }
  bool nvtx() const { return options_.nvtx; }
  /// The file this rank writes.
  std::string path() const;

  /// Trainer, at the start of optimizer step `step` (1-based): becomes
  /// active when the window starts here.
  void begin_step(int64_t step);
  /// Trainer, after the optimizer step: records "step N"; at the window's
  /// last step writes the file (atomically) and goes inactive, returning a
  /// line for the log. Throws ft::Error naming runtime.profile_dir when the
  /// file cannot be written.
  std::optional<std::string> end_step(int64_t step);
  /// Trainer, after the loop: if the window started but training stopped
  /// before its end, writes what was recorded; if it never started, says so.
  std::optional<std::string> finish(int64_t last_step);

  /// Records a complete range [start, end] (no-op when inactive). `name` and
  /// `category` must outlive the Tracer (string literals). index >= 0 is
  /// appended to the name ("allreduce bucket 3"); bytes >= 0 goes to args.
  void complete(const char* name, const char* category, TraceTrack track, Clock::time_point start,
                Clock::time_point end, int64_t index = -1, int64_t bytes = -1);

  /// A comm-track range whose start and end are seen in different places
  /// (a collective issued here and waited on there), keyed by (name, index).
  /// end_async without a matching begin_async (e.g. issued before the window
  /// opened) records nothing.
  void begin_async(const char* name, int64_t index);
  void end_async(const char* name, int64_t index, int64_t bytes = -1);

  /// The Chrome trace JSON of what was recorded so far.
  std::string to_json() const;

 private:
  struct Event {
    const char* name;
    const char* category;
    TraceTrack track;
    int64_t index;
    int64_t bytes;
    Clock::time_point start, end;
  };
  std::string write();

  Options options_;
  std::atomic<bool> active_{false};
  bool written_ = false;
  Clock::time_point step_start_{};
  mutable std::mutex mutex_;  // guards events_ and open_
  std::vector<Event> events_;
  std::map<std::pair<std::string, int64_t>, Clock::time_point> open_;
};

/// RAII range on the main track (plus an NVTX range on CUDA); no-op when
/// `tracer` is null or inactive at construction. end() closes it early.
class TraceRange {
 public:
  TraceRange(Tracer* tracer, const char* name, const char* category = "compute", int64_t index = -1);
  ~TraceRange() { end(); }
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
  void end();

 private:
  Tracer* tracer_;  // null once ended or when inactive
  const char* name_;
  const char* category_;
  int64_t index_;
  Tracer::Clock::time_point start_;
};

}  // namespace ft
