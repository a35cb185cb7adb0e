// Two names from one plugin, told apart by their state_bytes() marker.
#include "test_strategy.h"

FT_STRATEGY_PLUGIN("good", "1.2.3",
    FT_STRATEGY("test_alpha", "Test strategy alpha", [] { return new ft_test_plugin::TestStrategy(11); }),
    // Commas outside parentheses must not split the macro arguments.
    FT_STRATEGY("test_beta", "Test strategy beta", [] {
      const int64_t parts[] = {20, 2};
      return new ft_test_plugin::TestStrategy(parts[0] + parts[1]);
    }))
