#include "ft/dropout.h"

#include <cstdint>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

namespace ft {
namespace {

// splitmix64's finaliser over (seed, counter): statistically sound for a
// Bernoulli mask, and each element's bits depend on nothing but its index,
// so any split across threads gives the same mask.
inline uint64_t mix(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

void apply_dropout_mask(const at::Tensor& in, at::Tensor& out, uint64_t seed, int64_t counter, double keep) {
  const auto threshold = static_cast<uint64_t>(keep * 4294967296.0);  // keep * 2^32
  const int64_t n = in.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "ft_dropout", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto scale = static_cast<acc_t>(1.0 / keep);
    const auto* src = in.data_ptr<scalar_t>();
    auto* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
      // One 64-bit hash decides two consecutive global indices (32 bits each).
      uint64_t h = mix(seed, static_cast<uint64_t>(counter + begin) >> 1);
      for (int64_t i = begin; i < end; ++i) {
        const auto g = static_cast<uint64_t>(counter + i);
        if ((g & 1) == 0) h = mix(seed, g >> 1);
        const uint64_t bits = (g & 1) ? (h >> 32) : (h & 0xFFFFFFFFULL);
        dst[i] = bits < threshold ? static_cast<scalar_t>(static_cast<acc_t>(src[i]) * scale) : static_cast<scalar_t>(0);
      }
    });
  });
}

uint64_t draw_dropout_seed() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
}

namespace {

at::Tensor apply_mask(const at::Tensor& input, uint64_t seed, double keep) {
  const at::Tensor in = input.contiguous();
  at::Tensor out = at::empty_like(in);
  apply_dropout_mask(in, out, seed, 0, keep);
  return out;
}

class DropoutFunction : public torch::autograd::Function<DropoutFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double keep) {
    const uint64_t seed = draw_dropout_seed();
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    ctx->saved_data["keep"] = keep;
    return apply_mask(x, seed, keep);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const double keep = ctx->saved_data["keep"].toDouble();
    return {apply_mask(grads[0], seed, keep), at::Tensor()};
  }
};

}  // namespace

at::Tensor fast_dropout(const at::Tensor& x, double p, bool train) {
  if (!train || p <= 0.0) return x;
  if (p >= 1.0) return x * 0;
  if (!x.device().is_cpu()) return at::dropout(x, p, train);
  return DropoutFunction::apply(x, 1.0 - p);
}

}  // namespace ft
