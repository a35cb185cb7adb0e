// The strategy plugin contract: what a third-party strategy compiles against.
//
// A plugin is a shared library (libft_strategy_<x>.so) exporting ONE
// extern "C" Boost.DLL alias, `ft_strategy_plugin`, that points to a function
// returning a PluginDescriptor. The host reads `abi_version` first and only
// trusts the rest of the struct when it equals kPluginAbiVersion; it then
// refuses the plugin unless `torch_version` equals the LibTorch ft was built
// with (host and plugin must share LibTorch, compiler and C++ ABI: Boost.DLL
// itself promises no ABI stability).
//
// Writing a plugin is one .cpp with one macro at global namespace scope:
//
//   FT_STRATEGY_PLUGIN("myplugin", "1.0.0",
//       FT_STRATEGY("ddp", "DDP: bucketed all-reduce overlapped with backward",
//                   [] { return new DdpStrategy(false); }),
//       FT_STRATEGY("ddp_amp", "DDP with automatic mixed precision",
//                   [] { return new DdpStrategy(true); }))
//
// Build it with the CMake helper `ft_add_strategy` (cmake/FtStrategy.cmake),
// which compiles with -fvisibility=hidden: only the alias is exported.
#pragma once

#include <cstddef>
#include <cstdint>

#include <boost/dll/alias.hpp>
#include <torch/version.h>

#include "ft/parallel/strategy.h"

namespace ft {

/// Version of the PluginDescriptor/PluginEntry layout and of the Strategy
/// interface. Bump it whenever either changes; the host refuses any plugin
/// built against another value and names both.
constexpr uint32_t kPluginAbiVersion = 9;  // 2: StrategyContext::trace; 3: UnitRunner::run takes a RunPass; 4: Strategy::delegate() (optional abilities), ft/base/types.h; 5: StrategyContext::events; 6: Strategy::adopt() and ctx_; 7: EncoderModel (was BertForSequenceClassification), backbone and head; 8: headers in one folder per layer (ft/<area>/x.h), the MemoryModel ability (ft/parallel/abilities.h), plan_strategy over estimates; 9: StepOptions::report_grad_norm

/// Name of the exported Boost.DLL alias the host looks up.
constexpr const char* kPluginEntrySymbol = "ft_strategy_plugin";

/// Makes a new strategy owned by the caller (the host wraps it so that the
/// plugin stays loaded while the object lives). May throw ft::Error.
using StrategyFactory = Strategy* (*)();

/// One registered strategy name. All pointers must stay valid for as long as
/// the library is loaded (string literals and plain functions do).
struct PluginEntry {
  const char* name;         ///< registered name, e.g. "ddp"; unique across plugins
  const char* description;  ///< one line shown by `ft strategies`
  StrategyFactory factory;  ///< never null
};

/// What the entry function returns. Plain data; `abi_version` MUST stay the
/// first field in every future ABI so a host can read it before anything else.
struct PluginDescriptor {
  uint32_t abi_version;        ///< kPluginAbiVersion the plugin was built with
  const char* torch_version;   ///< TORCH_VERSION the plugin was built with
  const char* plugin_name;     ///< e.g. "ddp"
  const char* plugin_version;  ///< free-form, e.g. "1.0.0"
  const PluginEntry* entries;  ///< `entry_count` entries
  std::size_t entry_count;
};

/// Signature of the function the `ft_strategy_plugin` alias points to.
using PluginEntryFunction = const PluginDescriptor*();

}  // namespace ft

// Tests build deliberately incompatible plugins by defining these before
// including this header; real plugins never do.
#ifdef FT_PLUGIN_ABI_VERSION_OVERRIDE
#define FT_PLUGIN_DETAIL_ABI_VERSION (FT_PLUGIN_ABI_VERSION_OVERRIDE)
#else
#define FT_PLUGIN_DETAIL_ABI_VERSION (::ft::kPluginAbiVersion)
#endif
#ifdef FT_PLUGIN_TORCH_VERSION_OVERRIDE
#define FT_PLUGIN_DETAIL_TORCH_VERSION FT_PLUGIN_TORCH_VERSION_OVERRIDE
#else
#define FT_PLUGIN_DETAIL_TORCH_VERSION TORCH_VERSION
#endif

/// One registered name inside FT_STRATEGY_PLUGIN. The factory is any
/// captureless callable expression returning a pointer to a Strategy
/// subclass (a lambda is typical); it is wrapped so its result converts to
/// ft::Strategy*. Commas inside the factory are fine.
#define FT_STRATEGY(NAME, DESCRIPTION, ...) \
  ::ft::PluginEntry { (NAME), (DESCRIPTION), []() -> ::ft::Strategy* { return (__VA_ARGS__)(); } }

/// Declares this library's plugin: its name, version and one or more
/// FT_STRATEGY(...) entries. Use exactly once per shared library, at global
/// namespace scope.
#define FT_STRATEGY_PLUGIN(PLUGIN_NAME, PLUGIN_VERSION, ...)                           \
  namespace {                                                                         \
  const ::ft::PluginEntry ft_plugin_detail_entries[] = {__VA_ARGS__};                 \
  const ::ft::PluginDescriptor ft_plugin_detail_descriptor = {                        \
      FT_PLUGIN_DETAIL_ABI_VERSION,                                                   \
      FT_PLUGIN_DETAIL_TORCH_VERSION,                                                 \
      (PLUGIN_NAME),                                                                  \
      (PLUGIN_VERSION),                                                               \
      ft_plugin_detail_entries,                                                       \
      sizeof(ft_plugin_detail_entries) / sizeof(ft_plugin_detail_entries[0])};        \
  const ::ft::PluginDescriptor* ft_plugin_detail_entry() { return &ft_plugin_detail_descriptor; } \
  }                                                                                   \
  BOOST_DLL_ALIAS(ft_plugin_detail_entry, ft_strategy_plugin)
