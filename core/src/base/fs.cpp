// Crash-safe writes: temp name + fsync + rename (see ft/base/fs.h for the contract).
#include "ft/base/fs.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <regex>
#include <system_error>
#include <utility>
#include <vector>

#include "ft/base/error.h"

namespace ft::fs {
namespace stdfs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// A random suffix so concurrent writers (several ranks, several processes)
// never pick the same temp name; O_EXCL / mkdir still guard against a clash.
std::string random_suffix() {
  std::random_device rd;
  const uint64_t value = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
  return fmt::format("{:016x}", value);
}

stdfs::path parent_or_dot(const stdfs::path& path) {
  stdfs::path parent = path.parent_path();
  return parent.empty() ? stdfs::path(".") : parent;
}

// Closes the fd on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the error (close can surface delayed write errors).
  int close_checked() {
    const int fd = std::exchange(fd_, -1);
    return fd >= 0 && ::close(fd) != 0 ? errno : 0;
  }

 private:
  int fd_;
};

void write_all(int fd, const void* data, std::size_t size, const stdfs::path& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write {}: {}", path.string(), errno_text(errno));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void fsync_dir_of(const stdfs::path& path) { fsync_path(parent_or_dot(path)); }

}  // namespace

void fsync_path(const stdfs::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot sync {}: {}", path.string(), errno_text(errno));
  if (::fsync(fd.get()) != 0) {
    // Some filesystems refuse fsync on directories; that is not a data-loss risk we can fix.
    if (errno != EINVAL && errno != EROFS) fail("cannot sync {}: {}", path.string(), errno_text(errno));
  }
}

void write_file_atomic(const stdfs::path& path, const std::function<void(const ByteSink&)>& produce) {
  if (path.filename().empty()) fail("cannot write {}: not a file name", path.string());
  const stdfs::path dir = parent_or_dot(path);
  stdfs::path temp;
  int fd_raw = -1;
  for (int attempt = 0; attempt < 16 && fd_raw < 0; ++attempt) {
    temp = dir / ("." + path.filename().string() + ".tmp-" + random_suffix());
    fd_raw = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_raw < 0 && errno != EEXIST) fail("cannot write {}: {}", path.string(), errno_text(errno));
  }
  if (fd_raw < 0) fail("cannot write {}: no free temporary name in {}", path.string(), dir.string());
  Fd fd(fd_raw);
  try {
    produce([&](const void* data, std::size_t size) { write_all(fd.get(), data, size, path); });
    if (::fsync(fd.get()) != 0) fail("cannot write {}: fsync: {}", path.string(), errno_text(errno));
    if (const int err = fd.close_checked()) fail("cannot write {}: close: {}", path.string(), errno_text(err));
    if (::rename(temp.c_str(), path.c_str()) != 0)
      fail("cannot write {}: rename: {}", path.string(), errno_text(errno));
  } catch (...) {
    fd.close_checked();
    ::unlink(temp.c_str());
    throw;
  }
  fsync_dir_of(path);
}

void write_file_atomic(const stdfs::path& path, std::string_view bytes) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

