// ft's rendezvous store (see rendezvous_store.h).
#include "rendezvous_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <thread>

#include "ft/base/error.h"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Rendezvous values are addresses and ids of a few hundred bytes; anything
// near this is garbage or an attack, and the connection is dropped.
constexpr uint32_t kMaxFrame = 16u << 20;
constexpr uint32_t kMaxCheckKeys = 1u << 16;
constexpr std::size_t kMaxConnections = 4096;

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCheck, kDelete, kNumKeys, kCompareSet };
enum Status : uint8_t { kOk = 0, kFailed = 1 };

std::string errno_text(int err) { return std::strerror(err); }

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_i64(std::string& out, int64_t value) {
  const auto v = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_bytes(std::string& out, const char* p, std::size_t n) {
  put_u32(out, static_cast<uint32_t>(n));
  out.append(p, n);
}
void put_str(std::string& out, const std::string& s) { put_bytes(out, s.data(), s.size()); }
void put_vec(std::string& out, const std::vector<uint8_t>& v) {
  put_bytes(out, reinterpret_cast<const char*>(v.data()), v.size());
}
std::vector<uint8_t> to_vec(const std::string& s) { return {s.begin(), s.end()}; }

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Bounds-checked reading of one frame's payload: a short or malformed
// frame makes ok() false instead of reading past the end.
class Reader {
 public:
  Reader(const char* p, std::size_t n) : p_(p), n_(n) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == n_; }
  uint8_t u8() { return take(1) ? static_cast<uint8_t>(p_[pos_ - 1]) : 0; }
  uint32_t u32() { return take(4) ? get_u32(p_ + pos_ - 4) : 0; }
  int64_t i64() {
    if (!take(8)) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p_[pos_ - 8 + i]);
    return static_cast<int64_t>(v);
  }
  std::string str() {
    const uint32_t n = u32();
    if (!take(n)) return {};
    return std::string(p_ + pos_ - n, n);
  }

 private:
  bool take(std::size_t n) {
    if (!ok_ || n > n_ - pos_) return ok_ = false;
    pos_ += n;
    return true;
  }
  const char* p_;
  std::size_t n_, pos_ = 0;
  bool ok_ = true;
};

std::string frame(const std::string& payload) {
  std::string out;
  put_u32(out, static_cast<uint32_t>(payload.size()));
  return out + payload;
}

struct AddrInfo {
  addrinfo* list = nullptr;
  AddrInfo(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
    if (rc != 0) fail("cannot resolve '{}': {}", host, ::gai_strerror(rc));
  }
  ~AddrInfo() { ::freeaddrinfo(list); }
  AddrInfo(const AddrInfo&) = delete;
  AddrInfo& operator=(const AddrInfo&) = delete;
};

int poll_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

// One connection attempt to `a` that gives up at `deadline`; -1 and errno set on failure.
int connect_once(const addrinfo* a, Clock::time_point deadline) {
  const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
  if (fd < 0) return -1;
  int err = 0;
  if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
    err = errno;
    while (err == EINPROGRESS || err == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      const int rc = ::poll(&p, 1, poll_ms(deadline));
      if (rc > 0) {
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        break;
      }
      if (rc == 0 && Clock::now() >= deadline) {
        err = ETIMEDOUT;
        break;
      }
      if (rc < 0 && errno != EINTR) err = errno;
    }
  }
  if (err != 0) {
    ::close(fd);
    errno = err;
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Moves all of `data` through the non-blocking `fd` before `deadline`.
void send_all(int fd, const std::string& data, Clock::time_point deadline, const std::string& where) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) fail("rendezvous store {}: send failed: {}", where, errno_text(errno));
    if (Clock::now() >= deadline) fail("rendezvous store {}: no answer (send timed out)", where);
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, poll_ms(deadline));
  }
}

