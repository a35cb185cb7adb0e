// doctest's main, plus ctest's Skipped: a binary whose test cases skipped
// for want of something (../shared, fetched data, the Python env) and had
// no failure exits 77, which tests/CMakeLists.txt maps to SKIP_RETURN_CODE,
// so a clone without ../shared reports those tests as Skipped, not Passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "ft_test.h"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int failed = context.run();
  if (context.shouldExit()) return failed;
  const int skipped = ft_test::skipped_cases();
  if (failed == 0 && skipped > 0) {
    std::printf("%d test case(s) skipped (see SKIPPED lines above)\n", skipped);
    return ft_test::kSkipExit;
  }
  return failed;
}
