// The embedded default run's inputs, found from any working directory
// (default_data.h).
#include "default_data.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ft/base/error.h"

namespace ft {
namespace fsys = std::filesystem;

namespace {

constexpr const char* kPrefix = "data/";

// The data roots to try, with how each is named in the error line.
std::vector<std::pair<fsys::path, std::string>> data_roots() {
  std::vector<std::pair<fsys::path, std::string>> roots;
  if (const char* env = std::getenv("FT_DATA"); env != nullptr && *env != '\0') roots.emplace_back(env, "FT_DATA");
  std::error_code ec;
  roots.emplace_back(fsys::current_path(ec) / "data", "the working directory");
  // build/bin/ft in a checkout, <prefix>/bin/ft when installed.
  const fsys::path exe = fsys::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fsys::path bin = exe.parent_path();
    roots.emplace_back(bin.parent_path().parent_path() / "data", "the checkout");
    roots.emplace_back(bin.parent_path() / "share" / "ft" / "data", "the installed share directory");
  }
  return roots;
}

}  // namespace

void locate_default_data(RunConfig& config, const std::function<bool(const std::string& key)>& from_default) {
  std::vector<std::pair<std::string, std::string*>> keys = {{"model.config", &config.model.config},
                                                             {"model.weights", &config.model.weights},
                                                             {"data.train", &config.data.train},
                                                             {"data.vocab", &config.data.vocab}};
  for (auto& f : config.data.dev.files) keys.emplace_back("data.dev", &f.path);
  std::vector<std::pair<fsys::path, std::string>> roots;
  for (const auto& [key, value] : keys) {
    if (value->rfind(kPrefix, 0) != 0 || !from_default(key)) continue;
    if (roots.empty()) roots = data_roots();
    const std::string rest = value->substr(std::string(kPrefix).size());
    std::vector<std::string> tried;
    bool found = false;
    for (const auto& [root, name] : roots) {
      std::error_code ec;
      if (fsys::exists(root / rest, ec)) {
        *value = (root / rest).lexically_normal().string();
        found = true;
        break;
      }
      tried.push_back(fmt::format("{} ({})", (root / rest).lexically_normal().string(), name));
    }
    if (found) continue;
    config.missing_default_data.push_back(fmt::format("the built-in default run needs {} ({}), found in none of: {}; run scripts/fetch-data.sh in the checkout, "
         "set FT_DATA to the directory that holds {}, or set {} yourself (--set {}=PATH)",
         *value, key, fmt::join(tried, ", "), rest, key, key));
  }
}

void require_default_data(const RunConfig& config) {
  if (!config.missing_default_data.empty()) fail("{}", config.missing_default_data.front());
}

}  // namespace ft