std::string read_file(const stdfs::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot read {}: {}", path.string(), errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot read {}: {}", path.string(), errno_text(errno));
  if (S_ISDIR(st.st_mode)) fail("cannot read {}: {}", path.string(), errno_text(EISDIR));
  std::string out;
  if (st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot read {}: {}", path.string(), errno_text(errno));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

AtomicDir::AtomicDir(stdfs::path final_path) : final_path_(std::move(final_path)) {
  if (final_path_.filename().empty()) final_path_ = final_path_.parent_path();
  if (final_path_.filename().empty()) fail("cannot create directory {}: not a directory name", final_path_.string());
  const stdfs::path dir = parent_or_dot(final_path_);
  std::error_code ec;
  stdfs::create_directories(dir, ec);
  if (ec) fail("cannot create directory {}: {}", dir.string(), ec.message());
  for (int attempt = 0; attempt < 16; ++attempt) {
    stdfs::path candidate = dir / ("." + final_path_.filename().string() + ".tmp-" + random_suffix());
    if (::mkdir(candidate.c_str(), 0777) == 0) {
      temp_path_ = std::move(candidate);
      return;
    }
    if (errno != EEXIST) fail("cannot create directory {}: {}", candidate.string(), errno_text(errno));
  }
  fail("cannot create directory {}: no free temporary name in {}", final_path_.string(), dir.string());
}

AtomicDir::~AtomicDir() {
  if (committed_ || temp_path_.empty()) return;
  std::error_code ec;
  stdfs::remove_all(temp_path_, ec);  // best effort: a destructor must not throw
}

void AtomicDir::commit() {
  if (committed_) fail("{}: AtomicDir committed twice", final_path_.string());
  // Content written with plain streams is not durable yet; make it so before
  // the rename publishes it.
  std::error_code ec;
  for (auto it = stdfs::recursive_directory_iterator(temp_path_, ec); !ec && it != stdfs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) || it->is_directory(ec)) fsync_path(it->path());
  }
  if (ec) fail("cannot commit {}: {}", final_path_.string(), ec.message());
  fsync_path(temp_path_);

  const bool exists = stdfs::exists(stdfs::symlink_status(final_path_, ec));
  if (!exists) {
    if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
      fail("cannot commit {}: rename: {}", final_path_.string(), errno_text(errno));
    committed_ = true;
    fsync_dir_of(final_path_);
    return;
  }
  if (!stdfs::is_directory(final_path_, ec))
    fail("cannot commit {}: it exists and is not a directory", final_path_.string());

  if (::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, final_path_.c_str(), RENAME_EXCHANGE) == 0) {
    committed_ = true;
    fsync_dir_of(final_path_);
    stdfs::remove_all(temp_path_, ec);  // the old directory now lives at the temp name
    if (ec) fail("committed {} but cannot remove the old copy {}: {}", final_path_.string(), temp_path_.string(),
                 ec.message());
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    fail("cannot commit {}: rename: {}", final_path_.string(), errno_text(errno));

  // No RENAME_EXCHANGE here: move the old one aside first (documented window).
  const stdfs::path old = parent_or_dot(final_path_) / ("." + final_path_.filename().string() + ".old-" + random_suffix());
  if (::rename(final_path_.c_str(), old.c_str()) != 0)
    fail("cannot commit {}: rename aside: {}", final_path_.string(), errno_text(errno));
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    const int err = errno;
    ::rename(old.c_str(), final_path_.c_str());  // put the old one back
    fail("cannot commit {}: rename: {}", final_path_.string(), errno_text(err));
  }
  committed_ = true;
  fsync_dir_of(final_path_);
  stdfs::remove_all(old, ec);
  if (ec) fail("committed {} but cannot remove the old copy {}: {}", final_path_.string(), old.string(), ec.message());
}

void remove_dir_atomic(const stdfs::path& dir) {
  std::error_code ec;
  if (!stdfs::exists(stdfs::symlink_status(dir, ec))) return;
  const stdfs::path parent = parent_or_dot(dir);
  stdfs::path doomed;
  for (int attempt = 0; attempt < 16 && doomed.empty(); ++attempt) {
    stdfs::path candidate = parent / ("." + dir.filename().string() + ".tmp-" + random_suffix());
    if (stdfs::exists(stdfs::symlink_status(candidate, ec))) continue;
    if (::rename(dir.c_str(), candidate.c_str()) != 0)
      fail("cannot remove {}: rename: {}", dir.string(), errno_text(errno));
    doomed = std::move(candidate);
  }
  if (doomed.empty()) fail("cannot remove {}: no free temporary name in {}", dir.string(), parent.string());
  fsync_path(parent);
  stdfs::remove_all(doomed, ec);
  if (ec) fail("cannot remove {} (now {}): {}", dir.string(), doomed.string(), ec.message());
}

std::vector<std::string> recover_atomic_dirs(const stdfs::path& parent) {
  // The names AtomicDir and remove_dir_atomic use: "." + name + ".tmp-" or ".old-" + 16 hex digits.
  static const std::regex kLeftover(R"(\.(.+)\.(tmp|old)-[0-9a-f]{16})");
  std::vector<std::string> done;
  std::error_code ec;
  if (!stdfs::is_directory(parent, ec)) return done;
  std::vector<stdfs::path> found;
  for (auto it = stdfs::directory_iterator(parent, ec); !ec && it != stdfs::directory_iterator(); it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, m, kLeftover)) found.push_back(it->path());
  }
  if (ec) fail("cannot list {}: {}", parent.string(), ec.message());
  std::sort(found.begin(), found.end());
  for (const auto& path : found) {
    std::smatch m;
    const std::string name = path.filename().string();
    std::regex_match(name, m, kLeftover);
    const stdfs::path original = parent / m[1].str();
    if (m[2] == "old" && !stdfs::exists(stdfs::symlink_status(original, ec))) {
      if (::rename(path.c_str(), original.c_str()) != 0)
        fail("cannot restore {} from {}: {}", original.string(), path.string(), errno_text(errno));
      done.push_back(fmt::format("restored {} from {}", original.string(), name));
      continue;
    }
    stdfs::remove_all(path, ec);
    if (ec) fail("cannot remove the leftover {}: {}", path.string(), ec.message());
    done.push_back(fmt::format("removed {}", path.string()));
  }
  if (!done.empty()) fsync_path(parent);
  return done;
}

}  // namespace ft::fs
