// Comm's collectives: what c10d lacks on CPU is built here from what it has.
//   - Avg: Sum, then divide (Gloo in 1.13 has no AVG).
//   - bf16/fp16 on Gloo: sent as fp32 and cast back ("Invalid scalar type").
//   - flat all-gather: allgather into chunk() views of the flat output.
//   - flat reduce-scatter: alltoall_base, then reduce the received chunks
//     locally (moves world-1 chunks per rank, like a real reduce-scatter).
// Each collective issues one c10d call; its post-processing runs in wait().
#include <ATen/ATen.h>

#include "comm_internal.h"
#include "ft/base/error.h"
#include "inplace_scale.h"

namespace ft {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceOp::Min: return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

// A tensor as the backend wants it: contiguous, in a dtype it supports. When
// `user` already is, `wire` is the same tensor and nothing is copied.
struct Wire {
  at::Tensor user;
  at::Tensor wire;
  bool staged = false;

  void copy_back() const {
    if (staged) user.copy_(wire);
  }
};

bool gloo_needs_cast(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

// `fill_input`: false for pure outputs (recv, gather targets) to skip a copy.
Wire to_wire(const at::Tensor& t, bool gloo, bool fill_input) {
  Wire w{t, t, false};
  const bool cast = gloo && gloo_needs_cast(t);
  if (!cast && t.is_contiguous()) return w;
  auto dtype = cast ? at::kFloat : t.scalar_type();
  w.wire = fill_input ? t.to(dtype).contiguous()
                      : at::empty(t.sizes(), t.options().dtype(dtype));
  if (w.wire.data_ptr() == t.data_ptr()) w.wire = w.wire.clone();
  w.staged = true;
  return w;
}

void check_tensor(const char* what, const at::Tensor& t, const char* name) {
  if (!t.defined()) fail("{}: tensor '{}' is undefined", what, name);
}

void check_avg_dtype(const char* what, const at::Tensor& t, ReduceOp op) {
  if (op == ReduceOp::Avg && !at::isFloatingType(t.scalar_type())) {
    fail("{}: Avg needs a floating-point tensor, got {}", what, c10::toString(t.scalar_type()));
  }
}

}  // namespace

// Issues one c10d call on the group that owns `sample`'s device; wraps it in a
// Work whose finish() does the local post-processing.
class CommCall {
 public:
  CommCall(const char* what, const std::shared_ptr<CommHealth>& health, CommGroups* groups,
           std::chrono::milliseconds timeout)
      : state_(std::make_shared<Work::State>()), groups_(groups) {
    state_->what = what;
    state_->health = health;
    state_->timeout = timeout;
    std::string failure = health->get();
    if (!failure.empty()) {
      fail("rank {}: {} refused: the process group failed earlier ({})", health->rank, what,
           failure);
    }
  }

  const char* what() const { return state_->what.c_str(); }
  bool local() const { return groups_ == nullptr; }

  compat::Backend& group_for(const at::Tensor& t) {
    auto& g = t.is_cuda() ? groups_->nccl : groups_->gloo;
    if (!g) {
      fail("rank {}: {}: no process group for {} tensors (backend chosen at Comm::create)",
           state_->health->rank, what(), t.is_cuda() ? "CUDA" : "CPU");
    }
    // Only Gloo collectives may be waited on in slices (comm.cpp's
    // wait_sliced): a timed-out wait leaves them running; NCCL's aborts.
    state_->sliceable = !t.is_cuda();
    return *g;
  }
  // Point to point: Gloo's send/recv wait() gives up the pending operation
  // on a timeout, so no waiting in slices; and not a collective, so it takes
  // no number in the collective order the stall report relies on (a ring
  // thread's sends would make the ranks' numbering differ).
  void point_to_point() {
    state_->sliceable = false;
    counted_ = false;
  }
  void sliceable_if_gloo(bool gloo) { state_->sliceable = gloo; }
  bool is_gloo(const at::Tensor& t) const { return !t.is_cuda(); }

  // c10d validates arguments when a call is issued; those errors are the
  // caller's (shapes, ranks) and do not poison the group.
  template <typename F>
  Work issue(F&& call, std::function<void()> finish) {
    if (counted_) state_->seq = ++state_->health->issued;
    state_->issued_at = std::chrono::steady_clock::now();
    try {
      state_->works.push_back(call());
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail("rank {}: {}: {}", state_->health->rank, what(), first_line(e.what()));
    }
    state_->finish = std::move(finish);
    return Work(state_);
  }

  // World size 1: run the local equivalent now and hand back a finished Work.
  Work done_locally(const std::function<void()>& local) {
    if (local) local();
    state_->done = true;
    return Work(state_);
  }

