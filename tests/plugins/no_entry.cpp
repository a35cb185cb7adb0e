// A shared library with an exported function but no ft_strategy_plugin alias.
extern "C" __attribute__((visibility("default"))) int ft_test_not_a_plugin() { return 1; }
