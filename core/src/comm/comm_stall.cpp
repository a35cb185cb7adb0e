// The stall report: a collective that times out names the rank that kept it
// from completing ("rank 1 stalled: it never joined all_reduce #57").
//
// A rank that a collective keeps waiting for a slice of the timeout posts
// "ft/at/<rank>" = the collective's number to the rendezvous store (only slow
// collectives post, from a helper thread). The rank that times out in
// collective #N posts "ft/timeout/<rank>" and reads its peers' posts: a peer
// that neither posted #N (it never arrived) nor a timeout of its own within
// a grace period is the stalled one; so is one that posted #N (it froze
// inside it) but no timeout. A peer that is behind but timed out itself was
// held up by the stalled rank (a ring neighbour), and is not blamed. Rank 0 hosts
// the store: when rank 0 is the one frozen, its store does not answer either,
// which names it too. Nothing but the post of a slow collective runs unless
// a collective timed out.
#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm_internal.h"
#include "ft/base/error.h"

namespace ft {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds stall_slice(milliseconds timeout) { return std::min(milliseconds(1000), timeout / 4); }

// How long a timed-out rank waits for its peers' timeouts: they started the
// collective a little later or earlier than this rank did.
milliseconds stall_grace(milliseconds timeout) {
  return std::clamp(timeout / 2, milliseconds(1000), milliseconds(5000));
}

std::string at_key(int rank) { return "ft/at/" + std::to_string(rank); }
std::string timeout_key(int rank) { return "ft/timeout/" + std::to_string(rank); }

void post(c10d::Store& store, const std::string& key, uint64_t seq) {
  const std::string text = std::to_string(seq);
  store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
}

// The number posted under `key`, 0 when nothing was.
uint64_t posted(c10d::Store& store, const std::string& key) {
  if (!store.check({key})) return 0;
  const auto v = store.get(key);
  return std::stoull(std::string(v.begin(), v.end()));
}

struct StallSearch {
  std::mutex mutex;
  std::condition_variable cv;
  int stage = 0;  // 1: the store answered once; 2: done
  bool failed = false;
  std::vector<int> stalled;
};

void search_stalled(StallSearch& out, c10d::Store& store, int me, int world, uint64_t seq, milliseconds grace) {
  auto advance = [&](int stage, std::vector<int> stalled = {}) {
    std::lock_guard<std::mutex> lock(out.mutex);
    out.stage = stage;
    out.stalled = std::move(stalled);
    out.cv.notify_all();
  };
  post(store, timeout_key(me), seq);
  advance(1);
  // A peer is to blame if it neither reached this collective nor timed out
  // itself. One that is behind may be a healthy rank held up by the stalled
  // one (a ring's neighbour, or a rank still in an earlier collective): it
  // times out too, and posts so, within the grace period.
  auto suspects = [&] {
    std::vector<int> out;
    for (int r = 0; r < world; ++r) {
      if (r == me) continue;
      const uint64_t timed_out = posted(store, timeout_key(r));
      const bool behind = posted(store, at_key(r)) < seq;
      if (behind ? timed_out == 0 : timed_out < seq) out.push_back(r);
    }
    return out;
  };
  const auto deadline = Clock::now() + grace;
  for (;;) {
    std::vector<int> stalled = suspects();
    if (stalled.empty() || Clock::now() >= deadline) return advance(2, stalled);
    std::this_thread::sleep_for(milliseconds(50));
  }
}

// Positions in the Comm, named as job ranks.
std::string rank_list(const CommHealth& h, const std::vector<int>& positions) {
  std::string out = positions.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < positions.size(); ++i) out += (i ? ", " : "") + std::to_string(h.job_rank(positions[i]));
  return out;
}

