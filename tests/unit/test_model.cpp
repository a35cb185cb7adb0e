#include <array>
#include <map>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ft/base/error.h"
#include "ft/model/fused_ops.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_test.h"

namespace {

ft::BertConfig tiny_config() {
  auto c = ft::BertConfig::preset("tiny");
  c.vocab_size = 100;
  c.num_labels = 3;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  return c;
}

}  // namespace

TEST_CASE("every Linear (oneDNN's sgemm on fp32 CPU) gives at::linear's values and gradients, and leaves its bias alone") {
  for (bool with_bias : {true, false}) {
    for (int64_t rows : {1, 7}) {
      CAPTURE(with_bias);
      CAPTURE(rows);
      at::manual_seed(3);
      ft::AdaptableLinear linear(24, 40, with_bias);
      if (with_bias) {
        torch::NoGradGuard no_grad;
        linear->bias.uniform_(-1, 1);
      }
      const at::Tensor bias_before = with_bias ? linear->bias.clone() : at::Tensor();
      // One row (the classifier at batch 1) and rows of a [batch, seq, hidden] input.
      const at::Tensor x = rows == 1 ? at::randn({1, 24}) : at::randn({rows, 3, 24});
      std::vector<int64_t> out_sizes = x.sizes().vec();
      out_sizes.back() = 40;
      {
        torch::NoGradGuard no_grad;  // inference: no autograd node
        const at::Tensor y = linear->forward(x);
        CHECK(y.sizes() == at::IntArrayRef(out_sizes));
        CHECK(at::allclose(y, at::linear(x, linear->weight, linear->bias), 1e-5, 1e-6));
        if (with_bias) CHECK(at::equal(linear->bias, bias_before));
      }
      const at::Tensor xg = x.clone().requires_grad_(true);
      const at::Tensor probe = at::randn(out_sizes);
      (linear->forward(xg) * probe).sum().backward();
      const at::Tensor xr = x.clone().requires_grad_(true);
      const at::Tensor w = linear->weight.detach().clone().requires_grad_(true);
      const at::Tensor b = with_bias ? linear->bias.detach().clone().requires_grad_(true) : at::Tensor();
      (at::linear(xr, w, b) * probe).sum().backward();
      CHECK(at::allclose(xg.grad(), xr.grad(), 1e-5, 1e-6));
      CHECK(at::allclose(linear->weight.grad(), w.grad(), 1e-5, 1e-6));
      if (with_bias) CHECK(at::allclose(linear->bias.grad(), b.grad(), 1e-5, 1e-6));
      // A frozen weight (LoRA) asks for the input's gradient alone.
      linear->weight.set_requires_grad(false);
      const at::Tensor xf = x.clone().requires_grad_(true);
      (linear->forward(xf) * probe).sum().backward();
      CHECK(at::allclose(xf.grad(), xr.grad(), 1e-5, 1e-6));
    }
  }
}

