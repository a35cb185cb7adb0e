// Padding-free execution: the packed path computes what the padded path
// computes, pad positions never reach a Linear layer, and the kernels it uses
// (counter-based dropout, per-sequence attention) are right on their own.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ft/model/dropout.h"
#include "ft/model/model.h"
#include "ft/model/packed_attention.h"
#include "ft/model/token_layout.h"
#include "ft_test.h"

namespace {

ft::BertConfig small_config(double dropout = 0.0) {
  auto c = ft::BertConfig::preset("tiny");
  c.vocab_size = 100;
  c.num_labels = 3;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = dropout;
  return c;
}

// Rows of the given lengths, right-padded to `seq` (the data loader's shape).
ft::Batch batch_of(const std::vector<int64_t>& lengths, int64_t seq) {
  const auto rows = static_cast<int64_t>(lengths.size());
  ft::Batch b;
  b.input_ids = at::randint(1, 100, {rows, seq}, at::kLong);
  b.attention_mask = at::zeros({rows, seq}, at::kLong);
  b.token_type_ids = at::zeros({rows, seq}, at::kLong);
  for (int64_t r = 0; r < rows; ++r) {
    b.attention_mask[r].narrow(0, 0, lengths[static_cast<size_t>(r)]).fill_(1);
    b.token_type_ids[r].narrow(0, lengths[static_cast<size_t>(r)] / 2, lengths[static_cast<size_t>(r)] / 2).fill_(1);
  }
  b.input_ids.masked_fill_(b.attention_mask.eq(0), 0);
  b.labels = at::randint(0, 3, {rows}, at::kLong);
  return b;
}

// Loss and every parameter's gradient, with padding-free on or off.
struct Result {
  at::Tensor logits;
  std::vector<at::Tensor> grads;
};

Result run(ft::EncoderModel& model, const ft::Batch& b, bool padding_free) {
  model.set_padding_free(padding_free);
  model.zero_grad();
  Result r;
  r.logits = model.forward(b);
  at::cross_entropy_loss(r.logits, b.labels).backward();
  for (const auto& p : model.parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

void check_same(const Result& a, const Result& b, double tol) {
  CHECK((a.logits - b.logits).abs().max().item<double>() < tol);
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    CHECK((a.grads[i] - b.grads[i]).abs().max().item<double>() < tol);
  }
}

// Installs an adapter on every Linear that records the rows it sees.
std::shared_ptr<std::vector<int64_t>> watch_linear_rows(ft::EncoderModel& model) {
  auto seen = std::make_shared<std::vector<int64_t>>();
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<ft::AdaptableLinearImpl*>(m.get())) {
      linear->adapter = [seen](const at::Tensor& x) {
        seen->push_back(x.dim() == 2 ? x.size(0) : -1);
        return at::zeros({1}, x.options());
      };
    }
  }
  return seen;
}

}  // namespace

TEST_CASE("padding-free equals padded: logits and every gradient, fp32") {
  at::manual_seed(11);
  ft::EncoderModel model(small_config());
  SUBCASE("right-padded rows of mixed lengths (per-sequence attention)") {
    const auto b = batch_of({7, 1, 16, 3, 12, 16, 2, 9}, 16);
    check_same(run(model, b, false), run(model, b, true), 1e-5);
  }
  SUBCASE("every row the same length below seq (no scatter)") {
    const auto b = batch_of({5, 5, 5}, 12);
    check_same(run(model, b, false), run(model, b, true), 1e-5);
  }
  SUBCASE("holes in the mask and a masked [CLS] (padded-width attention)") {
    auto b = batch_of({10, 6, 8}, 10);
    b.attention_mask[0][4] = 0;  // a hole inside row 0
    b.attention_mask[1][0] = 0;  // row 1's column 0 masked: kept for the pooler, never a key
    check_same(run(model, b, false), run(model, b, true), 1e-5);
  }
  SUBCASE("no padding at all") {
    const auto b = batch_of({6, 6}, 6);
    check_same(run(model, b, false), run(model, b, true), 1e-6);
  }
}

