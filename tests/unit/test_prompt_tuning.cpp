// Prompt and prefix tuning (PEFT's PROMPT_TUNING / PREFIX_TUNING) in the
// model: names, units, the parameter formulas, what trains, prompt tuning
// against the plain model on the same tokens, prefix tuning against a
// reference written here from HF BERT's and PEFT's definitions (PEFT's
// [P, layers x 2 x hidden] table, get_prompt's view/permute/split), and
// padding-free (packed, per-sequence attention) against padded execution.
// The runs under every strategy are in test_prompt_runs.cpp.
#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "ft/model/model.h"
#include "ft/model/packed_attention.h"
#include "ft/model/prompt_learning.h"
#include "ft/model/token_layout.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft_small_model.h"
#include "ft_test.h"

namespace {

ft::PromptLearning method(ft::PromptMethod kind, int64_t length) {
  ft::PromptLearning p;
  p.method = kind;
  p.length = length;
  return p;
}

// small_config with weights ~15x larger than BERT's initialisation: logits
// of order 1 that depend clearly on positions, prompts and prefixes (with
// std 0.02 they are ~0.005 and any variant would pass a 1e-5 test).
ft::BertConfig sensitive_config() {
  ft::BertConfig c = ft_test::small_config(2);
  c.initializer_range = 0.3;
  return c;
}

std::map<std::string, at::Tensor> by_name(const ft::EncoderModel& m) {
  std::map<std::string, at::Tensor> w;
  for (const auto& [n, t] : m.weights()) w[n] = t.detach();
  return w;
}

at::Tensor layer_norm(const at::Tensor& x, const std::map<std::string, at::Tensor>& w, const std::string& name,
                      double eps) {
  return at::layer_norm(x, {x.size(-1)}, w.at(name + ".weight"), w.at(name + ".bias"), eps);
}

at::Tensor linear(const at::Tensor& x, const std::map<std::string, at::Tensor>& w, const std::string& name) {
  return at::linear(x, w.at(name + ".weight"), w.at(name + ".bias"));
}

// HF's BertForSequenceClassification called as PEFT's
// PeftModelForSequenceClassification calls it for PREFIX_TUNING: the mask
// gets P ones in front, past_key_values comes from PEFT's table through
// get_prompt (view [B, P, 2L, heads, d], permute [2, 0, 3, 1, 4], split
// into (key, value) per layer), and BertEmbeddings numbers positions from
// past_key_values_length = P (`first_position`, to show that it matters).
// Padded, every position computed.
at::Tensor reference_prefix_logits(const std::map<std::string, at::Tensor>& w, const ft::BertConfig& c,
                                   const ft::Batch& b, const at::Tensor& table, int64_t first_position) {
  const int64_t rows = b.input_ids.size(0), seq = b.input_ids.size(1), p = table.size(0);
  const int64_t heads = c.num_attention_heads, d = c.hidden_size / heads, layers = c.num_hidden_layers;
  const at::Tensor past = table.unsqueeze(0).expand({rows, p, table.size(1)}).reshape({rows, p, 2 * layers, heads, d})
                              .permute({2, 0, 3, 1, 4});  // [2L, rows, heads, P, d]
  const at::Tensor mask = at::cat({at::ones({rows, p}), b.attention_mask.to(at::kFloat)}, 1);
  const at::Tensor additive = ((1.0 - mask) * std::numeric_limits<float>::lowest()).view({rows, 1, 1, p + seq});
  const at::Tensor positions = at::arange(first_position, first_position + seq, at::kLong).expand({rows, seq});
  at::Tensor x = at::embedding(w.at("bert.embeddings.word_embeddings.weight"), b.input_ids) +
                 at::embedding(w.at("bert.embeddings.position_embeddings.weight"), positions) +
                 at::embedding(w.at("bert.embeddings.token_type_embeddings.weight"), b.token_type_ids);
  x = layer_norm(x, w, "bert.embeddings.LayerNorm", c.layer_norm_eps);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string l = fmt::format("bert.encoder.layer.{}.", i);
    auto heads_of = [&](const at::Tensor& t) { return t.view({rows, seq, heads, d}).permute({0, 2, 1, 3}); };
    const at::Tensor q = heads_of(linear(x, w, l + "attention.self.query"));
    const at::Tensor k = at::cat({past[2 * i], heads_of(linear(x, w, l + "attention.self.key"))}, 2);
    const at::Tensor v = at::cat({past[2 * i + 1], heads_of(linear(x, w, l + "attention.self.value"))}, 2);
    const at::Tensor probs = at::softmax(at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(d)) + additive, -1);
    const at::Tensor context = at::matmul(probs, v).permute({0, 2, 1, 3}).reshape({rows, seq, c.hidden_size});
    const at::Tensor a = layer_norm(linear(context, w, l + "attention.output.dense") + x, w,
                                    l + "attention.output.LayerNorm", c.layer_norm_eps);
    const at::Tensor f = linear(at::gelu(linear(a, w, l + "intermediate.dense")), w, l + "output.dense");
    x = layer_norm(f + a, w, l + "output.LayerNorm", c.layer_norm_eps);
  }
  const at::Tensor pooled = at::tanh(linear(x.select(1, 0), w, "bert.pooler.dense"));
  return linear(pooled, w, "classifier");
}