 private:
  std::shared_ptr<Work::State> state_;
  CommGroups* groups_;
  bool counted_ = true;
};

Work Comm::all_reduce_async(at::Tensor& t, ReduceOp op) {
  CommCall c("all_reduce", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), t, "t");
  check_avg_dtype(c.what(), t, op);
  if (c.local()) return c.done_locally({});
  auto& group = c.group_for(t);
  auto w = std::make_shared<Wire>(to_wire(t, c.is_gloo(t), true));
  const int world = world_size();
  return c.issue(
      [&] {
        std::vector<at::Tensor> ts{w->wire};
        c10d::AllreduceOptions opts;
        opts.reduceOp = to_c10d(op);
        return group.allreduce(ts, opts);
      },
      [w, op, world] {
        if (op == ReduceOp::Avg) scale_inplace(w->wire, world, ScaleOp::kDiv);
        w->copy_back();
      });
}

Work Comm::broadcast_async(at::Tensor& t, int root) {
  CommCall c("broadcast", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), t, "t");
  if (root < 0 || root >= world_size()) {
    fail("broadcast: root {} is not a rank of a world of {}", root, world_size());
  }
  if (c.local()) return c.done_locally({});
  auto& group = c.group_for(t);
  auto w = std::make_shared<Wire>(to_wire(t, c.is_gloo(t), rank() == root));
  return c.issue(
      [&] {
        std::vector<at::Tensor> ts{w->wire};
        c10d::BroadcastOptions opts;
        opts.rootRank = root;
        return group.broadcast(ts, opts);
      },
      [w] { w->copy_back(); });
}

Work Comm::all_gather_async(std::vector<at::Tensor>& out, const at::Tensor& in) {
  CommCall c("all_gather", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), in, "in");
  const auto world = static_cast<size_t>(world_size());
  if (out.empty()) {
    for (size_t r = 0; r < world; ++r) out.push_back(at::empty_like(in));
  }
  if (out.size() != world) {
    fail("all_gather: {} output tensors for a world of {}", out.size(), world);
  }
  for (const auto& o : out) {
    if (!o.defined() || o.sizes() != in.sizes() || o.scalar_type() != in.scalar_type()) {
      fail("all_gather: every output must be a {} tensor shaped like the input",
           c10::toString(in.scalar_type()));
    }
  }
  if (c.local()) return c.done_locally([&] { out[0].copy_(in); });
  auto& group = c.group_for(in);
  const bool gloo = c.is_gloo(in);
  auto src = std::make_shared<Wire>(to_wire(in, gloo, true));
  auto dst = std::make_shared<std::vector<Wire>>();
  for (auto& o : out) dst->push_back(to_wire(o, gloo, false));
  return c.issue(
      [&] {
        std::vector<std::vector<at::Tensor>> outs(1);
        for (auto& d : *dst) outs[0].push_back(d.wire);
        std::vector<at::Tensor> ins{src->wire};
        return group.allgather(outs, ins);
      },
      [src, dst] {
        for (auto& d : *dst) d.copy_back();
      });
}

Work Comm::all_gather_flat_async(at::Tensor& flat_out, const at::Tensor& in) {
  CommCall c("all_gather_flat", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), in, "in");
  const int64_t n = in.numel();
  const int world = world_size();
  if (!flat_out.defined()) flat_out = at::empty({n * world}, in.options());
  if (flat_out.numel() != n * world || flat_out.scalar_type() != in.scalar_type() ||
      !flat_out.is_contiguous()) {
    fail("all_gather_flat: output must be contiguous {} with {} x {} = {} elements, got {}",
         c10::toString(in.scalar_type()), world, n, n * world, flat_out.numel());
  }
  if (c.local()) return c.done_locally([&] { flat_out.view(-1).copy_(in.reshape(-1)); });
  auto& group = c.group_for(in);
  const bool gloo = c.is_gloo(in);
  auto src = std::make_shared<Wire>(to_wire(in.reshape(-1), gloo, true));
  auto dst = std::make_shared<Wire>(to_wire(flat_out.view(-1), gloo, false));
  return c.issue(
      [&] {
        // Equal chunks of a contiguous 1-D buffer are themselves contiguous
        // views, so allgather writes straight into the flat output.
        std::vector<std::vector<at::Tensor>> outs{dst->wire.chunk(world)};
        std::vector<at::Tensor> ins{src->wire};
        return group.allgather(outs, ins);
      },
      [src, dst] { dst->copy_back(); });
}