TEST_CASE("inference with a [CLS] head: the last layer computes the first tokens alone, same logits") {
  at::manual_seed(12);
  ft::EncoderModel model(small_config());
  auto b = batch_of({7, 1, 16, 3, 12}, 16);
  SUBCASE("a hole and a masked [CLS]") {
    b.attention_mask[0][4] = 0;
    b.attention_mask[1][0] = 0;
  }
  SUBCASE("mixed lengths") {}
  for (bool padding_free : {true, false}) {
    CAPTURE(padding_free);
    model.set_padding_free(padding_free);
    const at::Tensor every = model.forward(b).detach();  // with gradients: every token, every layer
    auto seen = watch_linear_rows(model);
    torch::NoGradGuard no_grad;
    const at::Tensor firsts = model.forward(b);
    CHECK((firsts - every).abs().max().item<double>() < 1e-5);
    // The last layer's attention output, FFN in and FFN out, then the pooler
    // and the classifier: five products of one row per sequence.
    CHECK(std::count(seen->begin(), seen->end(), int64_t{5}) == 5);
    for (const auto& m : model.modules(false))
      if (auto* linear = dynamic_cast<ft::AdaptableLinearImpl*>(m.get())) linear->adapter = nullptr;
  }
}

TEST_CASE("every attention kernel gives the same logits and gradients, padded and padding-free") {
  at::manual_seed(12);
  ft::EncoderModel model(small_config());
  auto b = batch_of({7, 1, 16, 3, 12, 16, 2, 9}, 16);
  const Result reference = [&] {
    model.set_attention(ft::AttentionKernel::kEager);
    return run(model, b, false);
  }();
  std::vector<ft::AttentionKernel> kinds = {ft::AttentionKernel::kAuto, ft::AttentionKernel::kPacked,
                                            ft::AttentionKernel::kTiled, ft::AttentionKernel::kEager};
  // LibTorch 1.x has no SDPA (config validation refuses it there; the model
  // falls back to eager).
  if (ft::sdpa_available()) kinds.push_back(ft::AttentionKernel::kSdpa);
  for (const auto kind : kinds) {
    for (const bool padding_free : {false, true}) {
      INFO("kernel " << static_cast<int>(kind) << ", padding_free " << padding_free);
      model.set_attention(kind);
      check_same(reference, run(model, b, padding_free), 1e-5);
    }
  }
  model.set_attention(ft::AttentionKernel::kAuto);
}

TEST_CASE("pad positions never reach a Linear layer") {
  at::manual_seed(2);
  ft::EncoderModel model(small_config());
  const auto seen = watch_linear_rows(model);
  // 1 real token and 127 pads.
  const auto b = batch_of({1}, 128);
  model.set_padding_free(true);
  model.forward(b);
  const auto layers = small_config().num_hidden_layers;
  REQUIRE(seen->size() == static_cast<size_t>(6 * layers + 2));  // q k v o in out per layer, pooler, classifier
  for (int64_t rows : *seen) CHECK(rows == 1);
  seen->clear();
  model.set_padding_free(false);  // the switch: every position computed
  model.forward(b);
  for (size_t i = 0; i + 2 < seen->size(); ++i) CHECK((*seen)[i] == 128);
  // A batch of 4 rows, 10 real tokens in all: the encoder's Linears see 10.
  seen->clear();
  model.set_padding_free(true);
  model.forward(batch_of({1, 4, 2, 3}, 64));
  for (size_t i = 0; i + 2 < seen->size(); ++i) CHECK((*seen)[i] == 10);
  CHECK((*seen)[seen->size() - 1] == 4);  // the classifier: one row per sequence
}