// small_batch with row 1's column 0 and 3 masked: a packed layout keeps
// column 0 (the pooler reads it) without attending to it, so padding-free
// attention scatters into [rows, width] instead of running per sequence.
ft::Batch batch_with_hole() {
  ft::Batch b = ft_test::small_batch();
  b.attention_mask[1][0] = 0;
  b.attention_mask[1][3] = 0;
  return b;
}

at::Tensor logits(ft::EncoderModel& m, const ft::Batch& b, bool packed) {
  m.set_padding_free(packed);
  torch::NoGradGuard no_grad;
  return m.forward(b);
}

// Gradients of the cross-entropy loss for the virtual tokens, by name.
std::map<std::string, at::Tensor> virtual_token_grads(ft::EncoderModel& m, const ft::Batch& b,
                                                       bool packed) {
  m.set_padding_free(packed);
  for (auto& p : m.parameters()) p.mutable_grad() = at::Tensor();
  at::cross_entropy_loss(m.forward(b), b.labels).backward();
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m.named_parameters())
    if (ft::is_prompt_learning_param(item.key())) out[item.key()] = item.value().grad().clone();
  return out;
}

void check_close(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  INFO(what << ": max |diff| " << (got - want).abs().max().item<double>() << " of " << want.abs().max().item<double>());
  REQUIRE(got.sizes() == want.sizes());
  CHECK(at::allclose(got, want, 0.0, tol));
}

}  // namespace

