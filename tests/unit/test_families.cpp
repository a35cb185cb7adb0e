// The encoder families beside BERT (RoBERTa, XLM-RoBERTa, ELECTRA, DistilBERT,
// DeBERTa-v2/v3, ModernBERT) against
// transformers itself: tiny random-init models that transformers built,
// saved, ran and trained (scripts/hf-family-fixtures.py; files and versions
// in tests/data/hf/README.md). No Python runs here.
#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_run.h"
#include "ft_trainer_fixture.h"

namespace fsys = std::filesystem;

namespace {

const char* const kFamilies[] = {"roberta", "xlm-roberta", "electra", "distilbert", "deberta-v2", "modernbert"};

fsys::path family_dir(const std::string& name) { return ft_test::source_dir() / "tests/data/hf/families" / name; }

std::map<std::string, at::Tensor> reference(const std::string& name) {
  std::map<std::string, at::Tensor> out;
  for (auto& [n, t] : ft::safetensors::load((family_dir(name) / "reference.safetensors").string())) out[n] = t;
  return out;
}

std::unique_ptr<ft::EncoderModel> load_family(const std::string& name) {
  const auto config = ft::BertConfig::from_json_file((family_dir(name) / "config.json").string());
  auto model = std::make_unique<ft::EncoderModel>(config);
  const auto report =
      model->load_weights(ft::read_model_weights(family_dir(name).string()), name, ft::EncoderModel::LoadOptions{});
  CHECK(report.loaded == static_cast<int64_t>(model->parameters().size()));
  CHECK(report.ignored.empty());
  return model;
}

ft::Batch batch_of(std::map<std::string, at::Tensor>& ref) {
  ft::Batch b;
  b.input_ids = ref.at("input_ids");
  b.attention_mask = ref.at("attention_mask");
  b.token_type_ids = ref.at("token_type_ids");
  b.labels = ref.at("labels");
  return b;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("RoBERTa-family config.json: the family, its defaults and its names") {
  const auto c = ft::BertConfig::from_json_file((family_dir("xlm-roberta") / "config.json").string());
  CHECK(c.model_type == "xlm-roberta");
  CHECK(c.pad_token_id == 1);
  CHECK(c.type_vocab_size == 1);
  CHECK(c.max_tokens() == c.max_position_embeddings - 2);  // positions start after the padding row
  const auto written = nlohmann::json::parse(c.to_json());
  CHECK(written.at("model_type") == "xlm-roberta");
  CHECK(written.at("architectures") == nlohmann::json::array({"XLMRobertaForSequenceClassification"}));
  ft::EncoderModel m(c);
  std::vector<std::string> names;
  for (const auto& [n, t] : m.weights()) names.push_back(n);
  CHECK(names.front() == "roberta.embeddings.word_embeddings.weight");
  const std::vector<std::string> head(names.end() - 4, names.end());
  CHECK(head == std::vector<std::string>{"classifier.dense.weight", "classifier.dense.bias", "classifier.out_proj.weight",
                                         "classifier.out_proj.bias"});
  CHECK(m.unit_of("roberta.encoder.layer.1.output.dense.weight") == 2);
  CHECK(m.unit_of("classifier.out_proj.weight") == 3);
}

TEST_CASE("unknown model_type and unsupported keys: one line naming them") {
  CHECK(ft_test::error_of([] { ft::BertConfig::from_json_string(R"({"model_type": "gpt2"})", "x/config.json"); }) ==
        "x/config.json: model_type 'gpt2' is not supported; ft builds bert, roberta, xlm-roberta, camembert, electra, distilbert, "
        "deberta-v2, modernbert");
  CHECK(ft_test::error_of([] {
          ft::BertConfig::from_json_string(R"({"model_type": "roberta", "position_embedding_type": "relative_key"})",
                                           "x/config.json");
        }) == "x/config.json: position_embedding_type \"relative_key\" is not supported; ft builds absolute position "
              "embeddings");
  CHECK(ft_test::error_of([] {
          ft::BertConfig::from_json_string(R"({"model_type": "roberta", "is_decoder": true})", "x/config.json");
        }) == "x/config.json: is_decoder is true; ft fine-tunes encoders only (set it false or drop it)");
}

TEST_CASE("RoBERTa, XLM-R, ELECTRA, DistilBERT, DeBERTa-v3 and ModernBERT logits match transformers within 1e-5, padded and padding-free") {
  for (const std::string name : kFamilies) {
    INFO(name);
    auto model = load_family(name);
    auto ref = reference(name);
    model->eval();
    torch::NoGradGuard no_grad;
    const ft::Batch b = batch_of(ref);
    const at::Tensor want = ref.at("logits");
    // Rows are padded (the batch is as long as its longest row): padding matters.
    REQUIRE(b.attention_mask.sum().item<int64_t>() < b.attention_mask.numel());
    for (bool padding_free : {true, false}) {
      model->set_padding_free(padding_free);
      const at::Tensor got = model->forward(b);
      INFO("padding_free=" << padding_free);
      REQUIRE(got.sizes() == want.sizes());
      CHECK(max_diff(got, want) < 1e-5);
      CHECK(max_diff(got[0], got[40]) > 1e-3);  // an IMDB review and a Weibo post differ well beyond it
    }
    // The tiled schedule (long inputs) on the same rows, padding-free.
    model->set_padding_free(true);
    model->set_attention(ft::AttentionKernel::kTiled);
    CHECK(max_diff(model->forward(b), want) < 1e-5);
    model->set_attention(ft::AttentionKernel::kAuto);
    // The hidden states (ft predict --task feature-extraction): one row per position, without
    // DeBERTa's relative table that rides below the tokens.
    const at::Tensor h = model->last_hidden_state(b);
    CHECK(h.sizes() == at::IntArrayRef({b.input_ids.size(0), b.input_ids.size(1), model->config().hidden_size}));
    CHECK(h.isfinite().all().item<bool>());
  }
}

TEST_CASE("RoBERTa, XLM-R, ELECTRA, DistilBERT, DeBERTa-v3 and ModernBERT: one step's loss and every parameter's gradient match transformers (1e-4 relative)") {
  // auto runs the whole schedule on these rows; tiled is the long-input one.
  for (const auto kind : {ft::AttentionKernel::kAuto, ft::AttentionKernel::kTiled})
  for (const std::string name : kFamilies) {
    INFO(name << ", attention " << static_cast<int>(kind));
    auto model = load_family(name);
    model->set_attention(kind);
    auto ref = reference(name);
    model->train();  // dropout is 0 in the fixture's config
    const ft::Batch b = batch_of(ref);
    const at::Tensor loss = at::cross_entropy_loss(model->forward(b), b.labels);
    CHECK(std::abs(loss.item<double>() - ref.at("loss").item<double>()) < 1e-6);
    loss.backward();
    int compared = 0;
    for (const auto& item : model->named_parameters()) {
      const std::string key = "grad." + item.key();
      INFO(item.key());
      REQUIRE(ref.count(key));
      const at::Tensor& got = item.value().grad();
      REQUIRE(got.defined());
      const at::Tensor& want = ref.at(key);
      // The floor is for the attention keys' biases: softmax ignores them, so
      // both gradients are rounding noise (~1e-9) around an exact zero.
      const double scale = want.norm().item<double>();
      CHECK((got - want).norm().item<double>() <= 1e-4 * scale + 1e-7);
      ++compared;
    }
    // Every gradient transformers has, ft has: none is left unchecked.
    int want_count = 0;
    for (const auto& [k, t] : ref) want_count += k.rfind("grad.", 0) == 0;
    CHECK(compared == want_count);
    CHECK(compared == static_cast<int>(model->parameters().size()));
  }
}

namespace {

void check_trainer_trajectory(const std::string& name, const std::string& flags) {
  ft_test::check_trainer_trajectory(family_dir(name), flags, 5e-2);
}

const char* const kStrategies[] = {
    "--strategy single --set train.batch_size=16",
    "--strategy dp --set strategy.options.replicas=2 --set train.batch_size=16",
    "--strategy ddp --nproc 2 --set train.batch_size=8",
    "--strategy horovod --nproc 2 --set train.batch_size=8",
    "--strategy zero1 --nproc 2 --set train.batch_size=8",
    "--strategy zero2 --nproc 2 --set train.batch_size=8",
    "--strategy zero3 --nproc 2 --set train.batch_size=8",
    "--strategy fsdp --nproc 2 --set train.batch_size=8",
    "--strategy pipeline --nproc 2 --set train.batch_size=16",
    "--strategy tensor --nproc 2 --set train.batch_size=16",
};

}  // namespace

TEST_CASE("8 steps of transformers.Trainer on RoBERTa: ft matches within 1e-4 under every fp32 strategy") {
  for (const char* flags : kStrategies) check_trainer_trajectory("roberta", flags);
}

TEST_CASE("8 steps of transformers.Trainer on XLM-R: ft matches within 1e-4 under every fp32 strategy") {
  for (const char* flags : kStrategies) check_trainer_trajectory("xlm-roberta", flags);
}

TEST_CASE("RobertaForMaskedLM, DistilBertForMaskedLM, DebertaV2ForMaskedLM and ModernBertForMaskedLM: ft reads the head (tied decoder, own bias) and gives transformers' logits within 1e-5") {
  for (const std::string name : {"roberta-mlm", "distilbert-mlm", "deberta-v2-mlm", "modernbert-mlm"}) {
  INFO(name);
  const fsys::path d = family_dir(name);
  const auto config = ft::BertConfig::from_json_file((d / "config.json").string());
  REQUIRE(config.head == ft::BertHead::kMaskedLM);
  ft::EncoderModel model(config);
  const ft::TensorList file = ft::read_model_weights(d.string());
  const auto report = model.load_weights(file, name);
  CHECK(report.loaded == static_cast<int64_t>(model.parameters().size()));
  CHECK(report.ignored.empty());
  // The same names both ways: what ft saves is what transformers saved.
  std::vector<std::string> ours, theirs;
  for (const auto& [n, t] : model.weights()) ours.push_back(n);
  for (const auto& [n, t] : file) theirs.push_back(n);
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());
  CHECK(ours == theirs);
  auto ref = reference(name);
  ft::Batch b;
  b.input_ids = ref.at("input_ids");
  b.attention_mask = ref.at("attention_mask");
  b.token_type_ids = ref.at("token_type_ids");
  b.positions = ref.at("mlm_positions");
  model.eval();
  torch::NoGradGuard no_grad;
  for (bool padding_free : {true, false}) {
    INFO("padding_free=" << padding_free);
    model.set_padding_free(padding_free);
    const at::Tensor got = model.forward(b);
    REQUIRE(got.sizes() == ref.at("logits").sizes());
    CHECK(max_diff(got, ref.at("logits")) < 1e-5);
  }
  }
}

TEST_CASE("8 steps of transformers.Trainer on ELECTRA: ft matches within 1e-4 under every fp32 strategy") {
  for (const char* flags : kStrategies) check_trainer_trajectory("electra", flags);
}

TEST_CASE("ELECTRA: embeddings_project belongs to unit 0; the generator's masked LM and a narrow prompt are refused") {
  const auto c = ft::BertConfig::from_json_file((family_dir("electra") / "config.json").string());
  CHECK(c.embedding_width() == 16);
  CHECK(nlohmann::json::parse(c.to_json()).at("embedding_size") == 16);
  ft::EncoderModel m(c);
  CHECK(m.unit_of("electra.embeddings_project.weight") == 0);
  CHECK(m.unit_of("classifier.dense.weight") == 3);
  CHECK(ft_test::error_of([&] { m.add_prompt_embeddings(at::zeros({4, 32})); }) ==
        "prompt tuning: this electra model's embeddings are 16 wide and its layers 32; prompt tuning needs them "
        "equal (prefix tuning and LoRA work)");
  ft::BertConfig mlm = c;
  mlm.head = ft::BertHead::kMaskedLM;
  CHECK(ft_test::error_of([&] { ft::EncoderModel g(mlm); }) ==
        "model config: ft builds no masked-LM head for electra (ElectraForMaskedLM); fine-tune it as a classifier, or "
        "pretrain a bert, roberta, distilbert, deberta-v2 or modernbert model");
}

TEST_CASE("8 steps of transformers.Trainer on DistilBERT: ft matches within 1e-4 under every fp32 strategy") {
  for (const char* flags : kStrategies) check_trainer_trajectory("distilbert", flags);
}

TEST_CASE("every family with activation checkpointing, alone and under zero3, keeps transformers.Trainer's trajectory (1e-4)") {
  // Layers run again in backward (and, under zero3, are gathered for it
  // through the unit runner, beside the row-split word table).
  for (const std::string name : kFamilies) {
    for (const char* flags : {"--strategy single --set train.batch_size=16 --set train.activation_checkpointing=true",
                              "--strategy zero3 --nproc 2 --set train.batch_size=8 "
                              "--set train.activation_checkpointing=true"}) {
      check_trainer_trajectory(name, flags);
    }
  }
}

TEST_CASE("DistilBERT: its own names and config keys both ways; prefix tuning refused by name") {
  const auto c = ft::BertConfig::from_json_file((family_dir("distilbert") / "config.json").string());
  CHECK(c.hidden_size == 32);
  CHECK(c.intermediate_size == 64);
  CHECK(c.num_hidden_layers == 2);
  const auto written = nlohmann::json::parse(c.to_json());
  CHECK(written.at("dim") == 32);
  CHECK(written.at("hidden_dim") == 64);
  CHECK(written.at("n_layers") == 2);
  CHECK_FALSE(written.contains("hidden_size"));
  CHECK_FALSE(written.contains("type_vocab_size"));
  ft::EncoderModel m(c);
  std::vector<std::string> names;
  for (const auto& [n, t] : m.weights()) names.push_back(n);
  CHECK(std::find(names.begin(), names.end(), "distilbert.transformer.layer.1.attention.q_lin.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "distilbert.transformer.layer.1.sa_layer_norm.bias") != names.end());
  CHECK(std::find(names.begin(), names.end(), "distilbert.transformer.layer.0.ffn.lin2.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "pre_classifier.weight") != names.end());
  CHECK(m.unit_of("distilbert.transformer.layer.1.output_layer_norm.weight") == 2);
  CHECK(ft_test::error_of([&] { m.add_attention_prefix({at::zeros({2, 32}), at::zeros({2, 32})},
                                                       {at::zeros({2, 32}), at::zeros({2, 32})}); }) ==
        "prefix tuning: distilbert takes no past key values in transformers, so PEFT cannot prefix-tune it, and ft "
        "does not either (prompt tuning and LoRA work)");
  // eval() reaches the dropouts that only the computing layer holds: with
  // heavy dropout, two evaluations agree exactly, two training passes do not.
  ft::BertConfig noisy = c;
  noisy.hidden_dropout_prob = noisy.attention_probs_dropout_prob = 0.5;
  ft::EncoderModel d(noisy);
  auto ref = reference("distilbert");
  const ft::Batch b = batch_of(ref);
  torch::NoGradGuard no_grad;
  d.eval();
  CHECK(at::equal(d.forward(b), d.forward(b)));
  d.train();
  CHECK_FALSE(at::equal(d.forward(b), d.forward(b)));
}

TEST_CASE("8 steps of transformers.Trainer on DeBERTa-v3: ft matches within 1e-4 under every fp32 strategy") {
  // The relative-position table is unit 0's and travels below the tokens:
  // pipeline stages send it on, zero3/fsdp never gather another unit for it,
  // tensor parallelism projects it through each rank's heads.
  for (const char* flags : kStrategies) check_trainer_trajectory("deberta-v2", flags);
}

TEST_CASE("DeBERTa-v2 config.json: DebertaV2Config's defaults, its names, the shared table in unit 0, refusals by key") {
  const auto c = ft::BertConfig::from_json_file((family_dir("deberta-v2") / "config.json").string());
  CHECK(c.deberta.relative_attention);
  CHECK(c.deberta.c2p);
  CHECK(c.deberta.p2c);
  CHECK(c.relative_span() == 16);
  CHECK(c.carried_rows() == 32);
  CHECK(c.type_vocab_size == 0);
  CHECK_FALSE(c.deberta.position_biased_input);
  const auto written = nlohmann::json::parse(c.to_json());
  CHECK(written.at("architectures") == nlohmann::json::array({"DebertaV2ForSequenceClassification"}));
  CHECK(written.at("pos_att_type") == nlohmann::json::array({"p2c", "c2p"}));  // kept as read
  CHECK(written.at("position_buckets") == 16);
  ft::EncoderModel m(c);
  std::map<std::string, int> unit;
  for (const auto& [n, t] : m.weights()) unit[n] = m.unit_of(n);
  CHECK(unit.count("deberta.embeddings.position_embeddings.weight") == 0);
  CHECK(unit.count("deberta.embeddings.token_type_embeddings.weight") == 0);
  CHECK(unit.at("deberta.encoder.rel_embeddings.weight") == 0);
  CHECK(unit.at("deberta.encoder.LayerNorm.weight") == 0);
  CHECK(unit.at("deberta.encoder.layer.1.attention.self.query_proj.weight") == 2);
  CHECK(unit.at("pooler.dense.weight") == 3);
  CHECK(unit.at("classifier.weight") == 3);
  CHECK(m.carried_rows() == 32);
  const auto refusal = [](const std::string& json) {
    return ft_test::error_of([&] { ft::BertConfig::from_json_string(json, "d/config.json"); });
  };
  CHECK(refusal(R"({"model_type": "deberta-v2", "relative_attention": true, "pos_att_type": ["c2p"]})") ==
        "d/config.json: share_att_key is false, which needs separate pos_key_proj/pos_query_proj layers; ft builds "
        "DeBERTa-v2/v3's shared form (share_att_key true)");
  CHECK(refusal(R"({"model_type": "deberta-v2", "conv_kernel_size": 3})") ==
        "d/config.json: conv_kernel_size 3 adds a convolution layer ft does not build; use 0");
  CHECK(refusal(R"({"model_type": "deberta-v2", "pos_att_type": "p2c|p2p"})") ==
        "d/config.json: pos_att_type 'p2p' is not supported; ft builds c2p and p2c");
  CHECK(refusal(R"({"model_type": "deberta-v2", "hidden_size": 64, "num_attention_heads": 4, "embedding_size": 32})") ==
        "d/config.json: embedding_size 32 differs from hidden_size 64; ft builds DeBERTa with both equal");
  // DebertaV2Config's defaults where BertConfig's differ.
  const auto defaults = ft::BertConfig::from_json_string(R"({"model_type": "deberta-v2"})", "d/config.json");
  CHECK(defaults.vocab_size == 128100);
  CHECK(defaults.hidden_size == 1536);
  CHECK(defaults.type_vocab_size == 0);
  CHECK(defaults.layer_norm_eps == doctest::Approx(1e-7));
  CHECK_FALSE(defaults.deberta.relative_attention);
  CHECK(defaults.carried_rows() == 0);
}

TEST_CASE("8 steps of transformers.Trainer on ModernBERT: ft matches within 1e-4 under every fp32 strategy") {
  // tensor cuts the fused Wqkv and Wi by blocks (each rank's q, k, v of its
  // heads; its share of GeGLU's input and gate); the final norm is the head
  // unit's under zero3, fsdp and pipeline.
  for (const char* flags : kStrategies) check_trainer_trajectory("modernbert", flags);
}

TEST_CASE("ModernBERT config.json: ModernBertConfig's defaults and names, the layer kinds, the units, refusals by key") {
  const auto c = ft::BertConfig::from_json_file((family_dir("modernbert") / "config.json").string());
  CHECK(c.type_vocab_size == 0);
  CHECK(c.modern.global == std::vector<bool>{true, false});  // layer_types
  CHECK(c.modern.local_attention == 16);
  CHECK(c.modern.mean_pooling);
  CHECK(c.modern.global_theta == 160000.0);
  CHECK(c.modern.local_theta == 10000.0);
  CHECK_FALSE(c.modern.norm_bias);
  const auto written = nlohmann::json::parse(c.to_json());
  CHECK(written.at("architectures") == nlohmann::json::array({"ModernBertForSequenceClassification"}));
  CHECK(written.at("norm_eps") == 1e-5);
  CHECK(written.at("hidden_activation") == "gelu");
  CHECK(written.at("layer_types") == nlohmann::json::array({"full_attention", "sliding_attention"}));  // kept as read
  CHECK_FALSE(written.contains("layer_norm_eps"));
  CHECK_FALSE(written.contains("type_vocab_size"));
  ft::EncoderModel m(c);
  std::map<std::string, int> unit;
  for (const auto& [n, t] : m.weights()) unit[n] = m.unit_of(n);
  CHECK(unit.at("model.embeddings.tok_embeddings.weight") == 0);
  CHECK(unit.count("model.embeddings.norm.bias") == 0);  // norm_bias false: no biases anywhere
  CHECK(unit.count("model.layers.0.attn_norm.weight") == 0);  // layer 0 reads the normalised embeddings
  CHECK(unit.at("model.layers.1.attn_norm.weight") == 2);
  CHECK(unit.at("model.layers.1.attn.Wqkv.weight") == 2);
  CHECK(unit.count("model.layers.1.attn.Wqkv.bias") == 0);
  CHECK(unit.at("model.final_norm.weight") == 3);  // the head's unit applies it
  CHECK(unit.at("head.dense.weight") == 3);
  CHECK(unit.at("classifier.bias") == 3);
  CHECK(m.unit(3)->parameters().size() == 5);  // final_norm, head.dense, head.norm, classifier weight and bias
  CHECK(ft_test::error_of([&] { m.add_attention_prefix({at::zeros({2, 32}), at::zeros({2, 32})},
                                                       {at::zeros({2, 32}), at::zeros({2, 32})}); }) ==
        "prefix tuning: modernbert takes no past key values in transformers, so PEFT cannot prefix-tune it, and ft "
        "does not either (prompt tuning and LoRA work)");
  CHECK(ft::tensor_parallel_refusal(c, 2).empty());
  CHECK(ft::tensor_parallel_refusal(c, 8) ==
        "tensor parallelism over 8 ranks: ModernBERT's 4 attention heads must divide by 8 (rotary positions keep each "
        "head whole); pick another strategy.options.tp_size");
  const auto refusal = [](const std::string& json) {
    return ft_test::error_of([&] { ft::BertConfig::from_json_string(json, "m/config.json"); });
  };
  CHECK(refusal(R"({"model_type": "modernbert", "hidden_activation": "silu"})") ==
        "m/config.json: hidden_activation 'silu' is not supported; use 'gelu'");
  CHECK(refusal(R"({"model_type": "modernbert", "classifier_pooling": "max"})") ==
        "m/config.json: classifier_pooling 'max' is not supported; use cls or mean");
  CHECK(refusal(R"({"model_type": "modernbert", "rope_scaling": {"rope_type": "linear", "factor": 2.0}})") ==
        "m/config.json: rope_scaling is set; ft builds ModernBERT's default (unscaled) rotary positions");
  CHECK(refusal(R"({"model_type": "modernbert", "rope_parameters": {"full_attention": {"rope_type": "yarn"}}})") ==
        "m/config.json: rope_parameters.full_attention.rope_type 'yarn' is not supported; ft builds the default "
        "rotary positions");
  CHECK(refusal(R"({"model_type": "modernbert", "num_hidden_layers": 2, "layer_types": ["full_attention"]})") ==
        "m/config.json: layer_types has 1 entries for 2 layers");
  // ModernBertConfig's defaults where BertConfig's differ, and the older keys.
  const auto defaults = ft::BertConfig::from_json_string(
      R"({"model_type": "modernbert", "global_rope_theta": 80000.0, "global_attn_every_n_layers": 2})", "m/config.json");
  CHECK(defaults.vocab_size == 50368);
  CHECK(defaults.intermediate_size == 1152);
  CHECK(defaults.num_hidden_layers == 22);
  CHECK(defaults.pad_token_id == 50283);
  CHECK(defaults.modern.global_theta == 80000.0);
  CHECK(defaults.modern.global.size() == 22);
  CHECK(defaults.modern.global[2]);
  CHECK_FALSE(defaults.modern.global[3]);
}

TEST_CASE("ModernBERT: classifier_pooling cls matches transformers too; the fused Wqkv is cut by blocks") {
  auto model = load_family("modernbert");  // mean pooling, as the fixture's config
  auto ref = reference("modernbert");
  const ft::Batch b = batch_of(ref);
  ft::BertConfig cls_config = model->config();
  cls_config.modern.mean_pooling = false;
  ft::EncoderModel cls(cls_config);
  cls.load_weights(model->weights(), "modernbert");
  cls.eval();
  torch::NoGradGuard no_grad;
  const at::Tensor want = ref.at("logits_cls");  // transformers with classifier_pooling "cls"
  REQUIRE(max_diff(want, ref.at("logits")) > 1e-2);  // the two poolings differ well beyond the tolerance
  for (bool padding_free : {true, false}) {
    INFO("padding_free=" << padding_free);
    cls.set_padding_free(padding_free);
    CHECK(max_diff(cls.forward(b), want) < 1e-5);
  }
  // Rank 1 of 2 holds q, k and v rows of heads 2..3: block b's second half.
  const at::Tensor full = at::arange(12).view({6, 2});
  const ft::TensorCut qkv{0, 3};
  const at::Tensor part = ft::take_part(full, qkv, 1, 2);
  CHECK(at::equal(part, at::cat({full.narrow(0, 1, 1), full.narrow(0, 3, 1), full.narrow(0, 5, 1)})));
  CHECK(at::equal(ft::join_parts({ft::take_part(full, qkv, 0, 2), part}, qkv), full));
}
