#include "ring.h"

#include <c10/core/GradMode.h>
#include <utility>

#include <ATen/ATen.h>

#include "ft/base/error.h"

namespace ft::horovod {
namespace {

bool is_16bit_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

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

}  // namespace

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
  const Ring ring(comm, flat, options.tag);
  auto on_wire = [&](const at::Tensor& t) { return compress ? t.to(wire) : t; };
  auto recv_buffer = [&](const at::Tensor& like) { return at::empty({like.numel()}, like.options().dtype(wire)); };

  for (int s = 0; s < world - 1; ++s) {
    const at::Tensor& acc = ring.chunk(ring.reduce_recv(s));
    at::Tensor in = recv_buffer(acc);
    ring.exchange(on_wire(ring.chunk(ring.reduce_send(s))), in, &traffic);
    if (acc.numel() > 0) acc.add_(in);
  }
  // This rank now owns the fully reduced chunk `rank`. Finish it exactly
  // once, so every rank receives the same bits.
  const at::Tensor& owned = ring.chunk(rank);
  if (options.op == ReduceOp::Avg) owned.div_(static_cast<double>(world));
  if (compress) owned.copy_(owned.to(wire));

  for (int s = 0; s < world - 1; ++s) {
    const at::Tensor& out = ring.chunk(ring.gather_send(s));
    const at::Tensor& dst = ring.chunk(ring.gather_recv(s));
    if (compress) {
      at::Tensor in = recv_buffer(dst);
      ring.exchange(on_wire(out), in, &traffic);
      if (dst.numel() > 0) dst.copy_(in);
    } else {
      ring.exchange(out, dst, &traffic);  // straight into place
    }
  }
  return traffic;
}

}  // namespace ft::horovod