TEST_CASE("TokenLayout: kept tokens, slots and [CLS] rows") {
  auto mask = at::tensor({1, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1}, at::kLong).view({3, 4});
  const auto l = ft::TokenLayout::packed(mask);
  CHECK(l.tokens == 8);
  CHECK(l.width == 4);
  CHECK(l.keep_index.equal(at::tensor({0, 1, 2, 4, 8, 9, 10, 11}, at::kLong)));
  CHECK(l.first.equal(at::tensor({0, 3, 4}, at::kLong)));
  CHECK(l.sequence_lengths == std::vector<int64_t>{3, 1, 4});
  CHECK(l.slot.equal(at::tensor({0, 1, 2, 4, 8, 9, 10, 11}, at::kLong)));
  const auto full = ft::TokenLayout::packed(at::ones({2, 3}, at::kLong));
  CHECK_FALSE(full.is_packed());
  CHECK(full.tokens == 6);
}

TEST_CASE("counter-based dropout: rate, scale, replay in backward, seeded") {
  at::set_num_threads(2);
  const double p = 0.1;
  auto x = at::ones({1 << 20}).requires_grad_();
  at::manual_seed(5);
  auto y = ft::fast_dropout(x, p, true);
  const double kept = y.ne(0).to(at::kDouble).mean().item<double>();
  CHECK(std::abs(kept - (1 - p)) < 0.002);  // 1M draws: sd ~3e-4
  CHECK(y.max().item<double>() == doctest::Approx(1 / (1 - p)).epsilon(1e-6));
  y.backward(at::ones_like(y));
  CHECK(x.grad().equal(y.detach()));  // the same mask, recomputed from the seed
  at::manual_seed(5);
  CHECK(ft::fast_dropout(x.detach(), p, true).equal(y.detach()));
  CHECK(ft::fast_dropout(x.detach(), p, false).equal(x.detach()));
  // Neighbouring elements are independent: P(both kept) = (1-p)^2.
  auto kept_mask = y.detach().ne(0).to(at::kDouble);
  const double both = (kept_mask.slice(0, 0, -1) * kept_mask.slice(0, 1)).mean().item<double>();
  CHECK(std::abs(both - (1 - p) * (1 - p)) < 0.003);
  // Thread count does not change the mask.
  at::set_num_threads(1);
  at::manual_seed(5);
  CHECK(ft::fast_dropout(x.detach(), p, true).equal(y.detach()));
  at::set_num_threads(2);
}

TEST_CASE("dropout mask: element g's fate depends on g alone, across blocks, odd offsets and dtypes") {
  // The kernel hashes blocks of pairs of elements; a slice that starts at an
  // odd global index, or mid-block, must read the same bits as the whole.
  const int64_t n = 10007;  // several 2048-element blocks, odd length
  const auto x = at::rand({n}) + 0.5;
  const uint64_t seed = 0x1234567890abcdefULL;
  const double keep = 0.7;
  at::Tensor whole = at::empty_like(x);
  ft::apply_dropout_mask(x, whole, seed, 3, keep);
  for (int64_t offset : {1, 2, 2047, 2048, 2049, 5001}) {
    const at::Tensor part_in = x.slice(0, offset).contiguous();
    at::Tensor part = at::empty_like(part_in);
    ft::apply_dropout_mask(part_in, part, seed, 3 + offset, keep);
    CHECK(part.equal(whole.slice(0, offset)));
  }
  const at::Tensor xb = x.to(at::kBFloat16);
  at::Tensor wb = at::empty_like(xb);
  ft::apply_dropout_mask(xb, wb, seed, 3, keep);
  CHECK(wb.ne(0).equal(whole.ne(0)));
  CHECK(at::allclose(wb.to(at::kFloat), whole, 1e-2, 0));
  // bf16 bit for bit: the product in fp32, rounded as c10::BFloat16 rounds
  // (nearest even; any NaN is 0x7FC0, where ATen's vector conversion gives
  // 0xFFFF), also at NaN, infinities, zero and a subnormal. keep 2/3 makes
  // the scale 1.5, so about half the products of 8-bit significands fall
  // exactly between two bf16 values: the ties must go to even.
  const double keep_bf16 = 2.0 / 3.0;
  at::Tensor xs = at::randn({n}).to(at::kBFloat16);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3.3895e38f, 1.0078125f};
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t k = i; k < n; k += 997) xs[k] = specials[i];
  }
  at::Tensor ws = at::empty_like(xs);
  ft::apply_dropout_mask(xs, ws, seed, 3, keep_bf16);
  const at::Tensor ones = at::ones({n});
  at::Tensor kept_mask = at::empty_like(ones);
  ft::apply_dropout_mask(ones, kept_mask, seed, 3, keep_bf16);
  const at::Tensor product =
      xs.to(at::kFloat).mul(at::scalar_tensor(static_cast<float>(1.0 / keep_bf16))).to(at::kBFloat16);
  const at::Tensor expect = at::where(kept_mask.ne(0), product, at::zeros_like(product));
  const auto bits = [](const at::Tensor& t) { return t.view(at::kShort); };
  CHECK(bits(ws).equal(at::where(expect.isnan(), at::scalar_tensor(0x7FC0, at::kShort), bits(expect))));
  CHECK(ws.isnan().sum().item<int64_t>() > 0);
  const double kept = whole.ne(0).to(at::kDouble).mean().item<double>();
  CHECK(std::abs(kept - keep) < 0.02);  // 10k draws: sd ~5e-3
}

