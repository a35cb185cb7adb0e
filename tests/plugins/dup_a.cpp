// With dup_b.cpp: both claim "test_twin"; each also has a name of its own.
#include "test_strategy.h"

FT_STRATEGY_PLUGIN("dup_a", "1.0.0",
    FT_STRATEGY("test_twin", "Twin from a", [] { return new ft_test_plugin::TestStrategy(1); }),
    FT_STRATEGY("test_only_a", "Only in a", [] { return new ft_test_plugin::TestStrategy(2); }))
