#include "ft/model/dropout.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "model/bf16_gemm.h"

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

// The mask is ~10 % of a MiniLM step when computed element by element with
// a branch (per-element hash, odd/even test). Below it is two loops with no
// branches, which the compiler vectorises: the hashes of a block, then the
// keep/drop select. The 64-bit multiplies of the hash only vectorise well
// with AVX-512DQ, hence a clone for x86-64-v4, picked at load time; the
// default clone is the baseline build. 4x faster on this machine, same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FT_DROPOUT_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define FT_DROPOUT_CLONES
#endif

// Hashes of the pairs [first, first + n), as 32-bit words: words[2j] decides
// element 2(first + j), words[2j + 1] the element after it.
FT_DROPOUT_CLONES void hash_pairs(uint64_t seed, uint64_t first, int64_t n, uint32_t* words) {
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t h = mix(seed, first + static_cast<uint64_t>(j));
    words[2 * j] = static_cast<uint32_t>(h);
    words[2 * j + 1] = static_cast<uint32_t>(h >> 32);
  }
}

// dst = bits < threshold ? src * scale : 0; the product is taken either way
// so that the loop has no conditional load.
template <typename T>
void select_kept(const T* src, T* dst, const uint32_t* bits, int64_t n, uint32_t threshold,
                 at::opmath_type<T> scale) {
  using acc_t = at::opmath_type<T>;
  for (int64_t i = 0; i < n; ++i) {
    const acc_t kept = static_cast<acc_t>(src[i]) * scale;
    dst[i] = static_cast<T>(bits[i] < threshold ? kept : acc_t(0));
  }
}
FT_DROPOUT_CLONES void select_kept_clone(const float* src, float* dst, const uint32_t* bits, int64_t n,
                                         uint32_t threshold, float scale) {
  select_kept(src, dst, bits, n, threshold, scale);
}
// c10::BFloat16's conversion (bf16_bits) on the bits, so that the loop
// vectorises: through the class it stayed scalar, and the bf16 masks were
// 2.6 % of a ddp_amp step. Same bits as the template.
FT_DROPOUT_CLONES void select_kept_clone(const at::BFloat16* src, at::BFloat16* dst, const uint32_t* bits, int64_t n,
                                         uint32_t threshold, float scale) {
  const auto* in = reinterpret_cast<const uint16_t*>(src);
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    out[i] = bits[i] < threshold ? bf16_bits(f * scale) : uint16_t{0};
  }
}
// fp32 probabilities kept as a bf16 product's operand (bf16 attention).
FT_DROPOUT_CLONES void select_kept_clone(const float* src, at::BFloat16* dst, const uint32_t* bits, int64_t n,
                                         uint32_t threshold, float scale) {
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = bits[i] < threshold ? bf16_bits(src[i] * scale) : uint16_t{0};
}
template <typename T>
void select_kept_clone(const T* src, T* dst, const uint32_t* bits, int64_t n, uint32_t threshold,
                       at::opmath_type<T> scale) {
  select_kept(src, dst, bits, n, threshold, scale);
}

// keep < 1, so keep * 2^32 fits in 32 bits.
uint32_t keep_threshold(double keep) { return static_cast<uint32_t>(std::min(keep * 4294967296.0, 4294967295.0)); }

// Elements [0, n) of one span, element i at global index g = counter + i,
// which reads 32 bits of mix(seed, g / 2): the low half when g is even, the
// high half when odd.
template <typename S, typename T>
void mask_span(const S* src, T* dst, int64_t n, uint64_t seed, int64_t counter, uint32_t threshold,
               at::opmath_type<T> scale) {
  constexpr int64_t kBlock = 2048;
  std::array<uint32_t, kBlock + 2> words;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(n - b, kBlock);
    const auto g0 = static_cast<uint64_t>(counter + b), g1 = g0 + static_cast<uint64_t>(len) - 1;
    hash_pairs(seed, g0 >> 1, static_cast<int64_t>((g1 >> 1) - (g0 >> 1)) + 1, words.data());
    select_kept_clone(src + b, dst + b, words.data() + (g0 & 1), len, threshold, scale);
  }
}

}  // namespace

void apply_dropout_mask(const at::Tensor& in, at::Tensor& out, uint64_t seed, int64_t counter, double keep) {
  const uint32_t threshold = keep_threshold(keep);
  const int64_t n = in.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "ft_dropout", [&] {
    const auto scale = static_cast<at::opmath_type<scalar_t>>(1.0 / keep);
    const auto* src = in.data_ptr<scalar_t>();
    auto* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
      mask_span(src + begin, dst + begin, end - begin, seed, counter + begin, threshold, scale);
    });
  });
}

void apply_dropout_mask(const float* in, float* out, int64_t n, uint64_t seed, int64_t counter, double keep) {
  mask_span(in, out, n, seed, counter, keep_threshold(keep), static_cast<float>(1.0 / keep));
}

void apply_dropout_mask(const float* in, at::BFloat16* out, int64_t n, uint64_t seed, int64_t counter, double keep) {
  mask_span(in, out, n, seed, counter, keep_threshold(keep), static_cast<float>(1.0 / keep));
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
