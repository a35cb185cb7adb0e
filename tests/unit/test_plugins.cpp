// PluginHost against the test-only plugins built by tests/plugins/ into
// <build>/test-plugins/<case>/, one situation per folder.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <torch/version.h>

#include "ft/base/error.h"
#include "ft/plugin/plugin.h"
#include "ft/plugin/plugin_host.h"
#include "ft_test.h"

namespace fs = std::filesystem;

namespace {

fs::path case_dir(const std::string& name) { return ft_test::binary_dir() / "test-plugins" / name; }

fs::path plugin_file(const std::string& dir, const std::string& name) {
  return fs::canonical(case_dir(dir) / ("libft_strategy_" + name + ".so"));
}

// Only the given --plugin-dir dirs: never the real built-in strategies.
ft::PluginHost discover_dirs(std::vector<fs::path> dirs) {
  ft::DiscoveryOptions options;
  options.use_builtin = false;
  options.plugin_dirs = std::move(dirs);
  return ft::PluginHost::discover(options);
}

std::vector<std::string> names(const ft::PluginHost& host) {
  std::vector<std::string> out;
  for (const auto& info : host.list()) out.push_back(info.name);
  return out;
}

std::string create_error(const ft::PluginHost& host, const std::string& name) {
  try {
    host.create(name);
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Whether `file` is mapped into this process right now.
bool is_mapped(const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  return text.find(file.string()) != std::string::npos;
}

}  // namespace

TEST_CASE("a good plugin registers both names with its metadata") {
  const auto host = discover_dirs({case_dir("good")});
  // notes.txt, libother.so and libft_strategy_old.so.bak are text files: never opened.
  CHECK(host.warnings().empty());
  const auto infos = host.list();
  REQUIRE(infos.size() == 2);
  CHECK(infos[0].name == "test_alpha");
  CHECK(infos[0].description == "Test strategy alpha");
  CHECK(infos[1].name == "test_beta");
  CHECK(infos[1].description == "Test strategy beta");
  for (const auto& info : infos) {
    CHECK(info.plugin_name == "good");
    CHECK(info.plugin_version == "1.2.3");
    CHECK(info.file == plugin_file("good", "good"));
    CHECK(info.origin == "--plugin-dir");
  }
}

TEST_CASE("create() runs the factory registered under that name") {
  const auto host = discover_dirs({case_dir("good")});
  const auto alpha = host.create("test_alpha");
  const auto beta = host.create("test_beta");
  REQUIRE(alpha);
  REQUIRE(beta);
  CHECK(alpha->state_bytes().params == 11);
  CHECK(alpha->state_bytes().total() == 66);
  CHECK(beta->state_bytes().params == 22);
  CHECK(beta->state_bytes().optimizer == 66);
  // ft::Error thrown inside the plugin is caught as ft::Error here.
  CHECK_THROWS_WITH_AS(alpha->forward(ft::Batch{}), "test plugin", ft::Error);
  CHECK_THROWS_WITH_AS(beta->step(ft::StepOptions{}), "test plugin", ft::Error);
  // set_training is ft_core's default and tolerates a strategy without a model.
  alpha->set_training(false);
}

TEST_CASE("an unknown name lists the known ones") {
  const auto host = discover_dirs({case_dir("good")});
  CHECK(create_error(host, "nope") == "unknown strategy 'nope'; known strategies: test_alpha, test_beta");
  const auto empty = discover_dirs({});
  CHECK(create_error(empty, "ddp") == "unknown strategy 'ddp'; known strategies: (none)");
}

TEST_CASE("the strategy keeps its library loaded after the host is gone") {
  const fs::path file = plugin_file("good", "good");
  CHECK_FALSE(is_mapped(file));
  std::shared_ptr<ft::Strategy> strategy;
  {
    const auto host = discover_dirs({case_dir("good")});
    strategy = host.create("test_beta");
    CHECK(is_mapped(file));
  }
  // Only the strategy holds the library now; calling into it must still work.
  CHECK(is_mapped(file));
  CHECK(strategy->state_bytes().grads == 44);
  CHECK_THROWS_WITH_AS(strategy->backward(at::Tensor(), true), "test plugin", ft::Error);
  strategy.reset();  // runs the plugin's destructor, then unloads
  CHECK_FALSE(is_mapped(file));
}

TEST_CASE("origins follow the discovery source and a file is loaded once") {
  const fs::path good = case_dir("good");
  ft::DiscoveryOptions options;
  options.builtin_dir = good;
  auto host = ft::PluginHost::discover(options);
  CHECK(host.warnings().empty());
  REQUIRE(host.list().size() == 2);
  CHECK(host.list()[0].origin == "built-in");

  options.use_builtin = false;
  options.plugin_path = "::" + good.string() + ":";  // empty items are skipped
  host = ft::PluginHost::discover(options);
  CHECK(host.warnings().empty());
  REQUIRE(host.list().size() == 2);
  CHECK(host.list()[0].origin == "FT_PLUGIN_PATH");

  // The same directory through every source: one plugin, first origin wins, no conflict.
  options.use_builtin = true;
  options.plugin_dirs = {good};
  host = ft::PluginHost::discover(options);
  CHECK(host.warnings().empty());
  CHECK(names(host) == std::vector<std::string>{"test_alpha", "test_beta"});
  CHECK(host.list()[1].origin == "built-in");
}

TEST_CASE("missing directories: a warning for FT_PLUGIN_PATH, an error for --plugin-dir") {
  const fs::path missing = ft_test::binary_dir() / "test-plugins" / "no-such-dir";
  ft::DiscoveryOptions options;
  options.use_builtin = false;
  options.plugin_path = missing.string();
  const auto host = ft::PluginHost::discover(options);
  REQUIRE(host.warnings().size() == 1);
  CHECK(host.warnings()[0] == missing.string() + " (FT_PLUGIN_PATH): not a directory; no plugins loaded from it");

  options.plugin_dirs = {missing};
  CHECK_THROWS_WITH_AS(ft::PluginHost::discover(options), ("--plugin-dir " + missing.string() + ": not a directory").c_str(),
                       ft::Error);
}

TEST_CASE("the default built-in directory is <exe dir>/../lib/ft/strategies") {
  const fs::path expected = fs::weakly_canonical(ft_test::binary_dir() / "lib" / "ft" / "strategies");
  CHECK(fs::weakly_canonical(ft::default_builtin_plugin_dir()) == expected);
}

TEST_CASE("the built-in strategies are exactly the seeds' rows plus auto, pipeline and tensor, each from its own plugin") {
  ft::DiscoveryOptions options;
  options.builtin_dir = ft_test::binary_dir() / "lib" / "ft" / "strategies";
  const auto host = ft::PluginHost::discover(options);
  CHECK(host.warnings().empty());
  auto got = names(host);
  std::sort(got.begin(), got.end());
  // A strategy added or lost changes the README, ft bench's matrix and the docs: this list says so.
  CHECK(got == std::vector<std::string>{"auto", "ddp", "ddp_amp", "dp", "fsdp", "horovod", "pipeline", "single",
                                        "tensor", "zero1", "zero2", "zero3"});
  std::map<std::string, std::string> library;
  for (const auto& info : host.list()) library[info.name] = info.file.filename().string();
  CHECK(library["ddp_amp"] == "libft_strategy_ddp.so");
  for (const char* sharded : {"zero1", "zero2", "zero3", "fsdp"}) CHECK(library[sharded] == "libft_strategy_sharded.so");
  for (const char* own : {"auto", "dp", "horovod", "pipeline", "single", "tensor"})
    CHECK(library[own] == std::string("libft_strategy_") + own + ".so");
}

TEST_CASE("a plugin built for another ABI version is refused, naming both versions") {
  const auto host = discover_dirs({case_dir("wrong_abi")});
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 1);
  CHECK(host.warnings()[0] == plugin_file("wrong_abi", "wrong_abi").string() +
                                  ": plugin ABI version 99, this ft expects " + std::to_string(ft::kPluginAbiVersion) + "; rebuild the plugin against this ft");
  CHECK(create_error(host, "test_wrong_abi") ==
        "unknown strategy 'test_wrong_abi'; known strategies: (none) (1 plugin problem(s) found while scanning, e.g. " +
            host.warnings()[0] + "; see `ft strategies --verbose`)");
}

TEST_CASE("a plugin built with another LibTorch is refused, naming both versions") {
  const auto host = discover_dirs({case_dir("wrong_torch")});
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 1);
  const std::string expected = plugin_file("wrong_torch", "wrong_torch").string() +
                               ": built with LibTorch 2.1.0, this ft uses " + TORCH_VERSION +
                               "; rebuild the plugin against this ft";
  CHECK(host.warnings()[0] == expected);
  CHECK(std::string(TORCH_VERSION) != "2.1.0");  // else this test proves nothing
  CHECK(create_error(host, "test_wrong_torch") == "strategy 'test_wrong_torch' is unavailable: " + expected);
}

