// Pretends to have been built against another LibTorch.
#define FT_PLUGIN_TORCH_VERSION_OVERRIDE "2.1.0"
#include "test_strategy.h"

FT_STRATEGY_PLUGIN("wrong_torch", "1.0.0",
    FT_STRATEGY("test_wrong_torch", "Never loadable", [] { return new ft_test_plugin::TestStrategy(21); }))
