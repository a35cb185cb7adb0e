// The step profiler (ft/observe/trace.h): the A:B window, the Chrome trace JSON it
// writes (nesting, comm lanes, metadata), and a real 2-rank ddp run whose
// traces hold data/forward/backward/optimizer and bucket all-reduces only
// inside the window; plus `ft trace` on them and the CLI's error for a bad A:B.
#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ft/observe/trace.h"
#include "ft_run.h"

namespace {

namespace fsys = std::filesystem;

nlohmann::json load(const fsys::path& file) { return nlohmann::json::parse(ft_test::read_text(file)); }

std::vector<nlohmann::json> complete_events(const nlohmann::json& doc) {
  std::vector<nlohmann::json> out;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "X") out.push_back(e);
  return out;
}

// tid -> thread_name from the metadata events.
std::map<int, std::string> thread_names(const nlohmann::json& doc) {
  std::map<int, std::string> out;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") out[e.at("tid").get<int>()] = e.at("args").at("name");
  return out;
}

// [first start, last end] of the "step N" ranges: the traced window.
std::pair<double, double> step_window(const std::vector<nlohmann::json>& events) {
  double start = 1e300, end = -1e300;
  for (const auto& e : events) {
    if (e.at("name").get<std::string>().rfind("step ", 0) != 0) continue;
    start = std::min(start, e.at("ts").get<double>());
    end = std::max(end, e.at("ts").get<double>() + e.at("dur").get<double>());
  }
  return {start, end};
}

}  // namespace

TEST_CASE("profile_steps parses A:B with 1 <= A <= B and nothing else") {
  auto w = ft::parse_step_window("2:3");
  REQUIRE(w);
  CHECK(w->first == 2);
  CHECK(w->last == 3);
  CHECK(w->contains(2));
  CHECK(w->contains(3));
  CHECK(!w->contains(1));
  CHECK(!w->contains(4));
  CHECK(ft::parse_step_window("1:1"));
  for (const char* bad : {"", "2", "0:2", "3:2", "a:b", "2:", ":3", "-1:2", " 2:3", "2:3:4", "1.5:2", "+1:2"}) {
    INFO("'" << bad << "'");
    CHECK(!ft::parse_step_window(bad));
  }
}

TEST_CASE("the tracer records only inside its window and writes nested, laned Chrome JSON") {
  ft_test::TempDir tmp("trace-unit");
  ft::Tracer::Options o;
  o.rank = 3;
  o.window = ft::StepWindow{2, 3};
  o.dir = (tmp.path() / "prof").string();
  ft::Tracer t(o);
  using Clock = ft::Tracer::Clock;
  const auto t0 = Clock::now();

  t.begin_step(1);
  CHECK(!t.active());
  { ft::TraceRange r(&t, "forward"); }
  t.complete("allreduce bucket", "comm", ft::TraceTrack::Comm, t0, Clock::now(), 0, 64);
  CHECK(!t.end_step(1));

  for (int64_t step : {2, 3}) {
    t.begin_step(step);
    CHECK(t.active());
    { ft::TraceRange r(&t, "forward"); }
    t.begin_async("reduce-scatter unit", 1);
    const auto a = Clock::now();
    // Two collectives in flight together, completed from another thread.
    std::thread comm([&] {
      const auto b = Clock::now();
      t.complete("allreduce bucket", "comm", ft::TraceTrack::Comm, a, b + std::chrono::microseconds(50), 0, 400);
      t.complete("allreduce bucket", "comm", ft::TraceTrack::Comm, b, b + std::chrono::microseconds(80), 1, 800);
    });
    comm.join();
    t.end_async("reduce-scatter unit", 1, 128);
    t.end_async("all-gather unit", 9);  // never begun: nothing recorded
    const auto note = t.end_step(step);
    CHECK(note.has_value() == (step == 3));
  }
  CHECK(!t.active());
  t.complete("late", "comm", ft::TraceTrack::Comm, t0, Clock::now());
  CHECK(!t.finish(3));  // already written

  const fsys::path file = tmp.path() / "prof" / "rank3.trace.json";
  CHECK(t.path() == file.string());
  REQUIRE(fsys::exists(file));
  const auto doc = load(file);
  CHECK(doc.at("otherData").at("profile_steps") == "2:3");
  const auto events = complete_events(doc);
  std::multiset<std::string> names;
  for (const auto& e : events) {
    names.insert(e.at("name").get<std::string>());
    CHECK(e.at("pid") == 3);
    CHECK(e.at("dur").get<double>() >= 0.0);
  }
  CHECK(names == std::multiset<std::string>{"step 2", "step 3", "forward", "forward", "reduce-scatter unit 1",
                                            "reduce-scatter unit 1", "allreduce bucket 0", "allreduce bucket 0",
                                            "allreduce bucket 1", "allreduce bucket 1"});
  const auto tids = thread_names(doc);
  CHECK(tids.at(1) == "main");
  CHECK(tids.at(2) == "comm");
  CHECK(tids.size() >= 3);  // overlapping collectives need a second lane
  // Ranges on one track never partly overlap (Chrome's nesting rule).
  std::map<int, std::vector<std::pair<double, double>>> by_tid;
  for (const auto& e : events) {
    const double ts = e.at("ts"), end = ts + e.at("dur").get<double>();
    by_tid[e.at("tid").get<int>()].emplace_back(ts, end);
    if (e.at("cat") == "comm") {
      CHECK(e.at("tid").get<int>() >= 2);
      CHECK(e.at("args").at("bytes").get<int64_t>() > 0);
    }
  }
  for (auto& [tid, spans] : by_tid) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      INFO("tid " << tid);
      const bool disjoint = spans[i].first >= spans[i - 1].second;
      const bool nested = spans[i].second <= spans[i - 1].second;
      CHECK((disjoint || (tid == 1 && nested)));
    }
  }
}

