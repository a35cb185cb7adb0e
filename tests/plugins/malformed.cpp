// Hand-written descriptor (as a third party might write without the macro)
// whose second entry has no factory; MALFORMED_NO_NAME makes it lack a name
// instead. The host must refuse the whole file.
#include "test_strategy.h"

namespace {

ft::Strategy* make_fine() { return new ft_test_plugin::TestStrategy(5); }

#ifdef MALFORMED_NO_NAME
const ft::PluginEntry entries[] = {{"test_fine_1", "ok", &make_fine}, {nullptr, "no name", &make_fine}};
#else
const ft::PluginEntry entries[] = {{"test_fine_2", "ok", &make_fine}, {"test_no_factory", "no factory", nullptr}};
#endif
const ft::PluginDescriptor descriptor = {ft::kPluginAbiVersion, TORCH_VERSION, "malformed", "0.0.1", entries, 2};
const ft::PluginDescriptor* entry() { return &descriptor; }

}  // namespace

BOOST_DLL_ALIAS(entry, ft_strategy_plugin)