TEST_CASE("fused GeGLU and rotary q/k/v give LibTorch's values and gradients") {
  at::manual_seed(11);
  // GeGLU: 13 and 24 outputs per row (a tail of 5 lanes, whole blocks), rows of 2 and 3 dimensions.
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{5, 26}, std::vector<int64_t>{3, 2, 48}}) {
    CAPTURE(sizes.back());
    const at::Tensor x = at::randn(sizes) * 2.5;
    const at::Tensor xf = x.clone().requires_grad_(true), xr = x.clone().requires_grad_(true);
    const at::Tensor y = ft::geglu(xf);
    const auto halves = xr.chunk(2, -1);
    const at::Tensor ref = at::gelu(halves[0]) * halves[1];
    REQUIRE(y.sizes() == ref.sizes());
    CHECK(at::allclose(y, ref, 1e-5, 1e-6));
    const at::Tensor probe = at::randn(ref.sizes());
    (y * probe).sum().backward();
    (ref * probe).sum().backward();
    CHECK(at::allclose(xf.grad(), xr.grad(), 1e-5, 1e-6));
    torch::NoGradGuard no_grad;
    CHECK(at::allclose(ft::geglu(x), ref, 1e-5, 1e-6));
  }
  // Rotary: 7 tokens, 3 heads of 8, each token its own angles.
  const int64_t t = 7, heads = 3, d = 8, half = d / 2;
  const at::Tensor qkv = at::randn({t, 3, heads, d});
  const at::Tensor angle = at::rand({t, d}) * 6.0;
  const at::Tensor cos = angle.cos(), sin = angle.sin();
  auto rotate = [&](const at::Tensor& x) {  // x [T, heads, d], by the definition
    const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
    return (x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)).reshape({t, heads * d});
  };
  for (int used = 1; used <= 3; ++used) {  // only q used, q and k, all three: unused outputs have no gradient
    CAPTURE(used);
    const at::Tensor in = qkv.clone().requires_grad_(true), inr = qkv.clone().requires_grad_(true);
    const auto out = ft::rotary_qkv(in, cos, sin);
    const std::array<at::Tensor, 3> ref{rotate(inr.select(1, 0)), rotate(inr.select(1, 1)),
                                        inr.select(1, 2).reshape({t, heads * d})};
    at::Tensor loss = at::zeros({}), loss_ref = at::zeros({});
    for (int i = 0; i < 3; ++i) {
      CHECK(out[i].is_contiguous());
      CHECK(at::allclose(out[i], ref[i], 1e-5, 1e-6));
      if (i >= used) continue;
      const at::Tensor probe = at::randn({t, heads * d});
      loss = loss + (out[i] * probe).sum();
      loss_ref = loss_ref + (ref[i] * probe).sum();
    }
    loss.backward();
    loss_ref.backward();
    CHECK(at::allclose(in.grad(), inr.grad(), 1e-5, 1e-6));
  }
}

TEST_CASE("parameter names are Hugging Face's, in model order") {
  ft::EncoderModel model(tiny_config());
  auto w = model.weights();
  REQUIRE(w.size() == 5 + 16 * 2 + 2 + 2);
  CHECK(w.front().first == "bert.embeddings.word_embeddings.weight");
  CHECK(w[5].first == "bert.encoder.layer.0.attention.self.query.weight");
  CHECK(w[w.size() - 4].first == "bert.pooler.dense.weight");
  CHECK(w.back().first == "classifier.bias");
  CHECK(model.num_units() == 4);
  CHECK(model.unit_of("bert.encoder.layer.1.output.dense.bias") == 2);
  CHECK(model.unit_of("classifier.weight") == 3);
  auto units = model.unit_parameters();
  CHECK(units[0].size() == 5);
  CHECK(units[3].size() == 4);
  CHECK(model.unit(3)->parameters().size() == 4);
}

TEST_CASE("HF init: padding row zero, LayerNorm ones, biases zero, weights ~N(0, 0.02)") {
  at::manual_seed(7);
  ft::EncoderModel model(tiny_config());
  // By name, and every name must exist: a renamed parameter fails here instead of skipping its checks.
  const ft::TensorList weights = model.weights();
  std::map<std::string, at::Tensor> w(weights.begin(), weights.end());
  for (const char* name : {"bert.embeddings.word_embeddings.weight", "bert.embeddings.LayerNorm.weight", "classifier.bias",
                           "classifier.weight"}) {
    INFO(name);
    REQUIRE(w.count(name) == 1);
  }
  const at::Tensor word = w.at("bert.embeddings.word_embeddings.weight");
  CHECK(word[0].abs().sum().item<double>() == 0.0);
  CHECK(std::abs(word.slice(0, 1).std().item<double>() - 0.02) < 0.002);
  CHECK(w.at("bert.embeddings.LayerNorm.weight").eq(1).all().item<bool>());
  CHECK(w.at("classifier.bias").eq(0).all().item<bool>());
  CHECK(std::abs(w.at("classifier.weight").std().item<double>() - 0.02) < 0.005);
}

