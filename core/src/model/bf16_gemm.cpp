#include "model/bf16_gemm.h"

#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "model/sgemm.h"
#include "simd_clones.h"

namespace ft {

namespace {

struct Key {
  int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb, c_bf16;
  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
           ta == o.ta && tb == o.tb && c_bf16 == o.c_bf16;
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = (size_t{key.ta} | size_t{key.tb} << 1 | size_t{key.c_bf16} << 2);
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

struct Product {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratch;
};

// oneDNN's CPU engine and every product shape met so far, for the process.
// A matmul primitive costs ~10 us to create (milliseconds for the first of
// its kind, while its kernels are generated), more than most of the
// products it runs; the packed lengths repeat, so each shape is made once.
class Products {
 public:
  Products() : works_(probe()) {}
  bool works() const { return works_; }
  // Null where oneDNN declines the shape (or is not the one this process
  // loaded: see sgemm.h).
  const Product* find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = made_.find(key);
    if (it == made_.end()) it = made_.emplace(key, make(key)).first;
    return it->second.get();
  }
  // False where oneDNN refuses to run it (seen beside a PyPI LibTorch:
  // "could not execute a primitive").
  bool run(const Product& p, const uint16_t* a, const uint16_t* b, void* c) const {
    try {
      dnnl::stream stream(engine_);
      std::vector<uint8_t> scratch(p.scratch.get_size());
      // oneDNN takes non-const handles; it only reads A and B.
      p.primitive.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(p.a, engine_, const_cast<uint16_t*>(a))},
                                   {DNNL_ARG_WEIGHTS, dnnl::memory(p.b, engine_, const_cast<uint16_t*>(b))},
                                   {DNNL_ARG_DST, dnnl::memory(p.c, engine_, c)},
                                   {DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, engine_, scratch.data())}});
      stream.wait();
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

 private:
  std::unique_ptr<Product> make(const Key& key) const {
    using dnnl::memory;
    const auto rows = [](bool t, int64_t r, int64_t c, int64_t ld) {  // op(X) = r x c, X row-major
      return memory::desc({r, c}, memory::data_type::bf16, t ? memory::dims{1, ld} : memory::dims{ld, 1});
    };
    try {
      auto product = std::make_unique<Product>();
      product->a = rows(key.ta, key.m, key.k, key.lda);
      product->b = rows(key.tb, key.k, key.n, key.ldb);
      product->c = memory::desc({key.m, key.n}, key.c_bf16 ? memory::data_type::bf16 : memory::data_type::f32,
                                memory::dims{key.ldc, 1});
      dnnl::primitive_attr attr;
      // The caller's buffer, not the primitive's own: tasks on several
      // threads may run one primitive at once.
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(product->a, product->b, product->c), attr, engine_);
      product->primitive = dnnl::matmul(pd);
      product->scratch = pd.scratchpad_desc();
      return product;
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  // Two small products checked against their known result, laid out as
  // the attention kernels' are (row strides wider than the rows, each
  // operand transposed once, fp32 and bf16 results): beside a PyPI LibTorch
  // Debian's oneDNN ran a dense product but refused every strided one
  // ("could not execute a primitive"), so only a kernel that ran proves it.
  bool probe() {
    const auto bf = [](std::initializer_list<float> v) {
      std::vector<uint16_t> out;
      for (float x : v) out.push_back(bf16_bits(x));
      return out;
    };
    // A = [[1, 2, 3], [4, 5, 6]], B = [[1, -1], [0.5, 2], [-2, 0]], A B = [[-4, 3], [-5.5, 6]].
    const std::vector<uint16_t> a_rows = bf({1, 2, 3, 0, 4, 5, 6, 0}), b_cols = bf({1, 0.5f, -2, 0, -1, 2, 0, 0});
    const std::vector<uint16_t> a_cols = bf({1, 4, 0, 2, 5, 0, 3, 6, 0}), b_rows = bf({1, -1, 0, 0.5f, 2, 0, -2, 0, 0});
    float c[6] = {};
    std::vector<uint16_t> cb(6);
    const Product* nt = find(Key{2, 2, 3, 4, 4, 3, false, true, false});
    const Product* tn = find(Key{2, 2, 3, 3, 3, 3, true, false, true});
    if (nt == nullptr || tn == nullptr || !run(*nt, a_rows.data(), b_cols.data(), c) ||
        !run(*tn, a_cols.data(), b_rows.data(), cb.data()))
      return false;
    const std::vector<uint16_t> want = bf({-4, 3, 0, -5.5f, 6, 0});
    return c[0] == -4.0f && c[1] == 3.0f && c[3] == -5.5f && c[4] == 6.0f && cb[0] == want[0] && cb[1] == want[1] &&
           cb[3] == want[3] && cb[4] == want[4];
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  std::mutex mutex_;
  std::unordered_map<Key, std::unique_ptr<Product>, KeyHash> made_;
  bool works_;  // last: probe() uses the members above
};

Products& products() {
  static Products made;
  return made;
}

FT_SIMD_CLONES void round_loop(const float* src, uint16_t* dst, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits(src[i] * scale);
}

// op(X) widened to fp32, row-major with stride cols (for the fallback).
std::vector<float> widen(bool t, int64_t r, int64_t c, const uint16_t* x, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(r * c));
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const uint32_t u = static_cast<uint32_t>(t ? x[j * ld + i] : x[i * ld + j]) << 16;
      std::memcpy(&out[static_cast<size_t>(i * c + j)], &u, sizeof u);
    }
  return out;
}

}  // namespace

bool bf16_gemm_works() { return products().works(); }

void round_to_bf16(const float* src, uint16_t* dst, int64_t n, float scale) { round_loop(src, dst, n, scale); }

void gemm_bf16_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, void* c, bool c_bf16, int64_t ldc) {
  Products& made = products();
  const Product* p = made.find(Key{m, n, k, lda, ldb, ldc, ta, tb, c_bf16});
  if (p != nullptr && made.run(*p, a, b, c)) return;
  const std::vector<float> wa = widen(ta, m, k, a, lda), wb = widen(tb, k, n, b, ldb);
  if (!c_bf16) {
    sgemm_rows(false, false, m, n, k, 1.0f, wa.data(), k, wb.data(), n, 0.0f, static_cast<float*>(c), ldc);
    return;
  }
  std::vector<float> wc(static_cast<size_t>(m * n));
  sgemm_rows(false, false, m, n, k, 1.0f, wa.data(), k, wb.data(), n, 0.0f, wc.data(), n);
  for (int64_t i = 0; i < m; ++i) round_loop(wc.data() + i * n, static_cast<uint16_t*>(c) + i * ldc, n, 1.0f);
}

}  // namespace ft
