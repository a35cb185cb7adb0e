// RankRelay (rank_relay.h): one worker's output, line by line, prefixed.
#include "rank_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ft/base/error.h"

namespace ft {

void write_whole(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the reader went away; nothing useful to do
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

RankRelay::RankRelay(int rank, int out_pipe, int err_pipe, OutputSink& sink)
    : prefix_("[rank " + std::to_string(rank) + "] "), sink_(sink) {
  fds_[0] = out_pipe;
  fds_[1] = err_pipe;
  if (::pipe2(wake_, O_CLOEXEC) != 0) fail("launcher: cannot create a pipe: {}", std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

void RankRelay::stop() {
  if (!thread_.joinable()) return;
  write_whole(wake_[1], "x", 1);
  thread_.join();
  for (int fd : {fds_[0], fds_[1], wake_[0], wake_[1]}) ::close(fd);
}

void RankRelay::run() {
  bool open[2] = {true, true};
  bool draining = false;
  while (open[0] || open[1]) {
    pollfd p[3] = {{fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (!open[0]) p[0].fd = -1;
    if (!open[1]) p[1].fd = -1;
    int ready = ::poll(p, 3, draining ? 0 : -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;  // draining and nothing left
    if (p[2].revents) draining = true;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::read(fds_[i], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        open[i] = false;
        continue;
      }
      pending_[i].append(buf, static_cast<size_t>(n));
      emit_lines(i, false);
    }
  }
  emit_lines(0, true);
  emit_lines(1, true);
}

void RankRelay::emit_lines(int stream, bool flush_partial) {
  std::string& pending = pending_[stream];
  std::string text;
  size_t start = 0;
  for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    text += prefix_;
    text.append(pending, start, nl + 1 - start);
  }
  pending.erase(0, start);
  if (flush_partial && !pending.empty()) {
    text += prefix_ + pending + "\n";
    pending.clear();
  }
  if (text.empty()) return;
  std::lock_guard<std::mutex> lock(sink_.mutex);
  write_whole(stream == 0 ? sink_.out_fd : sink_.err_fd, text.data(), text.size());
}

}  // namespace ft