TEST_CASE("packed attention equals masked padded attention, values and gradients, with and without a window") {
  // window -1: every key of the sequence; 0 and 2: ModernBERT's local layers,
  // keys within that distance of the query only.
  for (int64_t window : {-1, 0, 2}) {
  CAPTURE(window);
  at::manual_seed(9);
  const std::vector<int64_t> lengths = {5, 1, 9, 3};
  const int64_t heads = 2, d = 8, hidden = heads * d, rows = 4, width = 9;
  int64_t tokens = 0;
  for (int64_t l : lengths) tokens += l;
  auto q = at::randn({tokens, hidden}).requires_grad_();
  auto k = at::randn({tokens, hidden}).requires_grad_();
  auto v = at::randn({tokens, hidden}).requires_grad_();
  auto w = at::randn({tokens, hidden});
  auto out = ft::packed_attention(q, k, v, lengths, heads, 0.0, true, {}, {}, window);
  (out * w).sum().backward();
  // Reference: scatter into [rows, width], mask the empty keys (and those
  // outside the window), gather back.
  std::vector<int64_t> slot;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < lengths[static_cast<size_t>(r)]; ++j) slot.push_back(r * width + j);
  const auto idx = at::tensor(slot, at::kLong);
  auto present = at::zeros({rows * width}, at::kBool).index_fill_(0, idx, true).view({rows, 1, 1, width});
  const auto col = at::arange(width);
  const auto near = window < 0 ? at::ones({width, width}, at::kBool)
                               : (col.unsqueeze(1) - col.unsqueeze(0)).abs().le(window);
  const auto mask = at::where(present.logical_and(near), at::zeros({}), at::full({}, std::numeric_limits<float>::lowest()));
  auto split = [&](const at::Tensor& t) {
    return at::zeros({rows * width, hidden}).index_copy(0, idx, t).view({rows, width, heads, d}).permute({0, 2, 1, 3});
  };
  auto q2 = q.detach().clone().requires_grad_(), k2 = k.detach().clone().requires_grad_(),
       v2 = v.detach().clone().requires_grad_();
  auto scores = at::matmul(split(q2), split(k2).transpose(-1, -2)) / std::sqrt(double(d)) + mask;
  auto ref = at::matmul(at::softmax(scores, -1), split(v2)).permute({0, 2, 1, 3}).reshape({rows * width, hidden}).index_select(0, idx);
  (ref * w).sum().backward();
  CHECK((out - ref).abs().max().item<double>() < 1e-5);
  CHECK((q.grad() - q2.grad()).abs().max().item<double>() < 1e-5);
  CHECK((k.grad() - k2.grad()).abs().max().item<double>() < 1e-5);
  CHECK((v.grad() - v2.grad()).abs().max().item<double>() < 1e-5);
  }
  // The window changes the result: the 9-token sequence's first query cannot see key 8 at window 2.
  at::manual_seed(9);
  const auto q = at::randn({9, 16}), k = at::randn({9, 16}), v = at::randn({9, 16});
  CHECK((ft::packed_attention(q, k, v, {9}, 2, 0.0, false) - ft::packed_attention(q, k, v, {9}, 2, 0.0, false, {}, {}, 2))
            .abs().max().item<double>() > 1e-3);
}

