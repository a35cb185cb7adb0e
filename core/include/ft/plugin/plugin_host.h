// PluginHost: finds strategy plugins, checks them, and instantiates
// strategies by registered name.
//
// Plugins load only from configured directories, and in each only files
// named libft_strategy_*.so, opened by canonical absolute path (never through
// the dynamic linker's search path). Refused with a warning: relative
// FT_PLUGIN_PATH entries, symlinks resolving outside their directory, and
// world-writable directories or files (docs/hardening.md). A file that
// cannot be used (not a shared library, no entry symbol, other ABI or
// LibTorch version, malformed entries, a name another file already claims)
// is refused with a one-line warning naming the file; it never aborts
// discovery.
//
// Lifetime: every Strategy returned by create() keeps its library loaded
// until the last reference to it is gone, so the host may be dropped first.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ft/parallel/strategy.h"

namespace ft {

/// Where discovery looks, in order: built-in dir, FT_PLUGIN_PATH dirs,
/// --plugin-dir dirs. A name found in two different files is refused.
struct DiscoveryOptions {
  /// Scan the built-in directory at all (tests turn it off).
  bool use_builtin = true;
  /// Built-in directory; unset means default_builtin_plugin_dir().
  std::optional<std::filesystem::path> builtin_dir;
  /// Value of FT_PLUGIN_PATH (':'-separated; empty items are skipped,
  /// relative ones refused with a warning).
  /// Passed in rather than read here so core stays free of hidden inputs.
  std::string plugin_path;
  /// Each --plugin-dir; one that is not a directory makes discover() throw.
  std::vector<std::filesystem::path> plugin_dirs;

  /// Convenience for the CLI: plugin_path from the FT_PLUGIN_PATH variable.
  static DiscoveryOptions from_environment(std::vector<std::filesystem::path> plugin_dirs = {});
};

/// One registered strategy name as `ft strategies` shows it.
struct StrategyInfo {
  std::string name;
  std::string description;
  std::string plugin_name;
  std::string plugin_version;
  std::filesystem::path file;
  std::string origin;  ///< "built-in", "FT_PLUGIN_PATH" or "--plugin-dir"
};

/// <dir of the running executable>/../lib/ft/strategies (via /proc/self/exe).
/// Throws ft::Error if the executable's path cannot be read.
std::filesystem::path default_builtin_plugin_dir();

class PluginHost {
 public:
  /// Scans the configured directories and loads every acceptable plugin.
  /// Throws ft::Error only for a --plugin-dir that is not a directory;
  /// everything else becomes a warning.
  static PluginHost discover(const DiscoveryOptions& options);

  /// Every usable registered name, sorted by name.
  std::vector<StrategyInfo> list() const;

  /// Instantiates a strategy by registered name. Throws ft::Error for an
  /// unknown name (listing the known ones and any refused plugins), for a
  /// name that was refused (giving the reason) or if the factory fails.
  std::shared_ptr<Strategy> create(const std::string& name) const;

  /// Problems met while scanning, one line each, in discovery order.
  const std::vector<std::string>& warnings() const { return warnings_; }

  struct Library;  // a loaded plugin file (defined in plugin_host.cpp)

 private:
  struct Registered {
    StrategyInfo info;
    std::shared_ptr<Library> library;
    Strategy* (*factory)() = nullptr;
  };

  void scan_dir(const std::filesystem::path& dir, const std::string& origin);
  void load_file(const std::filesystem::path& file, const std::string& origin);

  std::map<std::string, Registered> strategies_;
  // Names claimed by two files: no one may use them (reason per name).
  std::map<std::string, std::string> conflicts_;
  // Names only seen in refused plugins whose entries could still be read
  // (other LibTorch); create() reports why they are missing.
  std::map<std::string, std::string> incompatible_;
  std::vector<std::string> warnings_;
  // Libraries in --plugin-dir / FT_PLUGIN_PATH dirs not named
  // libft_strategy_<name>.so: never loaded, named by create()'s error.
  std::vector<std::filesystem::path> misnamed_;
  std::vector<std::filesystem::path> seen_files_;  // canonical paths already scanned
};

}  // namespace ft
