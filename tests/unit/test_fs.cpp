// Crash-safe file and directory writes (ft/base/fs.h).
#include <algorithm>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft_test.h"

namespace stdfs = std::filesystem;

namespace {

using ft_test::error_of;

// Names in `dir`, sorted (hidden temp leftovers included).
std::vector<std::string> listing(const stdfs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : stdfs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("write_file_atomic: writes, overwrites, leaves no temp file") {
  ft_test::TempDir dir("fs-write");
  const stdfs::path path = dir.path() / "a.txt";
  ft::fs::write_file_atomic(path, "first");
  CHECK(ft::fs::read_file(path) == "first");
  const std::string binary("x\0y\n", 4);
  ft::fs::write_file_atomic(path, binary);
  CHECK(ft::fs::read_file(path) == binary);
  ft::fs::write_file_atomic(path, "");
  CHECK(ft::fs::read_file(path).empty());
  CHECK(listing(dir.path()) == std::vector<std::string>{"a.txt"});
}

TEST_CASE("write_file_atomic: streaming form; a throwing producer leaves the old file") {
  ft_test::TempDir dir("fs-stream");
  const stdfs::path path = dir.path() / "s.bin";
  ft::fs::write_file_atomic(path, [](const ft::fs::ByteSink& sink) {
    sink("abc", 3);
    sink("defg", 4);
  });
  CHECK(ft::fs::read_file(path) == "abcdefg");
  CHECK_THROWS_AS(ft::fs::write_file_atomic(path,
                                            [](const ft::fs::ByteSink& sink) {
                                              sink("partial", 7);
                                              throw std::runtime_error("producer failed");
                                            }),
                  std::runtime_error);
  CHECK(ft::fs::read_file(path) == "abcdefg");
  CHECK(listing(dir.path()) == std::vector<std::string>{"s.bin"});
}

TEST_CASE("write_file_atomic / read_file: errors name the path") {
  ft_test::TempDir dir("fs-errors");
  const stdfs::path nowhere = dir.path() / "no-such-dir" / "f.txt";
  CHECK(error_of([&] { ft::fs::write_file_atomic(nowhere, "x"); }) ==
        "cannot write " + nowhere.string() + ": No such file or directory");
  const stdfs::path missing = dir.path() / "missing.txt";
  CHECK(error_of([&] { ft::fs::read_file(missing); }) ==
        "cannot read " + missing.string() + ": No such file or directory");
  CHECK(error_of([&] { ft::fs::read_file(dir.path()); }) == "cannot read " + dir.path().string() + ": Is a directory");
  // Renaming a file over a non-empty directory fails; the temp file must go.
  stdfs::create_directories(dir.path() / "taken" / "inner");
  CHECK(error_of([&] { ft::fs::write_file_atomic(dir.path() / "taken", "x"); })
            .rfind("cannot write " + (dir.path() / "taken").string() + ": rename: ", 0) == 0);
  CHECK(listing(dir.path()) == std::vector<std::string>{"taken"});
}

TEST_CASE("AtomicDir: commit creates the directory with its content") {
  ft_test::TempDir dir("fs-dir-new");
  const stdfs::path final_path = dir.path() / "sub" / "ckpt";  // parent created on demand
  {
    ft::fs::AtomicDir out(final_path);
    CHECK(out.path().parent_path() == final_path.parent_path());
    CHECK(out.path().filename().string().rfind(".ckpt.tmp-", 0) == 0);
    CHECK(stdfs::is_directory(out.path()));
    ft::fs::write_file_atomic(out.path() / "a.txt", "A");
    stdfs::create_directories(out.path() / "nested");
    ft::fs::write_file_atomic(out.path() / "nested" / "b.txt", "B");
    CHECK_FALSE(stdfs::exists(final_path));
    out.commit();
    CHECK(out.committed());
  }
  CHECK(ft::fs::read_file(final_path / "a.txt") == "A");
  CHECK(ft::fs::read_file(final_path / "nested" / "b.txt") == "B");
  CHECK(listing(final_path.parent_path()) == std::vector<std::string>{"ckpt"});
}

TEST_CASE("AtomicDir: commit replaces an existing directory entirely") {
  ft_test::TempDir dir("fs-dir-replace");
  const stdfs::path final_path = dir.path() / "ckpt";
  {
    ft::fs::AtomicDir first(final_path);
    ft::fs::write_file_atomic(first.path() / "old-only.txt", "old");
    ft::fs::write_file_atomic(first.path() / "shared.txt", "v1");
    first.commit();
  }
  {
    ft::fs::AtomicDir second(final_path);
    ft::fs::write_file_atomic(second.path() / "shared.txt", "v2");
    CHECK(ft::fs::read_file(final_path / "shared.txt") == "v1");  // old intact until commit
    second.commit();
    CHECK_THROWS_AS(second.commit(), ft::Error);
  }
  CHECK(listing(final_path) == std::vector<std::string>{"shared.txt"});
  CHECK(ft::fs::read_file(final_path / "shared.txt") == "v2");
  CHECK(listing(dir.path()) == std::vector<std::string>{"ckpt"});
}

TEST_CASE("AtomicDir: destroyed without commit leaves nothing and keeps the old dir") {
  ft_test::TempDir dir("fs-dir-abort");
  const stdfs::path final_path = dir.path() / "ckpt";
  {
    ft::fs::AtomicDir out(final_path);
    ft::fs::write_file_atomic(out.path() / "a.txt", "A");
  }
  CHECK(listing(dir.path()).empty());

  stdfs::create_directories(final_path);
  ft::fs::write_file_atomic(final_path / "keep.txt", "keep");
  try {
    ft::fs::AtomicDir out(final_path);
    ft::fs::write_file_atomic(out.path() / "a.txt", "A");
    throw std::runtime_error("training crashed");
  } catch (const std::runtime_error&) {
  }
  CHECK(listing(dir.path()) == std::vector<std::string>{"ckpt"});
  CHECK(listing(final_path) == std::vector<std::string>{"keep.txt"});
}

TEST_CASE("AtomicDir: a file in the way is an error naming the path") {
  ft_test::TempDir dir("fs-dir-file");
  const stdfs::path final_path = dir.path() / "ckpt";
  ft::fs::write_file_atomic(final_path, "i am a file");
  ft::fs::AtomicDir out(final_path);
  CHECK(error_of([&] { out.commit(); }) == "cannot commit " + final_path.string() + ": it exists and is not a directory");
  CHECK(ft::fs::read_file(final_path) == "i am a file");
}