TEST_CASE("packed attention with dropout: seeded, and backward replays the forward mask") {
  at::manual_seed(4);
  const std::vector<int64_t> lengths = {6, 4};
  auto q = at::randn({10, 8}), k = at::randn({10, 8});
  auto v = at::randn({10, 8}).requires_grad_();
  at::manual_seed(1);
  auto a = ft::packed_attention(q, k, v, lengths, 2, 0.5, true);
  at::manual_seed(1);
  auto b = ft::packed_attention(q, k, v, lengths, 2, 0.5, true);
  CHECK(a.equal(b));
  // Linear in v: out(v) = P' v exactly, so out(2v) = 2 out(v) and the
  // gradient of sum(out) w.r.t. v is consistent with the forward values.
  at::manual_seed(1);
  auto c = ft::packed_attention(q, k, (2 * v).detach(), lengths, 2, 0.5, true);
  CHECK(at::allclose(c, 2 * a.detach(), 1e-5, 1e-6));
  a.sum().backward();
  // The same mask in backward: a finite difference on one element of v.
  const double eps = 1e-2;
  auto v_plus = v.detach().clone();
  v_plus[3][5] += eps;
  at::manual_seed(1);
  auto a_plus = ft::packed_attention(q, k, v_plus, lengths, 2, 0.5, true);
  const double numeric = (a_plus.sum() - a.detach().sum()).item<double>() / eps;
  CHECK(v.grad()[3][5].item<double>() == doctest::Approx(numeric).epsilon(1e-3));
}

TEST_CASE("tiled attention equals the whole schedule: values and gradients, windows, several tiles, dropout") {
  // Lengths that cross the 64-query blocks and 256-key tiles (300: two
  // blocks' reach ends inside a second tile), with and without a window
  // narrower than a block, and a sequence shorter than one block.
  const std::vector<int64_t> lengths = {300, 7, 130, 1};
  int64_t tokens = 0;
  for (int64_t l : lengths) tokens += l;
  const int64_t heads = 2, hidden = 2 * 16;
  for (const int64_t window : {int64_t{-1}, int64_t{0}, int64_t{20}, int64_t{100}}) {
    for (const double p : {0.0, 0.3}) {
      CAPTURE(window);
      CAPTURE(p);
      at::manual_seed(21);
      const auto q0 = at::randn({tokens, hidden}), k0 = at::randn({tokens, hidden}), v0 = at::randn({tokens, hidden});
      const auto w = at::randn({tokens, hidden});
      auto grads = [&](ft::AttentionSchedule schedule) {
        auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
        at::manual_seed(5);  // the same dropout seed for both schedules
        auto out = ft::packed_attention(q, k, v, lengths, heads, p, true, {}, {}, window, schedule);
        (out * w).sum().backward();
        return std::vector<at::Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
      };
      const auto whole = grads(ft::AttentionSchedule::kWhole), tiled = grads(ft::AttentionSchedule::kTiled);
      for (size_t i = 0; i < whole.size(); ++i) {
        CAPTURE(i);
        CHECK((whole[i] - tiled[i]).abs().max().item<double>() < 1e-5);
      }
    }
  }
  // Dropout really is on in the tiled schedule: without it the output differs.
  at::manual_seed(21);
  const auto q = at::randn({tokens, hidden}), k = at::randn({tokens, hidden}), v = at::randn({tokens, hidden});
  at::manual_seed(5);
  const auto dropped = ft::packed_attention(q, k, v, lengths, heads, 0.3, true, {}, {}, -1, ft::AttentionSchedule::kTiled);
  const auto kept = ft::packed_attention(q, k, v, lengths, heads, 0.3, false, {}, {}, -1, ft::AttentionSchedule::kTiled);
  CHECK((dropped - kept).abs().max().item<double>() > 1e-2);
}