TEST_CASE("padding positions do not change unmasked outputs") {
  at::manual_seed(3);
  ft::EncoderModel model(tiny_config());
  model.eval();
  torch::NoGradGuard ng;
  ft::Batch a;
  a.input_ids = at::tensor({2, 5, 7, 3}, at::kLong).view({1, 4});
  a.attention_mask = at::ones({1, 4}, at::kLong);
  a.token_type_ids = at::zeros({1, 4}, at::kLong);
  ft::Batch b;
  b.input_ids = at::tensor({2, 5, 7, 3, 9, 9}, at::kLong).view({1, 6});
  b.attention_mask = at::tensor({1, 1, 1, 1, 0, 0}, at::kLong).view({1, 6});
  b.token_type_ids = at::zeros({1, 6}, at::kLong);
  CHECK(at::allclose(model.forward(a), model.forward(b), 1e-5, 1e-6));
}

TEST_CASE("load_weights names the missing tensor and the shape mismatch") {
  ft::EncoderModel model(tiny_config());
  auto w = model.weights();
  auto missing = ft::TensorList(w.begin() + 1, w.end());
  CHECK_THROWS_WITH_AS(model.load_weights(missing, "x.safetensors"),
                       doctest::Contains("missing tensor 'bert.embeddings.word_embeddings.weight'"), ft::Error);
  auto bad = w;
  bad.back().second = at::zeros({7});
  CHECK_THROWS_WITH_AS(model.load_weights(bad, "x.safetensors"), doctest::Contains("classifier.bias' has shape 7"),
                       ft::Error);
  auto extra = w;
  extra.emplace_back("bert.something.else", at::zeros({1}));
  CHECK_THROWS_WITH_AS(model.load_weights(extra, "x.safetensors"), doctest::Contains("unexpected tensor"), ft::Error);
  // DDP-style "module." prefixes and HF's position_ids buffer are accepted.
  auto prefixed = w;
  for (auto& [name, t] : prefixed) name = "module." + name;
  prefixed.emplace_back("bert.embeddings.position_ids", at::arange(512));
  CHECK_NOTHROW(model.load_weights(prefixed, "x.safetensors"));
}

TEST_CASE("config.json: HF fields, id2label, validation naming the key") {
  auto c = ft::BertConfig::from_json_string(
      R"({"vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 16, "id2label": {"0": "neg", "1": "pos"}, "torch_dtype": "float32"})",
      "c.json");
  CHECK(c.num_labels == 2);
  CHECK(c.id2label == std::vector<std::string>{"neg", "pos"});
  auto round = ft::BertConfig::from_json_string(c.to_json(), "round");
  CHECK(round.hidden_size == 8);
  CHECK(round.id2label == c.id2label);
  CHECK(round.to_json().find("\"torch_dtype\": \"float32\"") != std::string::npos);
  CHECK_THROWS_WITH_AS(ft::BertConfig::from_json_string(R"({"hidden_size": 10, "num_attention_heads": 3})", "c.json"),
                       doctest::Contains("hidden_size 10 is not divisible by num_attention_heads 3"), ft::Error);
  CHECK_THROWS_WITH_AS(ft::BertConfig::from_json_string(R"({"hidden_size": "big"})", "c.json"),
                       doctest::Contains("c.json: key 'hidden_size' has the wrong type"), ft::Error);
}

TEST_CASE("logits of batch 0 match the PyTorch reference") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const auto dir = ft_test::shared_dir() / "fixtures/parity-tiny";
  auto config = ft::BertConfig::from_json_file((dir / "config.json").string());
  ft::EncoderModel model(config);
  model.load_weights(ft::safetensors::load((dir / "model.safetensors").string()), "fixture");
  ft::TensorList data = ft::safetensors::load((dir / "data.safetensors").string());
  ft::Batch batch;
  for (auto& [name, t] : data) {
    if (name == "input_ids") batch.input_ids = t.slice(0, 0, 32);
    if (name == "attention_mask") batch.attention_mask = t.slice(0, 0, 32);
    if (name == "token_type_ids") batch.token_type_ids = t.slice(0, 0, 32);
  }
  auto ref = ft::safetensors::load((dir / "ref_logits_step0.safetensors").string()).at(0).second;
  torch::NoGradGuard ng;
  auto logits = model.forward(batch);
  REQUIRE(logits.sizes() == ref.sizes());
  CHECK((logits - ref).abs().max().item<double>() < 1e-4);
}