void recv_all(int fd, char* dst, std::size_t size, Clock::time_point deadline, const std::string& where) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, dst + done, size - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) fail("rendezvous store {}: connection closed by rank 0 (did it exit?)", where);
    if (errno != EAGAIN && errno != EINTR) fail("rendezvous store {}: receive failed: {}", where, errno_text(errno));
    if (Clock::now() >= deadline) fail("rendezvous store {}: no answer within the timeout", where);
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, poll_ms(deadline));
  }
}

}  // namespace

// ---------------------------------------------------------------- server

class StoreServer {
 public:
  StoreServer(const std::string& addr, int port) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) fail("cannot create a pipe: {}", errno_text(errno));
    try {
      listen_on(addr, port);
    } catch (...) {
      close_all();
      throw;
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~StoreServer() {
    const char byte = 0;
    (void)!::write(wake_[1], &byte, 1);
    if (thread_.joinable()) thread_.join();
    close_all();
  }
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

 private:
  struct Conn {
    int fd;
    std::string in, out;
    std::size_t in_pos = 0, out_pos = 0;
    bool closed = false;
  };

  // Binds every address `addr` resolves to (both of localhost's, say), and
  // only those: never the wildcard.
  void listen_on(const std::string& addr, int port) {
    const AddrInfo found(addr, port);
    int last_err = 0;
    for (const addrinfo* a = found.list; a; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) {
        last_err = errno;
        continue;
      }
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 512) != 0) {
        last_err = errno;
        ::close(fd);
        if (last_err == EADDRINUSE) fail("{}:{}: address in use", addr, port);
        continue;
      }
      listen_fds_.push_back(fd);
    }
    if (listen_fds_.empty()) fail("cannot listen on {}:{}: {}", addr, port, errno_text(last_err));
  }

  void close_all() {
    for (int fd : listen_fds_) ::close(fd);
    listen_fds_.clear();
    for (auto& c : conns_) ::close(c.fd);
    conns_.clear();
    for (int& fd : wake_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }

  void serve() {
    try {
      loop();
    } catch (const std::exception&) {
      // Out of memory or a broken poll: the clients see the connection
      // close and report it with their rank; nothing else to tell here.
    }
    for (auto& c : conns_) ::close(c.fd);
    conns_.clear();
  }

  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      for (int fd : listen_fds_) fds.push_back({fd, POLLIN, 0});
      for (const auto& c : conns_) {
        fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out_pos < c.out.size() ? POLLOUT : 0)), 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      const std::size_t first_conn = 1 + listen_fds_.size();
      const std::size_t polled_conns = fds.size() - first_conn;
      for (std::size_t i = 0; i < polled_conns; ++i) {
        if (fds[first_conn + i].revents) pump(conns_[i]);
      }
      for (std::size_t i = 1; i < first_conn; ++i) {
        if (fds[i].revents) accept_all(fds[i].fd);
      }
      conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                  [](const Conn& c) {
                                    if (c.closed) ::close(c.fd);
                                    return c.closed;
                                  }),
                   conns_.end());
    }
  }

  void accept_all(int listen_fd) {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;  // EAGAIN, or a connection that vanished before accept
      if (conns_.size() >= kMaxConnections) {
        ::close(fd);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      conns_.push_back(Conn{fd, {}, {}});
    }
  }

  // Reads what arrived, answers every complete request, sends what it can.
  void pump(Conn& c) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) c.closed = true;
      if (n == 0 || errno != EINTR) break;
    }
    while (!c.closed && c.in.size() - c.in_pos >= 4) {
      const uint32_t len = get_u32(c.in.data() + c.in_pos);
      if (len == 0 || len > kMaxFrame) {
        c.closed = true;  // not an ft peer
        break;
      }
      if (c.in.size() - c.in_pos - 4 < len) break;
      Reader r(c.in.data() + c.in_pos + 4, len);
      c.in_pos += 4 + len;
      std::string reply;
      if (!execute(r, reply)) {
        c.closed = true;
        break;
      }
      c.out += frame(reply);
    }
    if (c.in_pos == c.in.size()) {
      c.in.clear();
      c.in_pos = 0;
    }
    while (!c.closed && c.out_pos < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<std::size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n < 0 && errno != EAGAIN) c.closed = true;
        break;
      }
    }
    if (c.out_pos == c.out.size()) {
      c.out.clear();
      c.out_pos = 0;
    }
  }

  // One request; false for a malformed one (the connection is dropped).
  bool execute(Reader& r, std::string& reply) {
    const uint8_t op = r.u8();
    reply.assign(1, static_cast<char>(kOk));
    switch (op) {
      case kSet: {
        std::string key = r.str(), value = r.str();
        if (!r.done()) return false;
        data_[std::move(key)] = std::move(value);
        return true;
      }
      case kGet: {
        const std::string key = r.str();
        if (!r.done()) return false;
        auto it = data_.find(key);
        reply += static_cast<char>(it != data_.end());
        if (it != data_.end()) put_str(reply, it->second);
        return true;
      }
      case kAdd: {
        const std::string key = r.str();
        const int64_t delta = r.i64();
        if (!r.done()) return false;
        int64_t value = 0;
        auto it = data_.find(key);
        if (it != data_.end()) {
          const std::string& s = it->second;
          const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
          if (ec != std::errc() || end != s.data() + s.size()) {
            return failed(reply, fmt::format("add: key '{}' does not hold an integer", key));
          }
        }
        if (__builtin_add_overflow(value, delta, &value)) {
          return failed(reply, fmt::format("add: key '{}' would overflow", key));
        }
        data_[key] = std::to_string(value);
        put_i64(reply, value);
        return true;
      }
      case kCheck: {
        const uint32_t n = r.u32();
        if (n > kMaxCheckKeys) return false;
        bool all = true;
        for (uint32_t i = 0; i < n && r.ok(); ++i) all = data_.count(r.str()) > 0 && all;
        if (!r.done()) return false;
        reply += static_cast<char>(all);
        return true;
      }
      case kDelete: {
        const std::string key = r.str();
        if (!r.done()) return false;
        reply += static_cast<char>(data_.erase(key) > 0);
        return true;
      }
      case kNumKeys:
        if (!r.done()) return false;
        put_i64(reply, static_cast<int64_t>(data_.size()));
        return true;
      case kCompareSet: {
        // c10d's semantics: set `desired` when the value equals `expected`
        // (a missing key counts as equal to an empty `expected`); reply with
        // the value the key holds afterwards, or `expected` if still missing.
        std::string key = r.str(), expected = r.str(), desired = r.str();
        if (!r.done()) return false;
        auto it = data_.find(key);
        if (it == data_.end()) {
          if (!expected.empty()) {
            put_str(reply, expected);
            return true;
          }
          it = data_.emplace(std::move(key), std::move(desired)).first;
        } else if (it->second == expected) {
          it->second = std::move(desired);
        }
        put_str(reply, it->second);
        return true;
      }
      default:
        return false;
    }
  }

  static bool failed(std::string& reply, const std::string& why) {
    reply.assign(1, static_cast<char>(kFailed));
    put_str(reply, why);
    return true;
  }

  int wake_[2] = {-1, -1};
  std::vector<int> listen_fds_;
  std::vector<Conn> conns_;                  // only the server thread touches these two
  std::map<std::string, std::string> data_;  //
  std::thread thread_;
};