Work Comm::reduce_scatter_flat_async(at::Tensor& out, const at::Tensor& in, ReduceOp op) {
  CommCall c("reduce_scatter_flat", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), in, "in");
  check_avg_dtype(c.what(), in, op);
  const int world = world_size();
  if (in.numel() % world != 0) {
    fail("reduce_scatter_flat: input has {} elements, not a multiple of the world size {}",
         in.numel(), world);
  }
  const int64_t n = in.numel() / world;
  if (!out.defined()) out = at::empty({n}, in.options());
  if (out.numel() != n || out.scalar_type() != in.scalar_type()) {
    fail("reduce_scatter_flat: output must hold {} elements of {}, got {}", n,
         c10::toString(in.scalar_type()), out.numel());
  }
  if (c.local()) return c.done_locally([&] { out.view(-1).copy_(in.reshape(-1)); });
  auto& group = c.group_for(in);
  const bool gloo = c.is_gloo(in);
  auto src = std::make_shared<Wire>(to_wire(in.reshape(-1), gloo, true));
  auto received = at::empty({world * n}, src->wire.options());
  at::Tensor user_out = out;
  return c.issue(
      [&] {
        std::vector<int64_t> equal;  // empty split sizes: equal chunks
        return group.alltoall_base(received, src->wire, equal, equal);
      },
      [received, user_out, op, world, n]() mutable {
        auto chunks = received.view({world, n});
        at::Tensor r;
        switch (op) {
          case ReduceOp::Max: r = std::get<0>(chunks.max(0)); break;
          case ReduceOp::Min: r = std::get<0>(chunks.min(0)); break;
          case ReduceOp::Sum: r = chunks.sum(0); break;
          case ReduceOp::Avg: r = chunks.sum(0).div_(world); break;
        }
        user_out.view(-1).copy_(r);
      });
}

Work Comm::all_to_all_async(at::Tensor& out, const at::Tensor& in) {
  CommCall c("all_to_all", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), in, "in");
  check_tensor(c.what(), out, "out");
  const int world = world_size();
  if (in.numel() % world != 0 || out.numel() != in.numel() ||
      out.scalar_type() != in.scalar_type()) {
    fail("all_to_all: input and output must be {} tensors of the same size, a multiple of {} "
         "(got {} and {})",
         c10::toString(in.scalar_type()), world, in.numel(), out.numel());
  }
  if (c.local()) return c.done_locally([&] { out.copy_(in.view_as(out)); });
  auto& group = c.group_for(in);
  const bool gloo = c.is_gloo(in);
  auto src = std::make_shared<Wire>(to_wire(in.reshape(-1), gloo, true));
  auto dst = std::make_shared<Wire>(to_wire(out.view(-1), gloo, false));
  return c.issue(
      [&] {
        std::vector<int64_t> equal;
        return group.alltoall_base(dst->wire, src->wire, equal, equal);
      },
      [src, dst] { dst->copy_back(); });
}

Work Comm::send_async(const at::Tensor& t, int dst, int tag) {
  CommCall c("send", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), t, "t");
  if (dst < 0 || dst >= world_size() || dst == rank()) {
    fail("send: rank {} cannot send to rank {} in a world of {}", rank(), dst, world_size());
  }
  auto& group = c.group_for(t);
  c.point_to_point();
  auto w = std::make_shared<Wire>(to_wire(t, c.is_gloo(t), true));
  return c.issue(
      [&] {
        std::vector<at::Tensor> ts{w->wire};
        return group.send(ts, dst, tag);
      },
      [w] {});
}

Work Comm::recv_async(at::Tensor& t, int src, int tag) {
  CommCall c("recv", health_, groups_.get(), options_.timeout);
  check_tensor(c.what(), t, "t");
  if (src < 0 || src >= world_size() || src == rank()) {
    fail("recv: rank {} cannot receive from rank {} in a world of {}", rank(), src, world_size());
  }
  auto& group = c.group_for(t);
  c.point_to_point();
  auto w = std::make_shared<Wire>(to_wire(t, c.is_gloo(t), false));
  return c.issue(
      [&] {
        std::vector<at::Tensor> ts{w->wire};
        return group.recv(ts, src, tag);
      },
      [w] { w->copy_back(); });
}

Work Comm::barrier_async() {
  CommCall c("barrier", health_, groups_.get(), options_.timeout);
  if (c.local()) return c.done_locally({});
  auto& group = groups_->gloo ? *groups_->gloo : *groups_->nccl;
  c.sliceable_if_gloo(groups_->gloo != nullptr);
  return c.issue(
      [&] {
        c10d::BarrierOptions opts;
        opts.timeout = options_.timeout;
        return group.barrier(opts);
      },
      {});
}

std::vector<at::Tensor> Comm::all_gather_varlen(const at::Tensor& in) {
  if (!in.defined() || in.dim() != 1) fail("all_gather_varlen: input must be a 1-D tensor");
  if (world_size() == 1) {
    CommCall("all_gather_varlen", health_, nullptr, options_.timeout);  // health check
    return {in.clone()};
  }
  auto count = at::full({1}, in.numel(), at::TensorOptions().dtype(at::kLong).device(in.device()));
  at::Tensor counts;
  all_gather_flat(counts, count);
  auto sizes = counts.to(at::kCPU);
  const int64_t longest = sizes.max().item<int64_t>();
  auto padded = at::zeros({longest}, in.options());
  padded.narrow(0, 0, in.numel()).copy_(in);
  at::Tensor flat;
  all_gather_flat(flat, padded);
  std::vector<at::Tensor> out;
  for (int r = 0; r < world_size(); ++r) {
    out.push_back(flat.narrow(0, r * longest, sizes[r].item<int64_t>()).clone());
  }
  return out;
}

}  // namespace ft