TEST_CASE("a window cut short by the end of training is still written") {
  ft_test::TempDir tmp("trace-short");
  ft::Tracer::Options o;
  o.window = ft::StepWindow{2, 9};
  o.dir = tmp.path().string();
  ft::Tracer t(o);
  t.begin_step(1);
  t.end_step(1);
  t.begin_step(2);
  { ft::TraceRange r(&t, "backward"); }
  CHECK(!t.end_step(2));
  const auto note = t.finish(2);
  REQUIRE(note);
  CHECK(note->find("before the window's end") != std::string::npos);
  CHECK(complete_events(load(tmp.path() / "rank0.trace.json")).size() == 2);

  ft::Tracer late([&] {
    o.window = ft::StepWindow{50, 60};
    return o;
  }());
  late.begin_step(1);
  const auto never = late.finish(1);
  REQUIRE(never);
  CHECK(never->find("nothing traced") != std::string::npos);
}

TEST_CASE("a bad --profile-steps is one line naming runtime.profile_steps") {
  for (const char* bad : {"3:2", "0:1", "x"}) {
    const auto out = ft_test::run_ft(fmt::format("run -c configs/parity-tiny.yaml --profile-steps {}", bad));
    INFO(out.output);
    CHECK(out.exit_code != 0);
    CHECK(out.output.find("runtime.profile_steps") != std::string::npos);
    CHECK(std::count(out.output.begin(), out.output.end(), '\n') == 1);
  }
}