// ---------------------------------------------------------------- client

RendezvousStore::RendezvousStore(const std::string& addr, int port, bool server, milliseconds timeout)
    : c10d::Store(timeout), addr_(addr), port_(port), where_(addr + ":" + std::to_string(port)) {
  if (server) server_ = std::make_unique<StoreServer>(addr, port);
  const AddrInfo found(addr, port);
  const auto deadline = Clock::now() + timeout;
  int last_err = ECONNREFUSED;
  for (;;) {
    for (const addrinfo* a = found.list; a && fd_ < 0; a = a->ai_next) {
      fd_ = connect_once(a, deadline);
      if (fd_ < 0) last_err = errno;
    }
    if (fd_ >= 0) return;
    // Ranks start together: rank 0 may not be listening yet.
    if (Clock::now() >= deadline) fail("connect to {}: {}", where_, errno_text(last_err));
    std::this_thread::sleep_for(milliseconds(10));
  }
}

RendezvousStore::~RendezvousStore() {
  if (fd_ >= 0) ::close(fd_);
}

c10::intrusive_ptr<c10d::Store> RendezvousStore::clone() {
  return c10::make_intrusive<RendezvousStore>(addr_, port_, /*server=*/false,
                                              std::chrono::duration_cast<milliseconds>(timeout_));
}

