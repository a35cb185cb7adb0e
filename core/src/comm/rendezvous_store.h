// Private to comm*.cpp: ft's rendezvous store.
//
// A c10d::Store (what ProcessGroupGloo/NCCL and ft's own peer counting use)
// whose server, hosted by rank 0, listens only on the master address.
// c10d's TCPStore in LibTorch 1.13 always binds every interface (0.0.0.0 /
// ::) and has no option to choose one, so anyone who can reach any address
// of rank 0's host could read or forge rendezvous keys. See docs/hardening.md
// "Security".
//
// Protocol (ft-only; every rank runs the same ft): length-prefixed frames,
// one request, one reply, on one connection per process. Waiting is done by
// the client polling `check`, so the server never blocks on a request and a
// slow or hostile peer cannot stall it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compat.h"

namespace ft {

class StoreServer;

class RendezvousStore final : public c10d::Store {
 public:
  /// server=true (rank 0): listen on addr:port first; an address in use
  /// throws ft::Error with "in use" in it. Every rank then connects to
  /// addr:port, retrying refused connections for up to `timeout`.
  RendezvousStore(const std::string& addr, int port, bool server, std::chrono::milliseconds timeout);
  ~RendezvousStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // A second client connection to the same server. LibTorch 2.x declares it
  // pure virtual (process groups clone their store); 1.13 has no such
  // method, hence no `override` here: it overrides where the base has it.
  c10::intrusive_ptr<c10d::Store> clone();

 private:
  // One request/reply round trip; the reply payload after its status byte.
  std::string call(const std::string& request);

  std::string addr_;
  int port_ = 0;
  std::string where_;  // "addr:port", for messages
  std::unique_ptr<StoreServer> server_;
  std::mutex mutex_;  // one round trip at a time on fd_
  int fd_ = -1;
  bool broken_ = false;  // a round trip failed half-way: the stream is out of step
};

}  // namespace ft
