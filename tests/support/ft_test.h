// Shared helpers for ft's doctest suites.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>
#include <unistd.h>

#include <doctest/doctest.h>

#include "ft/base/error.h"

namespace ft_test {

// ../shared beside the checkout (CI always has it; a user's clone may not).
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("FT_SHARED_DIR")) return env;
  return FT_SHARED_DIR;
}

inline bool have_shared(const char* sub = "") {
  return std::filesystem::exists(shared_dir() / sub);
}

// Why each skipped test case of this process could not run, in order.
inline std::vector<std::string>& skip_reasons() {
  static std::vector<std::string> reasons;
  return reasons;
}
inline int skipped_cases() { return static_cast<int>(skip_reasons().size()); }

// Says why the current test case cannot run here; the caller returns.
// doctest_main.cpp records it for ctest's `skipped_cases` entry.
inline void skip(const std::string& why) {
  MESSAGE("SKIPPED: " << why);
  skip_reasons().push_back(why);
}

inline std::filesystem::path source_dir() { return FT_SOURCE_DIR; }
inline std::filesystem::path binary_dir() { return FT_BINARY_DIR; }
inline std::filesystem::path ft_exe() { return binary_dir() / "bin" / "ft"; }

// The message of the ft::Error that f throws, or "<no ft::Error>".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "<no ft::Error>";
}

// A fresh empty directory under the build tree, removed at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = binary_dir() / "test-tmp" /
            (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace ft_test

// Tests that need ../shared say so visibly and skip when it is absent.
#define FT_REQUIRE_SHARED(sub)                                                   \
  do {                                                                           \
    if (!ft_test::have_shared(sub)) {                                            \
      ft_test::skip("needs " + (ft_test::shared_dir() / (sub)).string());        \
      return;                                                                    \
    }                                                                            \
  } while (0)
