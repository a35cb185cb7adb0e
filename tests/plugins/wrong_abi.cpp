// Built as if against a future ft whose plugin ABI is version 99.
#define FT_PLUGIN_ABI_VERSION_OVERRIDE 99
#include "test_strategy.h"

FT_STRATEGY_PLUGIN("wrong_abi", "1.0.0",
    FT_STRATEGY("test_wrong_abi", "Never loadable", [] { return new ft_test_plugin::TestStrategy(7); }))
