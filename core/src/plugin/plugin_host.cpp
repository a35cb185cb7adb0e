#include "ft/plugin/plugin_host.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <system_error>
#include <utility>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include "ft/base/error.h"
#include "ft/plugin/plugin.h"

namespace ft {

namespace fsys = std::filesystem;

/// A loaded plugin file. Every Strategy made from it holds a shared_ptr to
/// this, so the library is unloaded only after the last such object is gone
/// (using an object whose code was unloaded crashes).
struct PluginHost::Library {
  boost::dll::shared_library library;
  fsys::path file;
};

namespace {

constexpr const char* kFilePrefix = "libft_strategy_";
constexpr const char* kFileSuffix = ".so";
// More entries than this means the descriptor is garbage, not a real plugin.
constexpr std::size_t kMaxEntries = 1024;

bool is_plugin_file_name(const std::string& name) {
  const std::size_t prefix = std::strlen(kFilePrefix);
  const std::size_t suffix = std::strlen(kFileSuffix);
  return name.size() > prefix + suffix && name.compare(0, prefix, kFilePrefix) == 0 &&
         name.compare(name.size() - suffix, suffix, kFileSuffix) == 0;
}

// Boost wraps dlerror() in "... (dlerror system message: <msg>): <errno text>"
// and dlerror repeats the path; keep only what the loader said about the file.
std::string load_failure_reason(const std::string& what, const std::string& file) {
  const std::string marker = "dlerror system message: ";
  const auto start = what.find(marker);
  if (start == std::string::npos) return what;
  auto end = what.rfind(')');
  if (end == std::string::npos || end < start) end = what.size();
  std::string reason = what.substr(start + marker.size(), end - start - marker.size());
  if (reason.compare(0, file.size() + 2, file + ": ") == 0) reason.erase(0, file.size() + 2);
  return reason;
}

// Anyone may replace what a world-writable file or directory holds, so a
// plugin there could be anyone's code.
std::optional<std::string> writable_by_others(const fsys::path& p) {
  std::error_code ec;
  const auto perms = fsys::status(p, ec).permissions();
  if (ec) return "cannot read its permissions: " + ec.message();
  if ((perms & fsys::perms::others_write) != fsys::perms::none) {
    return std::string("writable by every user (chmod o-w it)");
  }
  return std::nullopt;
}

// Keeps the library alive for exactly as long as the strategy: members are
// destroyed in reverse order, so the object goes before the library.
struct OwnedStrategy {
  std::shared_ptr<PluginHost::Library> library;
  std::unique_ptr<Strategy> strategy;
};

}  // namespace

DiscoveryOptions DiscoveryOptions::from_environment(std::vector<fsys::path> plugin_dirs) {
  DiscoveryOptions options;
  if (const char* env = std::getenv("FT_PLUGIN_PATH")) options.plugin_path = env;
  options.plugin_dirs = std::move(plugin_dirs);
  return options;
}

fsys::path default_builtin_plugin_dir() {
  std::error_code ec;
  const fsys::path exe = fsys::read_symlink("/proc/self/exe", ec);
  if (ec) fail("/proc/self/exe: cannot find the running executable ({}); pass the plugin directory explicitly", ec.message());
  return (exe.parent_path() / ".." / "lib" / "ft" / "strategies").lexically_normal();
}

PluginHost PluginHost::discover(const DiscoveryOptions& options) {
  // A --plugin-dir is an explicit request: a typo there must not be silent.
  for (const auto& dir : options.plugin_dirs) {
    std::error_code ec;
    if (!fsys::is_directory(dir, ec)) fail("--plugin-dir {}: not a directory", dir.string());
  }
  PluginHost host;
  if (options.use_builtin) {
    host.scan_dir(options.builtin_dir ? *options.builtin_dir : default_builtin_plugin_dir(), "built-in");
  }
  std::size_t begin = 0;
  const std::string& path = options.plugin_path;
  while (begin <= path.size()) {
    std::size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const fsys::path item = path.substr(begin, end - begin);
    if (item.is_relative() && !item.empty()) {
      // It would mean "relative to wherever ft happens to run", which is how
      // a planted file in a shared working directory gets loaded.
      host.warnings_.push_back(
          fmt::format("{} (FT_PLUGIN_PATH): a relative directory; ignored, use an absolute path", item.string()));
    } else if (!item.empty()) {
      host.scan_dir(item, "FT_PLUGIN_PATH");
    }
    begin = end + 1;
  }
  for (const auto& dir : options.plugin_dirs) host.scan_dir(dir, "--plugin-dir");
  return host;
}

void PluginHost::scan_dir(const fsys::path& given, const std::string& origin) {
  std::error_code ec;
  // Canonical from here on: dlopen gets absolute paths only (never a bare
  // name for the loader's search path), and "inside the directory" below
  // means inside its real location.
  const fsys::path dir = fsys::canonical(given, ec);
  if (ec || !fsys::is_directory(dir, ec)) {
    warnings_.push_back(fmt::format("{} ({}): not a directory; no plugins loaded from it", given.string(), origin));
    return;
  }
  if (const auto why = writable_by_others(dir)) {
    warnings_.push_back(fmt::format("{} ({}): {}; no plugins loaded from it", dir.string(), origin, *why));
    return;
  }
  std::vector<fsys::path> files;
  for (fsys::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file_name = it->path().filename().string();
    if (!is_plugin_file_name(file_name)) {
      // A library in a directory the user named is likely meant as a plugin:
      // create() mentions it when its name holds the strategy asked for.
      const std::size_t suffix = std::strlen(kFileSuffix);
      if (origin != "built-in" && file_name.size() > suffix &&
          file_name.compare(file_name.size() - suffix, suffix, kFileSuffix) == 0) {
        misnamed_.push_back(it->path());
      }
      continue;
    }
    std::error_code type_ec;
    if (fsys::is_regular_file(it->path(), type_ec)) files.push_back(it->path());
  }
  if (ec) {
    warnings_.push_back(fmt::format("{} ({}): cannot list the directory: {}", dir.string(), origin, ec.message()));
  }
  std::sort(files.begin(), files.end());  // load order must not depend on the file system
  for (const auto& file : files) {
    std::error_code link_ec;
    const fsys::path target = fsys::canonical(file, link_ec);
    if (link_ec) {
      warnings_.push_back(fmt::format("{}: cannot resolve the path: {}", file.string(), link_ec.message()));
    } else if (target.parent_path() != dir) {
      // A symlink may rename a plugin, not bring one in from elsewhere.
      warnings_.push_back(fmt::format("{}: a symlink to {}, outside {}; refused (plugins load only from the "
                                      "configured directories)", file.string(), target.string(), dir.string()));
    } else if (const auto why = writable_by_others(target)) {
      warnings_.push_back(fmt::format("{}: {}; refused", target.string(), *why));
    } else {
      load_file(target, origin);
    }
  }
}

void PluginHost::load_file(const fsys::path& path, const std::string& origin) {
  const fsys::path& file = path;  // canonical (scan_dir)
  // The same file reached twice (a directory listed twice, a symlink) is one plugin.
  if (std::find(seen_files_.begin(), seen_files_.end(), file) != seen_files_.end()) return;
  seen_files_.push_back(file);
  const std::string where = file.string();

  auto library = std::make_shared<Library>();
  library->file = file;
  try {
    // rtld_now: a plugin built against another ft_core fails here with the
    // missing symbol named, not later in the middle of a run.
    library->library.load(file, boost::dll::load_mode::rtld_now);
  } catch (const std::exception& e) {
    warnings_.push_back(fmt::format("{}: not a loadable shared library: {}", where, load_failure_reason(e.what(), where)));
    return;
  }
  if (!library->library.has(kPluginEntrySymbol)) {
    warnings_.push_back(fmt::format(
        "{}: no '{}' entry symbol; not an ft strategy plugin (register strategies with FT_STRATEGY_PLUGIN)",
        where, kPluginEntrySymbol));
    return;
  }

  const PluginDescriptor* plugin = nullptr;
  try {
    plugin = library->library.get_alias<PluginEntryFunction>(kPluginEntrySymbol)();
  } catch (const std::exception& e) {
    warnings_.push_back(fmt::format("{}: the plugin entry function failed: {}", where, e.what()));
    return;
  }
  if (plugin == nullptr) {
    warnings_.push_back(fmt::format("{}: malformed plugin: the entry function returned no descriptor", where));
    return;
  }
  // Only abi_version may be read before it is known to match.
  if (plugin->abi_version != kPluginAbiVersion) {
    warnings_.push_back(fmt::format("{}: plugin ABI version {}, this ft expects {}; rebuild the plugin against this ft",
                                    where, plugin->abi_version, kPluginAbiVersion));
    return;
  }
  if (plugin->torch_version == nullptr || plugin->plugin_name == nullptr || plugin->plugin_version == nullptr) {
    warnings_.push_back(fmt::format("{}: malformed plugin: missing LibTorch version, plugin name or plugin version", where));
    return;
  }
  if (plugin->entry_count == 0 || plugin->entry_count > kMaxEntries || plugin->entries == nullptr) {
    warnings_.push_back(fmt::format("{}: malformed plugin: {} strategy entries (expected 1 to {})", where,
                                    plugin->entries == nullptr ? 0 : plugin->entry_count, kMaxEntries));
    return;
  }
  std::vector<std::string> names;
  for (std::size_t i = 0; i < plugin->entry_count; ++i) {
    const PluginEntry& entry = plugin->entries[i];
    if (entry.name == nullptr || entry.name[0] == '\0') {
      warnings_.push_back(fmt::format("{}: malformed plugin: strategy entry #{} has no name", where, i));
      return;
    }
    if (entry.factory == nullptr) {
      warnings_.push_back(fmt::format("{}: malformed plugin: strategy '{}' has no factory", where, entry.name));
      return;
    }
    if (std::find(names.begin(), names.end(), entry.name) != names.end()) {
      warnings_.push_back(fmt::format("{}: malformed plugin: strategy '{}' is registered twice", where, entry.name));
      return;
    }
    names.emplace_back(entry.name);
  }
  if (std::strcmp(plugin->torch_version, TORCH_VERSION) != 0) {
    const std::string reason = fmt::format("{}: built with LibTorch {}, this ft uses {}; rebuild the plugin against this ft",
                                           where, plugin->torch_version, TORCH_VERSION);
    warnings_.push_back(reason);
    // The layout is trusted (same ABI), so create() can say why these names are missing.
    for (const auto& name : names) incompatible_.emplace(name, reason);
    return;
  }

  for (std::size_t i = 0; i < plugin->entry_count; ++i) {
    const PluginEntry& entry = plugin->entries[i];
    const std::string name = entry.name;
    auto conflict = conflicts_.find(name);
    auto existing = strategies_.find(name);
    if (existing != strategies_.end()) {
      // Neither file wins: silently preferring one would run code the user did not pick.
      const std::string reason = fmt::format("strategy '{}' is registered by both {} and {}; remove one of them",
                                             name, existing->second.info.file.string(), where);
      warnings_.push_back(reason);
      strategies_.erase(existing);
      conflicts_[name] = reason;
      continue;
    }
    if (conflict != conflicts_.end()) {
      conflict->second = fmt::format("{}; {} registers it too", conflict->second, where);
      warnings_.push_back(fmt::format("strategy '{}' is registered by {} too; it stays refused", name, where));
      continue;
    }
    Registered registered;
    registered.info.name = name;
    registered.info.description = entry.description != nullptr ? entry.description : "";
    registered.info.plugin_name = plugin->plugin_name;
    registered.info.plugin_version = plugin->plugin_version;
    registered.info.file = file;
    registered.info.origin = origin;
    registered.library = library;
    registered.factory = entry.factory;
    strategies_.emplace(name, std::move(registered));
  }
}

std::vector<StrategyInfo> PluginHost::list() const {
  std::vector<StrategyInfo> infos;
  infos.reserve(strategies_.size());
  for (const auto& [name, registered] : strategies_) infos.push_back(registered.info);
  return infos;  // std::map keeps them sorted by name
}

std::shared_ptr<Strategy> PluginHost::create(const std::string& name) const {
  auto found = strategies_.find(name);
  if (found == strategies_.end()) {
    // A conflict outranks an incompatible copy: it is the reason the name is missing.
    for (const auto* reasons : {&conflicts_, &incompatible_}) {
      auto refused = reasons->find(name);
      if (refused != reasons->end()) fail("strategy '{}' is unavailable: {}", name, refused->second);
    }
    std::string known;
    for (const auto& [known_name, registered] : strategies_) known += (known.empty() ? "" : ", ") + known_name;
    if (known.empty()) known = "(none)";
    std::string refusals;
    if (!warnings_.empty()) {
      // Name a refused file: the one called after the strategy if there is one.
      const std::string file_name = kFilePrefix + name + kFileSuffix;
      auto example = std::find_if(warnings_.begin(), warnings_.end(),
                                  [&](const std::string& w) { return w.find(file_name) != std::string::npos; });
      if (example == warnings_.end()) example = warnings_.begin();
      refusals = fmt::format(" ({} plugin problem(s) found while scanning, e.g. {}; see `ft strategies --verbose`)",
                             warnings_.size(), *example);
    }
    for (const auto& file : misnamed_) {
      if (file.filename().string().find(name) == std::string::npos) continue;
      refusals += fmt::format("; {} was not loaded: plugin files are named {}<name>{} (rename it {}{}{})",
                              file.string(), kFilePrefix, kFileSuffix, kFilePrefix, name, kFileSuffix);
      break;
    }
    fail("unknown strategy '{}'; known strategies: {}{}", name, known, refusals);
  }
  const Registered& registered = found->second;
  auto owned = std::make_shared<OwnedStrategy>();
  owned->library = registered.library;
  try {
    owned->strategy.reset(registered.factory());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}: creating strategy '{}' failed: {}", registered.info.file.string(), name, e.what());
  }
  if (!owned->strategy) fail("{}: the factory of strategy '{}' returned null", registered.info.file.string(), name);
  Strategy* strategy = owned->strategy.get();
  return std::shared_ptr<Strategy>(std::move(owned), strategy);
}

}  // namespace ft
