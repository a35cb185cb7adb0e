// Crash-safe file and directory writes.
//
// Checkpoints and exported models must never be left half-written: a reader
// either sees the complete old content or the complete new content. Files are
// written under a temporary name in the same directory, fsynced and renamed
// over the target; directories are built under a temporary name and swapped in
// on commit().
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ft::fs {

/// Appends bytes to the file being written; throws ft::Error on I/O failure.
using ByteSink = std::function<void(const void* data, std::size_t size)>;

/// Replaces `path` with `bytes` atomically: writes a temp file in the same
/// directory, fsyncs it, renames it over `path` and fsyncs the directory.
/// On any failure the temp file is removed and ft::Error
/// "cannot write <path>: <reason>" is thrown; `path` is then untouched.
/// The parent directory must exist (it is not created).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

/// Streaming form of write_file_atomic for content too large to build in
/// memory twice (model weights): `produce` is called once with a sink and
/// writes the whole content through it. Same guarantees and errors; an
/// exception thrown by `produce` removes the temp file and propagates.
void write_file_atomic(const std::filesystem::path& path,
                       const std::function<void(const ByteSink&)>& produce);

/// Whole file as bytes. Throws ft::Error "cannot read <path>: <strerror>".
std::string read_file(const std::filesystem::path& path);

/// fsyncs a file or directory (directories: makes renames/creations in it
/// durable). Throws ft::Error naming the path.
void fsync_path(const std::filesystem::path& path);

/// A directory built under a temporary name and moved into place by commit().
///
/// The constructor creates `final_path`'s parent directories (if missing) and
/// an empty temp directory `.<name>.tmp-<random>` beside `final_path`; write
/// everything into path(). commit() fsyncs every regular file under path()
/// and the directories, then moves it to `final_path`:
///  - `final_path` absent: one rename. A crash leaves either no `final_path`
///    (the temp dir is a hidden leftover) or the complete new directory.
///  - `final_path` present: the two directories are exchanged atomically with
///    renameat2(RENAME_EXCHANGE) and the old one (now under the temp name) is
///    removed. At every instant `final_path` is a complete directory, old or
///    new; a crash may only leave a hidden `.<name>.tmp-*` directory behind.
///    Where the filesystem lacks RENAME_EXCHANGE the old directory is renamed
///    aside to `.<name>.old-<random>` first, then the new one renamed in; a
///    crash between those two renames leaves no `final_path`, with the old
///    directory intact under `.<name>.old-*` (restore it by renaming).
/// Destroying an uncommitted AtomicDir removes the temp directory (and so
/// never touches `final_path`). Errors throw ft::Error naming the path.
class AtomicDir {
 public:
  explicit AtomicDir(std::filesystem::path final_path);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  /// The temp directory to write into (valid until commit()).
  const std::filesystem::path& path() const { return temp_path_; }
  /// Where the directory lands on commit().
  const std::filesystem::path& final_path() const { return final_path_; }
  bool committed() const { return committed_; }

  /// Moves the directory into place (see class comment). Call at most once.
  void commit();

 private:
  std::filesystem::path final_path_;
  std::filesystem::path temp_path_;
  bool committed_ = false;
};

/// Deletes directory `dir` (absent: nothing to do) so that a crash midway
/// leaves either all of it or a hidden `.<name>.tmp-*` leftover, never a
/// partial `dir`: it is renamed to a temp name first, then removed. Used to
/// rotate checkpoints. Errors throw ft::Error naming `dir`.
void remove_dir_atomic(const std::filesystem::path& dir);

/// Cleans up what crashed AtomicDir commits and remove_dir_atomic() calls left
/// in `parent`: removes every `.<name>.tmp-<hex>` entry, and renames an
/// `.<name>.old-<hex>` directory back to `<name>` when `<name>` is missing
/// (the fallback commit's window), else removes it. Returns one line per
/// entry handled. Call only while nothing writes AtomicDirs in `parent`.
std::vector<std::string> recover_atomic_dirs(const std::filesystem::path& parent);

}  // namespace ft::fs
