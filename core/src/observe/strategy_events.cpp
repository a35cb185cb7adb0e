#include "ft/observe/strategy_events.h"

#include <cstdio>

namespace ft {

void StrategyEvents::publish(const StrategyEvent& event) const {
  if (listener_) {
    listener_(event);
    return;
  }
  if (event.line.empty()) return;
  std::fputs((event.line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace ft