TEST_CASE("prompt tuning: name, unit, formula, what trains") {
  at::manual_seed(1);
  ft::EncoderModel m(ft_test::small_config(2));
  const auto p = method(ft::PromptMethod::kPrompt, 3);
  ft::apply_prompt_learning(m, p, 42);
  CHECK(m.prompt_length() == 3);
  CHECK(m.prefix_length() == 0);
  int64_t count = 0;
  for (const auto& [n, t] : m.weights()) {
    if (!ft::is_prompt_learning_param(n)) continue;
    CHECK(n == "bert.embeddings.prompt_embeddings");
    CHECK(t.sizes() == at::IntArrayRef({3, 16}));
    count += t.numel();
  }
  CHECK(count == 3 * 16);  // P x hidden
  CHECK(ft::prompt_learning_parameter_count(ft_test::small_config(2), p) == 3 * 16);
  CHECK(m.unit_of("bert.embeddings.prompt_embeddings") == 0);  // sharded with the embeddings
  // random init: normal(0, initializer_range), the same for the same seed.
  const at::Tensor prompt = by_name(m).at("bert.embeddings.prompt_embeddings");
  CHECK(prompt.std().item<double>() > 0.005);
  CHECK(prompt.std().item<double>() < 0.05);
  at::manual_seed(1);
  ft::EncoderModel twin(ft_test::small_config(2));
  ft::apply_prompt_learning(twin, p, 42);
  CHECK(at::equal(by_name(twin).at("bert.embeddings.prompt_embeddings"), prompt));

  CHECK(ft::is_prompt_learning_trainable("bert.embeddings.prompt_embeddings", p));
  CHECK(ft::is_prompt_learning_trainable("classifier.weight", p));
  CHECK_FALSE(ft::is_prompt_learning_trainable("bert.pooler.dense.weight", p));  // PEFT leaves the pooler frozen
  CHECK_FALSE(ft::is_prompt_learning_trainable("bert.embeddings.word_embeddings.weight", p));
  auto no_head = p;
  no_head.train_head = false;
  CHECK_FALSE(ft::is_prompt_learning_trainable("classifier.bias", no_head));

  // vocab init: rows of the word embeddings.
  ft::EncoderModel v(ft_test::small_config(2));
  auto from_vocab = p;
  from_vocab.init = "vocab";
  ft::apply_prompt_learning(v, from_vocab, 7);
  const auto vw = by_name(v);
  for (int64_t r = 0; r < 3; ++r) {
    const at::Tensor row = vw.at("bert.embeddings.prompt_embeddings")[r];
    CHECK(at::eq(vw.at("bert.embeddings.word_embeddings.weight"), row).all(1).any().item<bool>());
  }
  CHECK(ft_test::error_of([&] { ft::apply_prompt_learning(v, p, 1); }).find("applied twice") != std::string::npos);

  // text init: PEFT's tokenizer(init_text) ids, [CLS] and [SEP] included,
  // repeated and cut to P.
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"};
  for (int i = 7; i < 50; ++i) tokens.push_back(fmt::format("t{}", i));
  const auto tokenizer = ft::WordPieceTokenizer::from_tokens(tokens);
  ft::EncoderModel t(ft_test::small_config(2));
  auto from_text = method(ft::PromptMethod::kPrompt, 6);
  from_text.init = "text";
  from_text.init_text = "Hello world";
  ft::apply_prompt_learning(t, from_text, 7, [&tokenizer](const std::string& text) {
    return tokenizer.encode(text, std::nullopt, 0, false).input_ids;
  });
  const auto tw = by_name(t);
  CHECK(at::equal(tw.at("bert.embeddings.prompt_embeddings"),
                  tw.at("bert.embeddings.word_embeddings.weight").index_select(0, at::tensor({2, 5, 6, 3, 2, 5}))));
  ft::EncoderModel no_tokenizer(ft_test::small_config(2));
  CHECK(ft_test::error_of([&] { ft::apply_prompt_learning(no_tokenizer, from_text, 7); })
            .find("prompt.init: text needs the run's tokenizer") == 0);
}

TEST_CASE("prefix tuning: names, units, formula, PEFT's table layout") {
  at::manual_seed(1);
  ft::EncoderModel m(ft_test::small_config(3));
  const auto p = method(ft::PromptMethod::kPrefix, 4);
  ft::apply_prompt_learning(m, p, 42);
  CHECK(m.prefix_length() == 4);
  int64_t count = 0;
  std::vector<std::string> names;
  for (const auto& [n, t] : m.weights()) {
    if (!ft::is_prompt_learning_param(n)) continue;
    names.push_back(n);
    CHECK(t.sizes() == at::IntArrayRef({4, 16}));
    count += t.numel();
  }
  CHECK(names.size() == 6u);
  CHECK(names[0] == "bert.encoder.layer.0.attention.self.prefix_key");
  CHECK(names[1] == "bert.encoder.layer.0.attention.self.prefix_value");
  CHECK(count == 4 * 3 * 2 * 16);  // P x layers x 2 x hidden
  CHECK(ft::prompt_learning_parameter_count(ft_test::small_config(3), p) == 4 * 3 * 2 * 16);
  CHECK(m.unit_of("bert.encoder.layer.2.attention.self.prefix_value") == 3);  // sharded with layer 2

  // PEFT's table: layer i's key in columns [2i h, (2i+1) h), value in [(2i+1) h, (2i+2) h).
  const auto w = by_name(m);
  const at::Tensor table = ft::prefix_to_peft(m.weights(), 3);
  CHECK(table.sizes() == at::IntArrayRef({4, 96}));
  CHECK(at::equal(table.narrow(1, 4 * 16, 16), w.at("bert.encoder.layer.2.attention.self.prefix_key")));
  CHECK(at::equal(table.narrow(1, 3 * 16, 16), w.at("bert.encoder.layer.1.attention.self.prefix_value")));
  const auto back = ft::prefix_from_peft(table, 3, "test", "bert.");
  REQUIRE(back.size() == 6u);
  for (const auto& [n, t] : back) CHECK(at::equal(t, w.at(n)));
  // The init is PEFT's (torch.nn.Embedding's) normal(0, 1).
  CHECK(std::abs(table.std().item<double>() - 1.0) < 0.2);
  CHECK(ft_test::error_of([] { ft::prefix_from_peft(at::zeros({4, 95}), 3, "f.safetensors", "bert."); })
            .find("f.safetensors: the prefix table is 4x95") == 0);
}

