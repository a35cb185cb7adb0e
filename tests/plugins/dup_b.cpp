// With dup_a.cpp: both claim "test_twin"; each also has a name of its own.
#include "test_strategy.h"

FT_STRATEGY_PLUGIN("dup_b", "1.0.0",
    FT_STRATEGY("test_only_b", "Only in b", [] { return new ft_test_plugin::TestStrategy(3); }),
    FT_STRATEGY("test_twin", "Twin from b", [] { return new ft_test_plugin::TestStrategy(4); }))