std::string RendezvousStore::call(const std::string& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) fail("rendezvous store {}: the connection failed earlier", where_);
  // A reply is immediate unless rank 0 is gone or frozen.
  const auto deadline = Clock::now() + (timeout_ > milliseconds::zero() ? timeout_ : kDefaultTimeout);
  broken_ = true;
  send_all(fd_, frame(request), deadline, where_);
  char len_bytes[4];
  recv_all(fd_, len_bytes, 4, deadline, where_);
  const uint32_t len = get_u32(len_bytes);
  if (len == 0 || len > kMaxFrame) fail("rendezvous store {}: malformed reply ({} bytes)", where_, len);
  std::string reply(len, '\0');
  recv_all(fd_, reply.data(), len, deadline, where_);
  broken_ = false;
  if (reply[0] != static_cast<char>(kOk)) {
    Reader r(reply.data() + 1, reply.size() - 1);
    fail("rendezvous store {}: {}", where_, r.str());
  }
  return reply.substr(1);
}

void RendezvousStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::string req(1, static_cast<char>(kSet));
  put_str(req, key);
  put_vec(req, value);
  call(req);
}

std::vector<uint8_t> RendezvousStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  std::string req(1, static_cast<char>(kCompareSet));
  put_str(req, key);
  put_vec(req, expected);
  put_vec(req, desired);
  const std::string reply = call(req);
  Reader r(reply.data(), reply.size());
  return to_vec(r.str());
}

std::vector<uint8_t> RendezvousStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::string req(1, static_cast<char>(kGet));
  put_str(req, key);
  const std::string reply = call(req);
  Reader r(reply.data(), reply.size());
  if (r.u8() != 1) fail("rendezvous store {}: key '{}' was deleted while being read", where_, key);
  return to_vec(r.str());
}

int64_t RendezvousStore::add(const std::string& key, int64_t value) {
  std::string req(1, static_cast<char>(kAdd));
  put_str(req, key);
  put_i64(req, value);
  const std::string reply = call(req);
  Reader r(reply.data(), reply.size());
  return r.i64();
}

bool RendezvousStore::deleteKey(const std::string& key) {
  std::string req(1, static_cast<char>(kDelete));
  put_str(req, key);
  const std::string reply = call(req);
  return !reply.empty() && reply[0] == 1;
}

bool RendezvousStore::check(const std::vector<std::string>& keys) {
  std::string req(1, static_cast<char>(kCheck));
  put_u32(req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_str(req, k);
  const std::string reply = call(req);
  return !reply.empty() && reply[0] == 1;
}

int64_t RendezvousStore::getNumKeys() {
  const std::string reply = call(std::string(1, static_cast<char>(kNumKeys)));
  Reader r(reply.data(), reply.size());
  return r.i64();
}

void RendezvousStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RendezvousStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) {
  const bool forever = timeout == kNoTimeout;
  const auto deadline = Clock::now() + timeout;
  milliseconds pause(1);
  while (!check(keys)) {
    if (!forever && Clock::now() >= deadline) {
      fail("rendezvous store {}: waited {} s for key '{}'{} (a rank did not post it)", where_,
           timeout.count() / 1000.0, keys.empty() ? "" : keys.front(),
           keys.size() > 1 ? fmt::format(" and {} more", keys.size() - 1) : "");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(20));
  }
}

}  // namespace ft