TEST_CASE("2-rank ddp with --profile-steps 2:3 traces every phase and bucket inside the window") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("trace-ddp");
  const auto prof = tmp.path() / "prof";
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --strategy ddp --nproc 2 --threads 1 --max-steps 3 "
      "--set train.batch_size=16 --set strategy.options.bucket_mb=1 --profile-steps 2:3 --set runtime.profile_dir={}",
      prof.string());
  const auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  CHECK(out.output.find("profile: steps 2..3 traced to") != std::string::npos);

  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    const auto file = prof / fmt::format("rank{}.trace.json", rank);
    REQUIRE(fsys::exists(file));
    const auto doc = load(file);
    const auto events = complete_events(doc);
    const auto tids = thread_names(doc);
    CHECK(tids.at(1) == "main");
    CHECK(tids.at(2) == "comm");
    std::map<std::string, int> count;
    const auto [window_start, window_end] = step_window(events);
    std::set<std::string> steps;
    for (const auto& e : events) {
      CHECK(e.at("pid") == rank);
      const std::string name = e.at("name");
      ++count[name];
      if (name.rfind("step ", 0) == 0) steps.insert(name);
    }
    CHECK(steps == std::set<std::string>{"step 2", "step 3"});
    for (const char* phase : {"data", "forward", "backward", "optimizer"}) CHECK(count[phase] == 2);
    int buckets = 0;
    for (const auto& e : events) {
      const std::string name = e.at("name");
      if (name.rfind("allreduce bucket ", 0) != 0) continue;
      ++buckets;
      CHECK(e.at("cat") == "comm");
      CHECK(e.at("tid").get<int>() >= 2);
      CHECK(e.at("args").at("bytes").get<int64_t>() > 0);
      const double ts = e.at("ts"), end = ts + e.at("dur").get<double>();
      CHECK(ts >= window_start);
      CHECK(end <= window_end);
    }
    // Every bucket once per step, the same set in both steps.
    CHECK(buckets >= 4);
    CHECK(buckets % 2 == 0);
  }

  const auto summary = ft_test::run_ft("trace " + prof.string() + " --merge " + (tmp.path() / "all.json").string());
  INFO(summary.output);
  REQUIRE(summary.exit_code == 0);
  // The sign is captured too: a negative fraction must fail, not fall outside the match.
  static const std::regex kOverlap(R"(overlap\s+(-?[0-9.]+) of comm time overlaps backward)");
  int ranks = 0;
  for (auto it = std::sregex_iterator(summary.output.begin(), summary.output.end(), kOverlap);
       it != std::sregex_iterator(); ++it) {
    const double f = std::stod((*it)[1]);
    CHECK(f >= 0.0);
    CHECK(f <= 1.0);
    ++ranks;
  }
  CHECK(ranks == 2);
  CHECK(complete_events(load(tmp.path() / "all.json")).size() ==
        complete_events(load(prof / "rank0.trace.json")).size() + complete_events(load(prof / "rank1.trace.json")).size());
  CHECK(ft_test::run_ft("trace " + tmp.path().string() + "/nothing-here").exit_code != 0);
}

TEST_CASE("2-rank horovod traces its negotiations and fused rings inside the window") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("trace-hvd");
  const auto prof = tmp.path() / "prof";
  // overlap on: tensors are queued from backward, so a step has several cycles.
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --strategy horovod --nproc 2 --threads 1 --max-steps 3 "
      "--set train.batch_size=16 --set strategy.options.overlap=true --set strategy.options.fusion_mb=1 "
      "--profile-steps 2:3 --set runtime.profile_dir={}",
      prof.string());
  const auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  int64_t bytes[2] = {0, 0};
  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    const auto events = complete_events(load(prof / fmt::format("rank{}.trace.json", rank)));
    const auto [window_start, window_end] = step_window(events);
    int rings = 0, negotiations = 0;
    for (const auto& e : events) {
      const std::string name = e.at("name");
      if (name != "ring allreduce" && name != "negotiate") continue;
      CHECK(e.at("cat") == "comm");
      CHECK(e.at("tid").get<int>() >= 2);
      CHECK(e.at("ts").get<double>() >= window_start);
      CHECK(e.at("ts").get<double>() + e.at("dur").get<double>() <= window_end);
      if (name == "negotiate") {
        ++negotiations;
        continue;
      }
      ++rings;
      bytes[rank] += e.at("args").at("bytes").get<int64_t>();
    }
    CHECK(rings >= 2);
    CHECK(negotiations >= rings / 2);  // one negotiation per cycle, a cycle runs >= 1 ring
  }
  // Both steps reduce every gradient once: 2 x the fp32 model (parity-tiny's
  // BERT has 3,184,262 parameters), the same on both ranks.
  CHECK(bytes[0] == bytes[1]);
  CHECK(bytes[0] == 2 * 3184262 * 4);
}