TEST_CASE("the tiled schedule against masked eager attention on one long sequence") {
  // 1 000 tokens: four tiles of keys per query block, the online softmax's
  // running maximum rescaled across them; the eager reference materialises
  // every score.
  at::manual_seed(31);
  const int64_t len = 1000, heads = 2, d = 8;
  for (const int64_t window : {int64_t{-1}, int64_t{64}}) {
    CAPTURE(window);
    auto q = (3 * at::randn({len, heads * d})).requires_grad_();  // large scores: the maximum moves between tiles
    auto k = at::randn({len, heads * d}).requires_grad_(), v = at::randn({len, heads * d}).requires_grad_();
    const auto w = at::randn({len, heads * d});
    auto out = ft::packed_attention(q, k, v, {len}, heads, 0.0, true, {}, {}, window, ft::AttentionSchedule::kTiled);
    (out * w).sum().backward();
    auto q2 = q.detach().clone().requires_grad_(), k2 = k.detach().clone().requires_grad_(),
         v2 = v.detach().clone().requires_grad_();
    auto split = [&](const at::Tensor& t) { return t.view({len, heads, d}).permute({1, 0, 2}); };
    const auto col = at::arange(len);
    const auto near = window < 0 ? at::ones({len, len}, at::kBool) : (col.unsqueeze(1) - col.unsqueeze(0)).abs().le(window);
    const auto mask = at::where(near, at::zeros({}), at::full({}, -std::numeric_limits<float>::infinity()));
    auto scores = at::matmul(split(q2), split(k2).transpose(-1, -2)) / std::sqrt(double(d)) + mask;
    auto ref = at::matmul(at::softmax(scores, -1), split(v2)).permute({1, 0, 2}).reshape({len, heads * d});
    (ref * w).sum().backward();
    CHECK((out - ref).abs().max().item<double>() < 1e-5);
    CHECK((q.grad() - q2.grad()).abs().max().item<double>() < 1e-4);
    CHECK((k.grad() - k2.grad()).abs().max().item<double>() < 1e-4);
    CHECK((v.grad() - v2.grad()).abs().max().item<double>() < 1e-5);
  }
}

