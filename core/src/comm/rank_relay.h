// The launcher's relay of one worker's output: whole lines, prefixed with
// the rank, never interleaved with another rank's (ft/comm/launcher.h "Output").
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <thread>

namespace ft {

/// Writes all of `data` to `fd`, retrying on EINTR; gives up silently when
/// the reader has gone (nothing useful is left to do then).
void write_whole(int fd, const char* data, size_t size);

// Shared by the reader threads so two ranks never interleave inside a line.
struct OutputSink {
  std::mutex mutex;
  int out_fd;
  int err_fd;
};

// Relays one worker's stdout and stderr, prefixing each line. Stops at EOF on
// both, or when woken after the worker was reaped (then drains what is
// buffered, so a grandchild holding the pipe cannot keep the launch alive).
class RankRelay {
 public:
  RankRelay(int rank, int out_pipe, int err_pipe, OutputSink& sink);
  ~RankRelay() { stop(); }
  RankRelay(const RankRelay&) = delete;
  RankRelay& operator=(const RankRelay&) = delete;

  /// Wakes the reader, which drains what is buffered, and joins it.
  void stop();

 private:
  void run();
  void emit_lines(int stream, bool flush_partial);

  std::string prefix_;
  OutputSink& sink_;
  int fds_[2];
  int wake_[2] = {-1, -1};
  std::string pending_[2];
  std::thread thread_;
};

}  // namespace ft