TEST_CASE("a shared library without the entry symbol is refused") {
  const auto host = discover_dirs({case_dir("no_entry")});
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 1);
  CHECK(host.warnings()[0] == plugin_file("no_entry", "no_entry").string() +
                                  ": no 'ft_strategy_plugin' entry symbol; not an ft strategy plugin "
                                  "(register strategies with FT_STRATEGY_PLUGIN)");
}

TEST_CASE("two plugins claiming one name: the name is refused, naming both files") {
  const auto host = discover_dirs({case_dir("dup")});
  CHECK(names(host) == std::vector<std::string>{"test_only_a", "test_only_b"});
  REQUIRE(host.warnings().size() == 1);
  const std::string expected = "strategy 'test_twin' is registered by both " + plugin_file("dup", "dup_a").string() +
                               " and " + plugin_file("dup", "dup_b").string() + "; remove one of them";
  CHECK(host.warnings()[0] == expected);
  CHECK(create_error(host, "test_twin") == "strategy 'test_twin' is unavailable: " + expected);
  CHECK(host.create("test_only_b")->state_bytes().params == 3);
}

TEST_CASE("a copy of a built-in plugin in --plugin-dir conflicts instead of shadowing") {
  ft_test::TempDir dir("plugins-copy");
  const fs::path copy = dir.path() / "libft_strategy_good_copy.so";
  fs::copy_file(plugin_file("good", "good"), copy);
  ft::DiscoveryOptions options;
  options.builtin_dir = case_dir("good");
  options.plugin_dirs = {dir.path()};
  const auto host = ft::PluginHost::discover(options);
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 2);
  CHECK(host.warnings()[0] == "strategy 'test_alpha' is registered by both " + plugin_file("good", "good").string() +
                                  " and " + fs::canonical(copy).string() + "; remove one of them");
}