TEST_CASE("prompt tuning with the prompt set to tokens' embeddings equals the plain model on those tokens") {
  at::manual_seed(3);
  ft::EncoderModel plain(sensitive_config());
  plain.eval();
  ft::EncoderModel prompted(sensitive_config());
  prompted.load_weights(plain.weights(), "test");
  prompted.eval();
  const at::Tensor tokens = at::tensor({11, 23, 5}, at::kLong);  // t1..tP
  prompted.add_prompt_embeddings(by_name(plain).at("bert.embeddings.word_embeddings.weight").index_select(0, tokens));

  for (const ft::Batch& b : {ft_test::small_batch(), batch_with_hole()}) {
    // The plain model reads [t1..tP, CLS, ..., SEP]: t at positions 0..P-1,
    // attended, type 0, and its pooler reads t1, as PEFT's model does.
    ft::Batch joined = b;
    joined.input_ids = at::cat({tokens.view({1, 3}).expand({4, 3}), b.input_ids}, 1);
    joined.attention_mask = at::cat({at::ones({4, 3}, at::kLong), b.attention_mask}, 1);
    joined.token_type_ids = at::cat({at::zeros({4, 3}, at::kLong), b.token_type_ids}, 1);
    const at::Tensor want = logits(plain, joined, /*packed=*/false);
    CHECK(want.abs().max().item<double>() > 0.5);
    check_close(logits(prompted, b, false), want, 1e-5, "padded");
    check_close(logits(prompted, b, true), want, 1e-5, "padding-free");
    check_close(logits(plain, joined, true), want, 1e-5, "plain padding-free");
    // The pooler reads t1: the plain model on [CLS, ..., SEP] alone differs.
    CHECK((logits(plain, b, false) - want).abs().max().item<double>() > 1e-2);
  }
  // The prompt matters: another prompt, other logits.
  ft::EncoderModel other(sensitive_config());
  other.load_weights(plain.weights(), "test");
  other.eval();
  ft::apply_prompt_learning(other, method(ft::PromptMethod::kPrompt, 3), 5);
  CHECK((logits(other, ft_test::small_batch(), false) - logits(prompted, ft_test::small_batch(), false))
            .abs().max().item<double>() > 1e-2);
}

TEST_CASE("prefix tuning equals the reference built from HF BERT and PEFT's get_prompt, padded and padding-free") {
  at::manual_seed(5);
  ft::EncoderModel m(sensitive_config());
  m.eval();
  ft::apply_prompt_learning(m, method(ft::PromptMethod::kPrefix, 3), 9);
  const at::Tensor table = ft::prefix_to_peft(m.weights(), 2);
  const auto w = by_name(m);
  for (const ft::Batch& b : {ft_test::small_batch(), batch_with_hole()}) {
    const at::Tensor want = reference_prefix_logits(w, m.config(), b, table, /*first_position=*/3);
    CHECK(want.abs().max().item<double>() > 0.5);
    check_close(logits(m, b, false), want, 1e-5, "padded");
    check_close(logits(m, b, true), want, 1e-5, "padding-free");
    // What the reference pins down: positions from P, and keys before values in each layer's pair.
    CHECK((reference_prefix_logits(w, m.config(), b, table, 0) - want).abs().max().item<double>() > 1e-2);
    const at::Tensor swapped = at::cat({table.narrow(1, 16, 16), table.narrow(1, 0, 16), table.narrow(1, 32, 32)}, 1);
    CHECK((reference_prefix_logits(w, m.config(), b, swapped, 3) - want).abs().max().item<double>() > 1e-2);
  }
  // Without the prefix the logits differ.
  ft::EncoderModel plain(sensitive_config());
  plain.load_weights(ft::without_prompt_learning(m.weights()), "test");
  plain.eval();
  CHECK((logits(plain, ft_test::small_batch(), false) - logits(m, ft_test::small_batch(), false))
            .abs().max().item<double>() > 1e-2);
}

