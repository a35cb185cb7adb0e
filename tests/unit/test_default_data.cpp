// The embedded default run finds its model and data from any working
// directory (docs/running.md "Your own data"): $FT_DATA, ./data, the
// checkout's data/ beside build/, an installed share/ft/data; a missing one
// is one line naming the key, the places looked in and what to set.
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "ft/config/config.h"
#include "ft/config/config_import.h"
#include "ft_run.h"
#include "ft_test.h"

namespace {

namespace fsys = std::filesystem;

const char* const kDefaultLike = R"(model:
  config: data/no-such-model
data:
  train: data/imdb/train.jsonl
  labels: [neg, pos]
)";

}  // namespace

TEST_CASE("a default input found nowhere is one line naming the key, the places and what to set") {
  ft_test::TempDir tmp("default-data");
  const ft::RunConfig c = ft::config_from_layers(kDefaultLike, "default (embedded)", true, ft::ConfigImports{}, {});
  REQUIRE(c.missing_default_data.size() == 1);
  const std::string line = ft_test::error_of([&] { ft::require_default_data(c); });
  CHECK(line.find("the built-in default run needs data/no-such-model (model.config), found in none of: ") == 0);
  CHECK(line.find("(the working directory)") != std::string::npos);
  CHECK(line.find("(the checkout)") != std::string::npos);
  CHECK(line.find("set FT_DATA to the directory that holds no-such-model, or set model.config yourself "
                  "(--set model.config=PATH)") != std::string::npos);
  // A value the user set is theirs: relative to the working directory, never looked up.
  const ft::RunConfig mine = ft::config_from_layers(kDefaultLike, "default (embedded)", true, ft::ConfigImports{},
                                                    {"model.config=data/no-such-model"});
  CHECK(mine.missing_default_data.empty());
  CHECK(mine.model.config == "data/no-such-model");
}

TEST_CASE("FT_DATA is looked in first") {
  ft_test::TempDir tmp("default-data-env");
  fsys::create_directories(tmp.path() / "no-such-model");
  std::ofstream(tmp.path() / "no-such-model" / "vocab.txt") << "[PAD]\n";
  ::setenv("FT_DATA", tmp.path().c_str(), 1);
  const ft::RunConfig c = ft::config_from_layers(kDefaultLike, "default (embedded)", true, ft::ConfigImports{}, {});
  ::unsetenv("FT_DATA");
  CHECK(c.missing_default_data.empty());
  CHECK(c.model.config == (tmp.path() / "no-such-model").lexically_normal().string());
}

TEST_CASE("ft run --data mine.csv works from a directory outside the checkout") {
  if (!fsys::exists(ft_test::source_dir() / "data/all-minilm-l6-v2/model.safetensors")) {
    ft_test::skip("needs data/all-minilm-l6-v2 (scripts/fetch-data.sh)");
    return;
  }
  ft_test::TempDir tmp("default-data-outside");
  {
    std::ofstream csv(tmp.path() / "mine.csv");
    csv << "sentence,label\n";
    for (int i = 0; i < 8; ++i) csv << (i % 2 ? "a dull plot,bad\n" : "a great film,good\n");
  }
  const auto run = ft_test::run_ft("run --data mine.csv --text-field sentence --max-steps 1 --set train.batch_size=4 "
                                   "--set data.max_seq_len=16",
                                   "", tmp.path());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(fsys::exists(tmp.path() / "runs/mine/final/manifest.json"));
}
