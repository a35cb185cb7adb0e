// What a strategy reports about itself (DDP's bucket overlap, the pipeline's
// stages and bubble, the mesh it built, auto's pick) as structured events:
// a name, a JSON object, and the line a person reads. The worker's EventLog
// listens: it prints the line and, on rank 0, writes the event to the metrics
// JSON Lines as {"event":"strategy","name":...,"data":{...}}, so tests and
// tools read the numbers as data instead of parsing the line back.
//
// Only strings cross the plugin boundary: emit() serializes the data in the
// plugin (any JSON type with dump(), e.g. nlohmann::json), so this header
// needs no JSON library and a plugin may use its own copy of one.
#pragma once

#include <functional>
#include <string>
#include <utility>

namespace ft {

/// One statistic a strategy reported.
struct StrategyEvent {
  std::string name;  ///< "<strategy>.<what>", e.g. "ddp.overlap"; the key tests and tools select on
  std::string data;  ///< a JSON object, serialized
  std::string line;  ///< what people read, printed as it is (no trailing newline); empty: nothing printed
};

/// StrategyContext::events. Copying it (a wrapping strategy copies the
/// context) keeps the listener.
class __attribute__((visibility("default"))) StrategyEvents {
 public:
  using Listener = std::function<void(const StrategyEvent&)>;

  /// Reports `data` (a JSON object) under `name` with its human `line`. An
  /// event belongs to the rank that emits it: a statistic of the whole job
  /// is emitted by rank 0 only, a per-rank one by each rank (only rank 0's
  /// reach the metrics file). Not a collective; never blocks on peers.
  template <typename Json>
  void emit(const std::string& name, const Json& data, const std::string& line) {
    publish(StrategyEvent{name, data.dump(), line});
  }

  /// emit() with the data already serialized. With a listener, hands the
  /// event to it (it prints the line); without one (a strategy driven
  /// outside a worker, as unit tests do), prints the line on stdout.
  /// Throws ft::Error if `data` is not a JSON object (from the listener).
  void publish(const StrategyEvent& event) const;

  /// Set by whoever runs the strategy (the Trainer: its EventLog) before setup.
  void listen(Listener listener) { listener_ = std::move(listener); }

 private:
  Listener listener_;
};

}  // namespace ft