namespace {

// A small DeBERTa-v3 (no absolute positions, a normalised table) whose rows
// reach past the buckets: distances from `buckets / 2` on share log-spaced
// rows, and past max_relative the table's edge rows.
ft::BertConfig deberta_config(const char* pos_att_type, int64_t buckets, int64_t max_relative) {
  auto c = ft::BertConfig::from_json_string(
      fmt::format(R"({{"model_type": "deberta-v2", "vocab_size": 100, "hidden_size": 32, "num_attention_heads": 2,
          "num_hidden_layers": 2, "intermediate_size": 48, "max_position_embeddings": 128, "type_vocab_size": 0,
          "relative_attention": true, "position_biased_input": false, "share_att_key": true,
          "norm_rel_ebd": "layer_norm", "pos_att_type": {}, "position_buckets": {},
          "max_relative_positions": {}, "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0}})",
                  pos_att_type, buckets, max_relative),
      "deberta/config.json");
  c.num_labels = 3;
  return c;
}

// Whether a node of `out`'s autograd graph has `name` in its name.
bool graph_has(const at::Tensor& out, const std::string& name) {
  std::vector<torch::autograd::Node*> todo = {out.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    if (n->name().find(name) != std::string::npos) return true;
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return false;
}

}  // namespace

TEST_CASE("DeBERTa's relative terms by blocks of the table equal Hugging Face's gather: logits and every gradient") {
  // 70 columns: three blocks of queries and keys, the last one short.
  const std::vector<int64_t> lengths = {70, 33, 1, 64, 50};
  struct Case {
    const char* pos_att_type;
    int64_t buckets, max_relative;
  };
  // 8 buckets to 64: rows step by one up to distance 3, then by less.
  // 16 buckets to 10: past distance 8 one step crosses several rows.
  for (const Case& k : {Case{R"(["c2p", "p2c"])", 8, 64}, Case{R"(["c2p", "p2c"])", 16, 10},
                        Case{R"(["c2p"])", 8, 64}, Case{R"(["p2c"])", 8, 64}, Case{R"(["p2c", "c2p"])", -1, 24}}) {
    CAPTURE(k.pos_att_type);
    CAPTURE(k.buckets);
    at::manual_seed(5);
    ft::EncoderModel model(deberta_config(k.pos_att_type, k.buckets, k.max_relative));
    {
      // Weights well above the initializer's 0.02, so that the relative
      // terms move the scores and each gradient by much more than 1e-5.
      torch::NoGradGuard no_grad;
      for (auto& p : model.parameters()) p.normal_(0.0, 0.3);
    }
    auto b = batch_of(lengths, 72);
    model.set_attention(ft::AttentionKernel::kEager);
    const Result reference = run(model, b, false);
    CHECK_FALSE(graph_has(model.forward(b), "BandedBias"));
    model.set_attention(ft::AttentionKernel::kAuto);
    for (const bool padding_free : {false, true}) {
      CAPTURE(padding_free);
      check_same(reference, run(model, b, padding_free), 1e-5);
      CHECK(graph_has(model.forward(b), "BandedBias"));
    }
    // A hole: kept tokens are no longer at their columns, and the packed
    // layout takes the gather.
    b.attention_mask[3][5] = 0;
    model.set_attention(ft::AttentionKernel::kEager);
    const Result holed = run(model, b, false);
    model.set_attention(ft::AttentionKernel::kAuto);
    check_same(holed, run(model, b, true), 1e-5);
    CHECK_FALSE(graph_has(model.forward(b), "BandedBias"));
    check_same(holed, run(model, b, false), 1e-5);
    CHECK(graph_has(model.forward(b), "BandedBias"));
  }
}

TEST_CASE("bf16 packed attention rounds where autocast rounds: values and gradients against an fp32 emulation") {
  // bf16 q, k, v (autocast's Linears) take the bf16 whole schedule: products
  // of bf16 operands with fp32 sums, the probabilities and s dS rounded to
  // bf16 as the products' operands, each result rounded once. The emulation
  // rounds at those points and nowhere else, so the kernel must match it to
  // the bit almost everywhere (the sums' order may flip a rounding) and
  // never by more than one bf16 step; the fp32 schedule on the same inputs
  // (no rounding of P) matches far fewer elements.
  const std::vector<int64_t> lengths = {5, 1, 70, 9};
  const int64_t heads = 2, d = 16, hidden = heads * d;
  int64_t tokens = 0;
  for (int64_t l : lengths) tokens += l;
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  for (const int64_t window : {int64_t{-1}, int64_t{3}}) {
    CAPTURE(window);
    at::manual_seed(31);
    const auto q0 = at::randn({tokens, hidden}).to(at::kBFloat16), k0 = at::randn({tokens, hidden}).to(at::kBFloat16),
               v0 = at::randn({tokens, hidden}).to(at::kBFloat16), w = at::randn({tokens, hidden}).to(at::kBFloat16);
    auto run_kernel = [&](at::ScalarType dtype) {
      auto q = q0.to(dtype, false, true).requires_grad_(), k = k0.to(dtype, false, true).requires_grad_(),
           v = v0.to(dtype, false, true).requires_grad_();
      auto out = ft::packed_attention(q, k, v, lengths, heads, 0.0, true, {}, {}, window, ft::AttentionSchedule::kWhole);
      CHECK((out.scalar_type() == dtype));
      (out.to(at::kFloat) * w.to(at::kFloat)).sum().backward();
      return std::vector<at::Tensor>{out.detach().to(at::kFloat), q.grad().to(at::kFloat), k.grad().to(at::kFloat),
                                     v.grad().to(at::kFloat)};
    };
    const auto got = run_kernel(at::kBFloat16), fp32 = run_kernel(at::kFloat);
    std::vector<at::Tensor> want(4);
    for (auto& t : want) t = at::zeros({tokens, hidden});
    int64_t off = 0;
    for (int64_t len : lengths) {
      const auto near = (at::arange(len).unsqueeze(1) - at::arange(len).unsqueeze(0)).abs().le(window < 0 ? len : window);
      for (int64_t h = 0; h < heads; ++h) {
        auto slice = [&](const at::Tensor& t) { return t.to(at::kFloat).narrow(0, off, len).narrow(1, h * d, d); };
        const auto q = slice(q0), k = slice(k0), v = slice(v0), g = slice(w);
        const auto p = at::softmax((q.mm(k.t()) * s).masked_fill(near.logical_not(), -INFINITY), 1);
        const auto pb = p.to(at::kBFloat16).to(at::kFloat);
        const auto dp = g.mm(v.t());
        const auto dsb = (p * (dp - (dp * p).sum(1, true)) * s).to(at::kBFloat16).to(at::kFloat);
        const at::Tensor parts[] = {pb.mm(v), dsb.mm(k), dsb.t().mm(q), pb.t().mm(g)};
        for (size_t i = 0; i < 4; ++i) want[i].narrow(0, off, len).narrow(1, h * d, d).copy_(parts[i]);
      }
      off += len;
    }
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);  // out, dq, dk, dv
      const auto rounded = want[i].to(at::kBFloat16).to(at::kFloat);
      const auto fp32_rounded = fp32[i].to(at::kBFloat16).to(at::kFloat);
      if (!ft::bf16_attention_available()) {  // the fp32 schedule, its results cast to bf16
        CHECK(got[i].equal(fp32_rounded));
        continue;
      }
      const auto diff = (got[i] - rounded).abs();
      CHECK(diff.le(rounded.abs() / 128).all().item<bool>());
      CHECK(diff.eq(0).to(at::kFloat).mean().item<double>() > 0.99);
      CHECK((fp32_rounded - rounded).abs().eq(0).to(at::kFloat).mean().item<double>() < 0.95);
    }
  }
  if (!ft::bf16_attention_available())
    MESSAGE("oneDNN's bf16 products do not run in this process: bf16 attention widens to fp32 (checked that instead)");
  // Dropout: the same mask as the fp32 schedule (same seed and counters),
  // within bf16's rounding of its output; and really applied.
  at::manual_seed(32);
  const auto q = at::randn({tokens, hidden}), k = at::randn({tokens, hidden}), v = at::randn({tokens, hidden});
  auto dropped = [&](at::ScalarType dtype, bool train) {
    at::manual_seed(6);
    return ft::packed_attention(q.to(dtype), k.to(dtype), v.to(dtype), lengths, heads, 0.3, train, {}, {}, -1,
                                ft::AttentionSchedule::kWhole)
        .to(at::kFloat);
  };
  const auto bf16 = dropped(at::kBFloat16, true);
  CHECK((bf16 - dropped(at::kFloat, true)).abs().max().item<double>() < 3e-2);
  CHECK((bf16 - dropped(at::kBFloat16, false)).abs().max().item<double>() > 1e-1);
}
