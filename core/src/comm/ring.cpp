#include "ft/comm/ring.h"

#include <ATen/ATen.h>

#include "ft/comm/comm.h"
#include "ft/base/error.h"

namespace ft {
namespace {

bool is_16bit_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// Gloo moves send/recv payloads as raw bytes; handing it int16 keeps Comm
// from widening them. NCCL has half but no int16, so CUDA keeps the dtype.
at::Tensor as_words(const at::Tensor& t) {
  if (t.device().is_cpu() && is_16bit_float(t.scalar_type())) return t.view(at::kShort);
  return t;
}

}  // namespace

std::vector<int64_t> ring_chunk_sizes(int64_t numel, int world) {
  if (world < 1) fail("ring: world size must be >= 1, got {}", world);
  std::vector<int64_t> sizes(static_cast<size_t>(world), numel / world);
  for (int64_t i = 0; i < numel % world; ++i) sizes[static_cast<size_t>(i)] += 1;
  return sizes;
}

Ring::Ring(Comm& comm, const at::Tensor& flat, int tag)
    : comm_(&comm), rank_(comm.rank()), world_(comm.world_size()), tag_(tag) {
  int64_t offset = 0;
  for (int64_t n : ring_chunk_sizes(flat.numel(), world_)) {
    chunks_.push_back(flat.narrow(0, offset, n));
    offset += n;
  }
}

void Ring::exchange(const at::Tensor& out, const at::Tensor& in, RingTraffic* traffic) const {
  const int right = (rank_ + 1) % world_;
  const int left = (rank_ + world_ - 1) % world_;
  Work recv_work, send_work;
  if (in.numel() > 0) {
    at::Tensor words = as_words(in);
    recv_work = comm_->recv_async(words, left, tag_);
    if (traffic) traffic->bytes_received += in.numel() * static_cast<int64_t>(in.element_size());
  }
  if (out.numel() > 0) {
    send_work = comm_->send_async(as_words(out), right, tag_);
    if (traffic) {
      traffic->bytes_sent += out.numel() * static_cast<int64_t>(out.element_size());
      traffic->messages_sent += 1;
    }
  }
  send_work.wait();
  recv_work.wait();
}

}  // namespace ft