TEST_CASE("padding-free and padded give the same virtual-token gradients") {
  // small_batch is right-padded: padding-free attention runs per sequence
  // (the packed kernel with the prefix in front of each sequence's keys);
  // under prefix tuning the batch with a hole scatters into [rows, width].
  const at::Tensor mask = ft_test::small_batch().attention_mask;
  CHECK_FALSE(ft::TokenLayout::packed(mask).sequence_lengths.empty());
  CHECK(ft::TokenLayout::packed(batch_with_hole().attention_mask).sequence_lengths.empty());
  for (auto kind : {ft::PromptMethod::kPrompt, ft::PromptMethod::kPrefix}) {
    at::manual_seed(2);
    ft::EncoderModel m(sensitive_config());
    ft::apply_prompt_learning(m, method(kind, 3), 4);
    for (const ft::Batch& b : {ft_test::small_batch(), batch_with_hole()}) {
      const auto padded = virtual_token_grads(m, b, false);
      const auto packed = virtual_token_grads(m, b, true);
      REQUIRE(padded.size() == (kind == ft::PromptMethod::kPrompt ? 1u : 4u));
      for (const auto& [n, g] : padded) {
        const double scale = g.abs().max().item<double>();
        CHECK(scale > 1e-4);  // the loss does reach it
        check_close(packed.at(n), g, 1e-5 * std::max(1.0, scale), n);
      }
    }
  }
}

TEST_CASE("the prefix in packed attention: per-sequence kernel against the padded product") {
  // Two sequences of 3 and 5 tokens, 2 heads of 4, a prefix of 2.
  at::manual_seed(11);
  const std::vector<int64_t> lengths = {3, 5};
  const at::Tensor q = at::randn({8, 8}).requires_grad_(), k = at::randn({8, 8}).requires_grad_(),
                   v = at::randn({8, 8}).requires_grad_();
  const at::Tensor pk = at::randn({2, 8}).requires_grad_(), pv = at::randn({2, 8}).requires_grad_();
  const at::Tensor out = ft::packed_attention(q, k, v, lengths, 2, 0.0, false, pk, pv);
  std::vector<at::Tensor> want;
  int64_t offset = 0;
  for (int64_t len : lengths) {
    auto heads = [](const at::Tensor& t) { return t.view({t.size(0), 2, 4}).transpose(0, 1); };
    const at::Tensor qs = heads(q.narrow(0, offset, len));
    const at::Tensor ks = heads(at::cat({pk, k.narrow(0, offset, len)}));
    const at::Tensor vs = heads(at::cat({pv, v.narrow(0, offset, len)}));
    want.push_back(at::matmul(at::softmax(at::matmul(qs, ks.transpose(1, 2)) / 2.0, -1), vs).transpose(0, 1).reshape({len, 8}));
    offset += len;
  }
  const at::Tensor reference = at::cat(want);
  check_close(out, reference, 1e-5, "forward");
  const at::Tensor w = at::randn({8, 8});
  const auto got = torch::autograd::grad({(out * w).sum()}, {q, k, v, pk, pv});
  const auto ref = torch::autograd::grad({(reference * w).sum()}, {q, k, v, pk, pv});
  for (size_t i = 0; i < got.size(); ++i) check_close(got[i], ref[i], 1e-5, fmt::format("grad {}", i));
}

TEST_CASE("virtual tokens must fit max_position_embeddings") {
  ft::EncoderModel m(ft_test::small_config(2));  // 32 positions
  ft::apply_prompt_learning(m, method(ft::PromptMethod::kPrefix, 25), 1);
  const std::string err = ft_test::error_of([&] { logits(m, ft_test::small_batch(), false); });
  CHECK(err.find("8 tokens after 25 virtual tokens (prompt or prefix tuning) need 33 positions, but "
                 "the model has 32") == 7);
  CHECK(ft_test::error_of([&] {
          ft::check_prompt_positions(m.config(), method(ft::PromptMethod::kPrompt, 20), 16);
        }) == "prompt.length: 20 virtual tokens + data.max_seq_len 16 need 36 positions, but the model has "
              "32; lower data.max_seq_len to 12 or prompt.length");
}
