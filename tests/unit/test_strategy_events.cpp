// StrategyContext::events: what a strategy reports reaches the metrics JSON
// Lines as data and the console as the same line it always printed.
#include "ft/observe/strategy_events.h"

#include <unistd.h>

#include <cstdio>
#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/observe/events.h"
#include "ft_run.h"

namespace {

using json = nlohmann::json;

// What `f` wrote on stdout (the file descriptor, as the strategies' lines go).
template <typename F>
std::string stdout_of(const std::filesystem::path& file, F&& f) {
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDOUT_FILENO);
  ::close(fd);
  try {
    f();
  } catch (...) {
    std::fflush(stdout);
    ::dup2(saved, STDOUT_FILENO);
    ::close(saved);
    throw;
  }
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  return ft_test::read_text(file);
}

json overlap() { return {{"buckets", 4}, {"syncs", 8}, {"hidden_fraction", 0.5}}; }
constexpr const char* kLine = "ddp: comm hidden behind backward 50% (4 bucket(s), 8 sync(s))";

}  // namespace

TEST_CASE("emit hands the listener the name, the data as a JSON object and the line; a copy keeps the listener") {
  ft::StrategyEvents events;
  std::vector<ft::StrategyEvent> got;
  events.listen([&](const ft::StrategyEvent& e) { got.push_back(e); });
  events.emit("ddp.overlap", overlap(), kLine);
  ft::StrategyEvents copy = events;  // what a wrapping strategy (auto) hands the one it picked
  copy.emit("auto.plan", json{{"picked", "ddp"}}, "");
  REQUIRE(got.size() == 2);
  CHECK(got[0].name == "ddp.overlap");
  CHECK(json::parse(got[0].data) == overlap());
  CHECK(got[0].line == kLine);
  CHECK(got[1].name == "auto.plan");
}

TEST_CASE("without a listener (a strategy driven in-process) the line is printed, and only the line") {
  ft_test::TempDir tmp("events-bare");
  ft::StrategyEvents events;
  CHECK(stdout_of(tmp.path() / "out.txt", [&] { events.emit("ddp.overlap", overlap(), kLine); }) ==
        std::string(kLine) + "\n");
  CHECK(stdout_of(tmp.path() / "out.txt", [&] { events.emit("auto.plan", json::object(), ""); }).empty());
}

TEST_CASE("EventLog: rank 0 writes {event: strategy, name, data} and prints the line; other ranks only print") {
  ft_test::TempDir tmp("events-log");
  const auto metrics = tmp.path() / "m.jsonl";
  const ft::StrategyEvent e{"ddp.overlap", overlap().dump(), kLine};
  {
    ft::EventLog log(/*is_rank0=*/true, metrics.string(), /*progress=*/false);
    CHECK(stdout_of(tmp.path() / "out0.txt", [&] { log.strategy(e); }) == std::string(kLine) + "\n");
  }
  const auto lines = ft_test::read_events(metrics, "strategy");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == json{{"event", "strategy"}, {"name", "ddp.overlap"}, {"data", overlap()}});
  CHECK(ft_test::strategy_events(metrics, "ddp.overlap") == std::vector<json>{overlap()});

  const auto other = tmp.path() / "m1.jsonl";
  {
    ft::EventLog log(/*is_rank0=*/false, other.string(), /*progress=*/false);
    // A per-rank statistic is printed by its own rank, and only rank 0 writes the file.
    CHECK(stdout_of(tmp.path() / "out1.txt", [&] { log.strategy(e); }) == std::string(kLine) + "\n");
  }
  CHECK_FALSE(std::filesystem::exists(other));
}

TEST_CASE("EventLog refuses event data that is not a JSON object, naming the event") {
  ft_test::TempDir tmp("events-bad");
  ft::EventLog log(/*is_rank0=*/true, (tmp.path() / "m.jsonl").string(), /*progress=*/false);
  CHECK(ft_test::error_of([&] { log.strategy({"ddp.overlap", "[4, 8]", kLine}); }) ==
        "strategy event 'ddp.overlap': its data is not a JSON object: [4, 8]");
  CHECK(ft_test::error_of([&] { log.strategy({"ddp.overlap", "{\"buckets\": ", kLine}); }).rfind(
            "strategy event 'ddp.overlap': its data is not a JSON object", 0) == 0);
}
