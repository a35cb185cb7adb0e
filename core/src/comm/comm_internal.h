// Private to comm*.cpp: the c10d objects behind ft::Comm and ft::Work.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "ft/comm/comm.h"
#include "compat.h"

namespace ft {

/// Set once, by the first collective that fails; read by every later call.
/// Also what a timed-out collective needs to name the rank that stalled it.
struct CommHealth {
  mutable std::mutex mutex;
  std::string failure;  // empty while healthy
  int rank = 0;         // this rank in the whole job: what messages name
  int index = 0;        // this rank's position in the Comm (== rank unless a sub-group)
  int world_size = 1;   // ranks in the Comm
  /// Job rank of each position of a sub-group's Comm; empty: the identity.
  std::vector<int> members;
  int job_rank(int position) const {
    return members.empty() ? position : members[static_cast<size_t>(position)];
  }
  /// Collectives issued so far: every rank issues the same ones in the same
  /// order, so the count names one collective on every rank ("#57").
  std::atomic<uint64_t> issued{0};
  /// The rendezvous store (null at world size 1): ranks post there where
  /// they wait, so a timed-out rank can tell which peers never arrived. A
  /// sub-group's is a prefix of the job's, so its posts stay apart.
  c10::intrusive_ptr<c10d::Store> store;

  std::string get() const {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }
  void set(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure.empty()) failure = why;
  }
};

/// The store and groups of a world-size > 1 Comm. `gloo` carries CPU tensors,
/// `nccl` CUDA tensors; either may be null depending on CommOptions::backend.
struct CommGroups {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::Backend> gloo;
  c10::intrusive_ptr<compat::Backend> nccl;
};

/// What a Work handle waits for, then the local post-processing (casts back
/// from the wire dtype, Avg division, summing received chunks).
struct Work::State {
  std::string what;  // collective name for messages
  std::shared_ptr<CommHealth> health;
  std::chrono::milliseconds timeout{0};
  uint64_t seq = 0;        // CommHealth::issued when this one was issued
  std::chrono::steady_clock::time_point issued_at{};
  bool sliceable = false;  // a Gloo collective: wait() may poll it in slices
  bool posted = false;     // this rank's position was posted to the store
  std::vector<c10::intrusive_ptr<compat::Work>> works;
  std::function<void()> finish;
  // Set instead of `works` for an operation run on the Comm's ring thread
  // (comm_ring.cpp); ready when it is done, get() rethrows its ft::Error.
  std::shared_future<void> job;
  bool done = false;
  std::exception_ptr error;
};

/// First line of a (c10d, often multi-line) exception message.
std::string first_line(const std::string& text);

// For ~Comm on a failed group (comm_ring.cpp): drops the ring thread's
// queued jobs and detaches it; `w` is leaked on purpose (the thread may
// still be inside it). Null is fine.
void abandon_ring_worker(RingWorker* w);

/// w.wait(s.timeout), but a Gloo collective still running after a slice of
/// the timeout posts this rank's position for stall_message() (comm_stall.cpp).
void wait_sliced(Work::State& s, compat::Work& w);
void wait_job_sliced(Work::State& s);

/// For a collective that failed on the timeout: one line naming the rank(s)
/// that never joined it; empty when none can be named.
std::string stall_message(const Work::State& s);

}  // namespace ft
