#include "ring.h"

#include <c10/core/GradMode.h>
#include <utility>

#include <ATen/ATen.h>

#include "ft/error.h"

namespace ft::horovod {
namespace {

bool is_16bit_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// What the chunk's bytes look like to Comm. ft::Comm widens fp16/bf16 to
// fp32 for Gloo; the ring wants the 16-bit words on the wire, so on CPU it
// hands them over as int16 (Gloo moves raw bytes for send/recv). On CUDA
// (NCCL has no int16 but does have half) the dtype stays as it is.
at::Tensor as_words(const at::Tensor& t) {
  if (t.device().is_cpu() && is_16bit_float(t.scalar_type())) return t.view(at::kShort);
  return t;
}

at::ScalarType wire_dtype(const at::Tensor& flat, const RingOptions& o) {
  const at::ScalarType wire = o.wire == at::ScalarType::Undefined ? flat.scalar_type() : o.wire;
  if (wire != flat.scalar_type() && wire != at::kFloat && !is_16bit_float(wire)) {
    fail("ring all-reduce: wire dtype must be fp32, fp16 or bf16, got {}", c10::toString(wire));
  }
  return wire;
}

void check_flat(const at::Tensor& flat, const RingOptions& o) {
  if (!flat.defined() || flat.dim() != 1 || !flat.is_contiguous()) {
    fail("ring all-reduce: needs a contiguous 1-D tensor");
  }
  if (!at::isFloatingType(flat.scalar_type())) {
    fail("ring all-reduce: needs a floating-point tensor, got {}", c10::toString(flat.scalar_type()));
  }
  if (o.op != ReduceOp::Sum && o.op != ReduceOp::Avg) fail("ring all-reduce: only Sum and Avg are supported");
}

// One ring hop: send `out` to the right neighbour while receiving `in` from
// the left one. Either may be empty (then that side of the hop is skipped,
// which both ends agree on because chunk sizes are the same everywhere).
void exchange(Comm& comm, const at::Tensor& out, at::Tensor& in, int tag, RingTraffic& traffic) {
  const int world = comm.world_size();
  const int right = (comm.rank() + 1) % world;
  const int left = (comm.rank() + world - 1) % world;
  Work recv_work, send_work;
  at::Tensor in_words;
  if (in.numel() > 0) {
    in_words = as_words(in);
    recv_work = comm.recv_async(in_words, left, tag);
    traffic.bytes_received += in.numel() * static_cast<int64_t>(in.element_size());
  }
  if (out.numel() > 0) {
    send_work = comm.send_async(as_words(out), right, tag);
    traffic.bytes_sent += out.numel() * static_cast<int64_t>(out.element_size());
    traffic.messages_sent += 1;
  }
  send_work.wait();
  recv_work.wait();
}

}  // namespace

std::vector<int64_t> ring_chunk_sizes(int64_t numel, int world) {
  if (world < 1) fail("ring all-reduce: world size must be >= 1, got {}", world);
  std::vector<int64_t> sizes(static_cast<size_t>(world), numel / world);
  for (int64_t i = 0; i < numel % world; ++i) sizes[static_cast<size_t>(i)] += 1;
  return sizes;
}

RingTraffic ring_allreduce(Comm& comm, const at::Tensor& flat, const RingOptions& options) {
  check_flat(flat, options);
  const at::ScalarType wire = wire_dtype(flat, options);
  const bool compress = wire != flat.scalar_type();
  const int world = comm.world_size();
  const int rank = comm.rank();
  RingTraffic traffic;
  c10::NoGradGuard no_grad;
  if (world == 1) {
    if (compress) flat.copy_(flat.to(wire));
    return traffic;
  }
  const auto sizes = ring_chunk_sizes(flat.numel(), world);
  std::vector<at::Tensor> chunks;
  int64_t offset = 0;
  for (int64_t n : sizes) {
    chunks.push_back(flat.narrow(0, offset, n));
    offset += n;
  }
  auto chunk = [&](int i) -> at::Tensor& { return chunks[static_cast<size_t>(((i % world) + world) % world)]; };
  auto on_wire = [&](const at::Tensor& t) { return compress ? t.to(wire) : t; };
  auto recv_buffer = [&](const at::Tensor& like) { return at::empty({like.numel()}, like.options().dtype(wire)); };

  // Reduce-scatter: after step s, chunk (r - s - 1) holds s + 2 ranks' terms.
  for (int s = 0; s < world - 1; ++s) {
    const at::Tensor& out = chunk(rank - s);
    at::Tensor& acc = chunk(rank - s - 1);
    at::Tensor in = recv_buffer(acc);
    exchange(comm, on_wire(out), in, options.tag, traffic);
    if (acc.numel() > 0) acc.add_(in);
  }
  // This rank now owns the fully reduced chunk (r + 1). Finish it exactly
  // once, so every rank receives the same bits.
  at::Tensor& owned = chunk(rank + 1);
  if (options.op == ReduceOp::Avg) owned.div_(static_cast<double>(world));
  if (compress) owned.copy_(owned.to(wire));

  // All-gather: pass the finished chunks around the ring.
  for (int s = 0; s < world - 1; ++s) {
    const at::Tensor& out = chunk(rank + 1 - s);
    at::Tensor& dst = chunk(rank - s);
    if (compress) {
      at::Tensor in = recv_buffer(dst);
      exchange(comm, on_wire(out), in, options.tag, traffic);
      if (dst.numel() > 0) dst.copy_(in);
    } else {
      exchange(comm, out, dst, options.tag, traffic);  // straight into place
    }
  }
  return traffic;
}

}  // namespace ft::horovod