// Runs the search on its own thread: if rank 0 is frozen the store never
// answers, and this rank must still exit in time (the thread is left behind).
std::string stall_verdict(const Work::State& s) {
  const CommHealth& h = *s.health;
  const milliseconds grace = stall_grace(s.timeout);
  auto search = std::make_shared<StallSearch>();
  std::thread([search, store = h.store, me = h.index, world = h.world_size, seq = s.seq, grace] {
    try {
      search_stalled(*search, *store, me, world, seq, grace);
    } catch (const std::exception&) {
      std::lock_guard<std::mutex> lock(search->mutex);
      search->failed = true;  // no answer in time earlier, or rank 0 went away
      search->stage = 2;
      search->cv.notify_all();
    }
  }).detach();
  std::unique_lock<std::mutex> lock(search->mutex);
  const bool answered = search->cv.wait_for(lock, milliseconds(1500), [&] { return search->stage >= 1; });
  // On this path (a timeout, not a peer's closed connection) a store that
  // cannot answer means rank 0 is frozen.
  if (!answered || search->failed) {
    if (h.rank == 0) return {};
    return fmt::format("rank 0 stalled: its rendezvous store stopped answering and it never joined {} #{}", s.what,
                       s.seq);
  }
  search->cv.wait_for(lock, grace + milliseconds(1000), [&] { return search->stage >= 2; });
  if (search->failed || search->stalled.empty()) return {};
  return fmt::format("{} stalled: {} never joined {} #{}", rank_list(h, search->stalled),
                     search->stalled.size() == 1 ? "it" : "they", s.what, s.seq);
}

}  // namespace

// Waits in two parts so that a slow collective posts where this rank is
// before the timeout passes (c10d's Gloo work survives a timed-out wait()).
void wait_sliced(Work::State& s, compat::Work& w) {
  const milliseconds slice = stall_slice(s.timeout);
  if (!s.sliceable || !s.health->store || slice.count() < 1 || s.timeout <= slice) {
    w.wait(s.timeout);
    return;
  }
  try {
    w.wait(slice);
    return;
  } catch (const std::exception&) {
    // Still running (or just finished: the wait below returns at once).
  }
  if (!w.isCompleted() && !s.posted) {
    s.posted = true;
    // On its own thread: a store round trip blocks for the whole timeout
    // when rank 0 is frozen, and this wait must end on time regardless.
    std::thread([store = s.health->store, key = at_key(s.health->index), seq = s.seq] {
      try {
        post(*store, key, seq);
      } catch (const std::exception&) {
        // Only diagnostics: the stall report then finds the store silent.
      }
    }).detach();
  }
  w.wait(s.timeout - slice);
}

// The same for an operation on the ring thread (a std::shared_future): its
// send/recv cannot be waited on in slices, so the caller's wait on the
// whole operation is what posts this rank's position.
void wait_job_sliced(Work::State& s) {
  const milliseconds slice = stall_slice(s.timeout);
  if (s.health->store && slice.count() >= 1 && s.timeout > slice &&
      s.job.wait_for(slice) != std::future_status::ready && !s.posted) {
    s.posted = true;
    std::thread([store = s.health->store, key = at_key(s.health->index), seq = s.seq] {
      try {
        post(*store, key, seq);
      } catch (const std::exception&) {
        // Only diagnostics: the stall report then finds the store silent.
      }
    }).detach();
  }
  s.job.wait();  // the operation ends on its own: its send/recv time out
}

// For a collective that ran into the timeout: "rank 0: all_reduce failed:
// rank 1 stalled: it never joined all_reduce #57 (rank 0 waited 5 s in it)".
// Empty when it failed early (a peer exited) or no rank can be blamed.
std::string stall_message(const Work::State& s) {
  const CommHealth& h = *s.health;
  if (!h.store || h.world_size < 2 || s.seq == 0) return {};
  const auto waited = Clock::now() - s.issued_at;
  if (waited < s.timeout * 9 / 10) return {};
  const std::string verdict = stall_verdict(s);
  if (verdict.empty()) return {};
  return fmt::format("rank {}: {} failed: {} (rank {} waited {} s in it)", h.rank, s.what, verdict, h.rank,
                     s.timeout.count() / 1000.0);
}

}  // namespace ft