TEST_CASE("a text file named like a plugin is refused as not a shared library") {
  const auto host = discover_dirs({case_dir("not_a_library")});
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 1);
  const std::string prefix = plugin_file("not_a_library", "bogus").string() + ": not a loadable shared library: ";
  CHECK(host.warnings()[0].rfind(prefix, 0) == 0);
  CHECK(host.warnings()[0].substr(prefix.size()) == "file too short");  // the loader's reason, path not repeated
  CHECK(host.warnings()[0].find('\n') == std::string::npos);
}

TEST_CASE("a library not named libft_strategy_<name>.so is never loaded, but named when its strategy is asked for") {
  const auto host = discover_dirs({case_dir("misnamed")});
  CHECK(host.list().empty());
  CHECK(host.warnings().empty());
  const auto file = fs::canonical(case_dir("misnamed") / "libft_bogus.so");
  CHECK(create_error(host, "bogus") ==
        "unknown strategy 'bogus'; known strategies: (none); " + file.string() +
            " was not loaded: plugin files are named libft_strategy_<name>.so (rename it libft_strategy_bogus.so)");
  CHECK(create_error(host, "other") == "unknown strategy 'other'; known strategies: (none)");
}

TEST_CASE("a plugin with a malformed entry is refused as a whole") {
  const auto host = discover_dirs({case_dir("malformed")});
  CHECK(host.list().empty());  // test_fine_1 / test_fine_2 are not registered either
  REQUIRE(host.warnings().size() == 2);
  CHECK(host.warnings()[0] == plugin_file("malformed", "no_factory").string() +
                                  ": malformed plugin: strategy 'test_no_factory' has no factory");
  CHECK(host.warnings()[1] == plugin_file("malformed", "no_name").string() +
                                  ": malformed plugin: strategy entry #1 has no name");
}

TEST_CASE("every case at once: good names survive, each problem is one warning") {
  ft::DiscoveryOptions options;
  options.use_builtin = false;
  for (const char* name : {"good", "wrong_abi", "wrong_torch", "no_entry", "dup", "not_a_library", "malformed"}) {
    options.plugin_path += case_dir(name).string() + ":";
  }
  const auto host = ft::PluginHost::discover(options);
  CHECK(names(host) == std::vector<std::string>{"test_alpha", "test_beta", "test_only_a", "test_only_b"});
  CHECK(host.warnings().size() == 7);
  CHECK(create_error(host, "nope") ==
        "unknown strategy 'nope'; known strategies: test_alpha, test_beta, test_only_a, test_only_b "
        "(7 plugin problem(s) found while scanning, e.g. " + host.warnings()[0] + "; see `ft strategies --verbose`)");
}
