// Comm::reduce_scatter_inplace_async and all_gather_inplace_async: the
// collectives of the gradient buffer and of flat parameters.
//
// Gloo in LibTorch 1.13 has no reduce-scatter; the general
// reduce_scatter_flat_async emulates one with alltoall, which stages the
// whole input and a received copy of every chunk. The gradient buffer needs
// less: its buckets are padded to a multiple of the world size and only this
// rank's chunk must end up reduced, so the ring over send/recv (ft::Ring,
// ft/comm/ring.h) does it in place with one chunk of scratch: at step s (0 .. N-2) rank r sends chunk
// (r - s - 1) mod N to its right neighbour and adds what its left one sends
// into chunk (r - s - 2) mod N; after N-1 steps chunk r holds the sum of
// every rank's chunk r. Each rank sends (N-1)/N of the bucket, the
// bandwidth-optimal amount, and allocates nothing after the first call.
//
// The all-gather is the same ring's second half: at step s rank r sends
// chunk (r - s) and receives chunk (r - s - 1) straight into place. c10d's
// Gloo allgather would instead stage a world-sized flat copy per call.
//
// The steps depend on each other, so they run on one thread per Comm (the
// ring thread), in submission order; that order is the collective order, the
// same on every rank. On NCCL the c10d primitive exists and is used.
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "comm_internal.h"
#include "ft/base/error.h"
#include "ft/comm/ring.h"
#include "inplace_scale.h"

namespace ft {

// Point-to-point tags of the gradient ring (Horovod's all-reduce walks the
// same ft::Ring with its own).
constexpr int kReduceScatterTag = 0x5253;  // "RS"
constexpr int kAllGatherTag = 0x4147;      // "AG"

class RingWorker {
 public:
  RingWorker() : thread_([this] { loop(); }) {}
  ~RingWorker() {
    if (!thread_.joinable()) return;  // abandoned
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  RingWorker(const RingWorker&) = delete;
  RingWorker& operator=(const RingWorker&) = delete;

  // The Comm failed and is going away without waiting for us: drop the
  // queued jobs (they would use it) and let the thread end on its own once
  // the one in flight gives up (its send/recv time out).
  void abandon() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abandoned_ = true;
      jobs_.clear();
    }
    wake_.notify_all();
    thread_.detach();
  }

  std::shared_future<void> submit(std::function<void()> job) {
    std::packaged_task<void()> task(std::move(job));
    std::shared_future<void> done = task.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(task));
    }
    wake_.notify_one();
    return done;
  }

  // One chunk of receive space; only the ring thread touches it.
  at::Tensor scratch(int64_t numel, const at::TensorOptions& options) {
    if (!scratch_.defined() || scratch_.numel() < numel || scratch_.scalar_type() != options.dtype()) {
      scratch_ = at::empty({numel}, options);
    }
    return scratch_.narrow(0, 0, numel);
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || abandoned_ || !jobs_.empty(); });
        if (abandoned_ || jobs_.empty()) return;  // abandoned, or stopping and drained
        task = std::move(jobs_.front());
        jobs_.pop_front();
      }
      task();  // a throwing job stores its ft::Error in the future
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  bool abandoned_ = false;
  at::Tensor scratch_;
  std::thread thread_;  // last: starts after the members it uses exist
};

void RingWorkerDeleter::operator()(RingWorker* w) const { delete w; }

void abandon_ring_worker(RingWorker* w) {
  if (w) w->abandon();
}

namespace {

void check_ring_flat(const char* what, const at::Tensor& flat, int world) {
  if (!flat.defined() || flat.dim() != 1 || !flat.is_contiguous() || flat.numel() % world != 0) {
    fail("{}: needs a contiguous 1-D tensor whose length is a multiple of the world size {}", what, world);
  }
}

compat::Backend& nccl_of(CommGroups* groups, int rank, const char* what) {
  if (!groups || !groups->nccl) fail("rank {}: {}: no NCCL group for CUDA tensors", rank, what);
  return *groups->nccl;
}

std::shared_ptr<Work::State> ring_state(const char* what, const std::shared_ptr<CommHealth>& health,
                                        std::chrono::milliseconds timeout) {
  auto state = std::make_shared<Work::State>();
  state->what = what;
  state->health = health;
  state->timeout = timeout;
  state->seq = ++health->issued;
  state->issued_at = std::chrono::steady_clock::now();
  return state;
}

}  // namespace

RingWorker& Comm::ring_worker() {
  if (!ring_) ring_.reset(new RingWorker());
  return *ring_;
}

Work Comm::reduce_scatter_inplace_async(at::Tensor& flat, ReduceOp op) {
  const char* what = "reduce_scatter_inplace";
  const int world = world_size();
  check_ring_flat(what, flat, world);
  if (op != ReduceOp::Sum && op != ReduceOp::Avg) fail("{}: only Sum and Avg are supported", what);
  if (!at::isFloatingType(flat.scalar_type())) {
    fail("{}: needs a floating-point tensor, got {}", what, c10::toString(flat.scalar_type()));
  }
  if (world == 1) return Work();
  const Ring ring(*this, flat, kReduceScatterTag);
  auto state = ring_state(what, health_, options_.timeout);
  if (flat.is_cuda()) {
    at::Tensor mine = ring.chunk(ring.rank());
    at::Tensor in = flat;
    state->works.push_back(nccl_of(groups_.get(), ring.rank(), what)._reduce_scatter_base(mine, in));
    if (op == ReduceOp::Avg) state->finish = [mine, world] { scale_inplace(mine, world, ScaleOp::kDiv); };
    return Work(state);
  }
  RingWorker* worker = &ring_worker();
  state->job = worker->submit([worker, ring, op]() {
    c10::NoGradGuard no_grad;
    at::Tensor in = worker->scratch(ring.chunk(0).numel(), ring.chunk(0).options());
    for (int s = 0; s < ring.world() - 1; ++s) {
      ring.exchange(ring.chunk(ring.reduce_send(s)), in);
      ring.chunk(ring.reduce_recv(s)).add_(in);
    }
    if (op == ReduceOp::Avg) scale_inplace(ring.chunk(ring.rank()), ring.world(), ScaleOp::kDiv);
  });
  return Work(state);
}

Work Comm::all_gather_inplace_async(at::Tensor& flat) {
  const char* what = "all_gather_inplace";
  const int world = world_size();
  check_ring_flat(what, flat, world);
  if (world == 1) return Work();
  const Ring ring(*this, flat, kAllGatherTag);
  auto state = ring_state(what, health_, options_.timeout);
  if (flat.is_cuda()) {
    at::Tensor mine = ring.chunk(ring.rank());
    at::Tensor out = flat;
    state->works.push_back(nccl_of(groups_.get(), ring.rank(), what)._allgather_base(out, mine));
    return Work(state);
  }
  state->job = ring_worker().submit([ring]() {
    for (int s = 0; s < ring.world() - 1; ++s) ring.exchange(ring.chunk(ring.gather_send(s)), ring.chunk(ring.gather_recv(s)));
  });
  return Work(state);
}

}  // namespace ft
