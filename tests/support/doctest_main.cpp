// doctest's main, plus the record of skipped cases: a binary passes or fails
// on the cases that ran, and the cases that could not run here (no
// ../shared, no fetched data, no Python env) are written to
// <build>/Testing/skipped/<binary>.txt, which ctest's `skipped_cases` entry
// lists as Skipped (tests/CMakeLists.txt). One skipped case no longer hides
// a binary's passes behind a Skipped status.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "ft_test.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const std::string binary = fs::path(argv[0]).filename().string();
  const fs::path record = ft_test::binary_dir() / "Testing" / "skipped" / (binary + ".txt");
  std::error_code ec;
  fs::remove(record, ec);  // a crash must not leave the last run's record behind
  doctest::Context context(argc, argv);
  const int failed = context.run();
  if (context.shouldExit()) return failed;
  const auto& reasons = ft_test::skip_reasons();
  if (!reasons.empty()) {
    fs::create_directories(record.parent_path(), ec);
    std::ofstream out(record);
    for (const auto& why : reasons) out << binary << ": " << why << "\n";
    std::printf("%zu test case(s) skipped (see SKIPPED lines above; ctest lists them under skipped_cases)\n",
                reasons.size());
  }
  return failed;
}
