// Masked-LM pretraining (`ft pretrain`): BERT's masking (rates, specials,
// whole words, independence from how rows are batched), packing, the
// BertForMaskedLM model (HF names, tied decoder, logits at the masked
// positions only), and the real binary on IMDB rows: ddp x 2, zero3 x 2 and
// dp equal single, the dev rows left out, the checkpoint's layout, resume,
// and `ft run` loading it with the MLM head dropped and the encoder
// bit-equal.
#include <cmath>
#include <filesystem>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include "ft/tasks/mlm.h"
#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft_run.h"
#include "ft_small_model.h"

namespace fsys = std::filesystem;

namespace {

// [PAD] [UNK] [CLS] [SEP] [MASK], then words and "##" pieces.
ft::WordPieceTokenizer small_tokenizer() {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = 0; i < 40; ++i) tokens.push_back("w" + std::to_string(i));
  for (int i = 0; i < 5; ++i) tokens.push_back("##p" + std::to_string(i));
  return ft::WordPieceTokenizer::from_tokens(tokens);
}

ft::MaskingOptions masking(const ft::WordPieceTokenizer& tok, bool whole_word, double p = 0.15) {
  ft::PretrainConfig pc;
  pc.mlm_probability = p;
  pc.whole_word_masking = whole_word;
  return ft::MaskingOptions::from(tok, pc, 99);
}

// rows x width of word ids 5..44, [CLS] first, [SEP] last, the last 3 columns of odd rows padding.
ft::Batch word_batch(int64_t rows, int64_t width) {
  at::manual_seed(3);
  ft::Batch b;
  b.input_ids = at::randint(5, 45, {rows, width}, at::kLong);
  b.attention_mask = at::ones({rows, width}, at::kLong);
  b.input_ids.select(1, 0).fill_(2);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t len = r % 2 ? width - 3 : width;
    b.input_ids[r][len - 1] = 3;
    if (len < width) {
      b.input_ids[r].narrow(0, len, width - len).fill_(0);
      b.attention_mask[r].narrow(0, len, width - len).fill_(0);
    }
  }
  b.token_type_ids = at::zeros({rows, width}, at::kLong);
  return b;
}

std::vector<int64_t> iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

const fsys::path kImdb = "data/imdb/train.jsonl";
const fsys::path kVocab = "data/bert-base-uncased/vocab.txt";

#define REQUIRE_IMDB()                                                                                 \
  do {                                                                                                 \
    if (!fsys::exists(ft_test::source_dir() / kImdb) || !fsys::exists(ft_test::source_dir() / kVocab)) { \
      ft_test::skip("needs data/imdb and data/bert-base-uncased (run scripts/fetch-data.sh)");         \
      return;                                                                                          \
    }                                                                                                  \
  } while (0)

}  // namespace

TEST_CASE("masking: BERT's 15 % and 80/10/10, specials and padding never chosen, the same masks however rows are batched") {
  const auto tok = small_tokenizer();
  const auto opts = masking(tok, false);
  const ft::Batch b = word_batch(400, 64);
  const auto rows = iota(400, 1000);
  const ft::Batch m = ft::mask_tokens(b, rows, 0, opts);
  const auto pos = m.positions;
  REQUIRE(pos.numel() == m.labels.numel());
  CHECK(at::equal(pos, std::get<0>(at::sort(pos))));  // ascending
  const auto flat_in = b.input_ids.reshape(-1), flat_out = m.input_ids.reshape(-1);
  CHECK(at::equal(flat_in.index_select(0, pos), m.labels));  // labels are the original ids
  // Specials ([CLS]=2, [SEP]=3) and padding are never chosen.
  CHECK(flat_in.index_select(0, pos).ge(5).all().item<bool>());
  CHECK(b.attention_mask.reshape(-1).index_select(0, pos).eq(1).all().item<bool>());
  const double real = b.input_ids.ge(5).logical_and(b.attention_mask.eq(1)).sum().item<double>();
  const double chosen = static_cast<double>(pos.numel());
  CHECK(std::abs(chosen / real - 0.15) < 0.01);  // ~22 000 real tokens: 3 sigma is 0.007
  const auto replaced = flat_out.index_select(0, pos);
  const double to_mask = replaced.eq(4).sum().item<double>() / chosen;
  const double kept = replaced.eq(m.labels).sum().item<double>() / chosen;
  CHECK(std::abs(to_mask - 0.8) < 0.02);
  CHECK(std::abs(kept - 0.1 - 0.1 / 50) < 0.02);  // 10 % kept, and a random draw hits the same id 1 time in 50
  // Tokens not chosen are untouched.
  auto unchosen = at::ones_like(flat_in, at::kBool).index_fill_(0, pos, false);
  CHECK(at::equal(flat_in.masked_select(unchosen), flat_out.masked_select(unchosen)));

  // Rows 3 and 10 alone, in another batch: the same masks (a function of seed, epoch, row, column).
  ft::Batch two;
  const auto idx = at::tensor({3, 10}, at::kLong);
  two.input_ids = b.input_ids.index_select(0, idx);
  two.attention_mask = b.attention_mask.index_select(0, idx);
  two.token_type_ids = b.token_type_ids.index_select(0, idx);
  const ft::Batch m2 = ft::mask_tokens(two, {1003, 1010}, 0, opts);
  CHECK(at::equal(m2.input_ids, m.input_ids.index_select(0, idx)));
  // Another epoch draws other masks; the evaluation epoch is fixed.
  CHECK_FALSE(at::equal(ft::mask_tokens(b, rows, 1, opts).input_ids, m.input_ids));
  CHECK(at::equal(ft::mask_tokens(b, rows, ft::kEvalMaskEpoch, opts).input_ids,
                  ft::mask_tokens(b, rows, ft::kEvalMaskEpoch, opts).input_ids));
}

TEST_CASE("whole-word masking chooses every piece of a word or none") {
  const auto tok = small_tokenizer();
  ft::Batch b = word_batch(200, 40);
  // Every third word id becomes a "##" piece (ids 45..49), continuing the token before it.
  auto ids = b.input_ids;
  for (int64_t c = 2; c < 38; c += 3) {
    auto col = ids.select(1, c);
    col.copy_(at::where(col.ge(5), 45 + col.remainder(5), col));
  }
  const auto m = ft::mask_tokens(b, iota(200), 0, masking(tok, true, 0.3));
  const auto chosen = at::zeros({200 * 40}, at::kBool).index_fill_(0, m.positions, true).view({200, 40});
  int64_t pieces = 0;
  for (int64_t c = 2; c < 38; c += 3) {
    const auto piece = ids.select(1, c).ge(45);
    // A piece is chosen exactly when the token it continues is.
    CHECK(at::equal(chosen.select(1, c).masked_select(piece), chosen.select(1, c - 1).masked_select(piece)));
    pieces += chosen.select(1, c).masked_select(piece).sum().item<int64_t>();
  }
  CHECK(pieces > 100);
  CHECK_THROWS_WITH_AS(ft::MaskingOptions::from(ft::WordPieceTokenizer::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"}),
                                                ft::PretrainConfig{}, 1),
                       doctest::Contains("no [MASK] token"), ft::Error);
}

TEST_CASE("packing: [CLS] text [SEP] of every row, in order, cut into full blocks") {
  const auto tok = small_tokenizer();
  ft::TextData data;
  data.source = "texts";
  data.label_names = {"0"};
  for (const char* t : {"w1 w2 w3", "w4", "w5 w6 w7 w8 w9 w10 w11", "w12 w13"}) data.rows.push_back({t, "", 0});
  const auto packed = ft::make_packed_dataset(data, tok, 6, ft::Padding::Longest);
  // 5 + 3 + 9 + 4 = 21 tokens -> blocks of 6, 6, 6, 3.
  REQUIRE(packed->size() == 4);
  const auto b = packed->collate({0, 1, 2, 3});
  const std::vector<int64_t> stream = {2, 6,  7,  8,  3, 2, 9, 3, 2, 10, 11, 12, 13, 14, 15, 16, 3, 2, 17, 18, 3};
  auto flat = b.input_ids.masked_select(b.attention_mask.eq(1));
  CHECK(at::equal(flat, at::tensor(stream, at::kLong)));
  CHECK(b.attention_mask.sum(1).equal(at::tensor({6, 6, 6, 3}, at::kLong)));
}

TEST_CASE("BertForMaskedLM: HF names, no pooler, the decoder tied to the word embeddings, logits at masked positions only") {
  auto config = ft_test::small_config(2);
  config.head = ft::BertHead::kMaskedLM;
  at::manual_seed(5);
  ft::EncoderModel m(config);
  m.eval();
  std::map<std::string, at::Tensor> w;
  for (const auto& [n, t] : m.weights()) w[n] = t;
  CHECK(w.count("cls.predictions.bias"));
  CHECK(w.count("cls.predictions.transform.dense.weight"));
  CHECK(w.count("cls.predictions.transform.LayerNorm.weight"));
  CHECK_FALSE(w.count("cls.predictions.decoder.weight"));  // tied: HF's safetensors leave it out too
  CHECK_FALSE(w.count("bert.pooler.dense.weight"));
  CHECK_FALSE(w.count("classifier.weight"));
  CHECK(w.size() == 5u + 16u * 2u + 5u);  // embeddings, 2 layers, the head
  CHECK(m.unit_of("cls.predictions.bias") == 3);
  CHECK(m.units_read_by(3) == std::vector<int>{0});
  CHECK(config.to_json().find("\"BertForMaskedLM\"") != std::string::npos);

  auto batch = ft_test::small_batch();
  batch.positions = at::tensor({1, 5, 9, 20, 30}, at::kLong);  // rows 0, 0, 1, 2, 3
  torch::NoGradGuard no_grad;
  const auto logits = m.forward(batch);
  REQUIRE(logits.sizes() == at::IntArrayRef({5, 50}));
  m.set_padding_free(false);
  CHECK(at::allclose(m.forward(batch), logits, 1e-5, 1e-6));
  m.set_padding_free(true);
  // Tied: changing a word embedding row changes that vocabulary logit. Not
  // by a constant: LayerNorm's output sums to zero, so adding the same value
  // to every dimension moves the logit only by rounding.
  auto& table = w["bert.embeddings.word_embeddings.weight"];
  table[7].add_(at::linspace(-1.0, 1.0, table.size(1)));
  const auto after = m.forward(batch);
  CHECK_FALSE(at::allclose(after.select(1, 7), logits.select(1, 7)));
  // Without positions the masked-LM model says what to do.
  batch.positions = at::Tensor();
  CHECK_THROWS_WITH_AS(m.forward(batch), doctest::Contains("fine-tune it with `ft run --set model.weights=DIR`"), ft::Error);
}

TEST_CASE("ft pretrain on IMDB rows: ddp x2, zero3 x2, dp, pipeline x2 and tensor x2 equal single; dev rows left out; checkpoint; resume; ft run loads it") {
  REQUIRE_IMDB();
  ft_test::TempDir tmp("pretrain");
  // 200 fine-tuning rows (the first), 20 of them dev; the corpus is the first 400 rows without those 20.
  const std::string data =
      "--config configs/tiny-imdb.yaml --set data.max_rows=200 --set data.take=first --set data.dev_fraction=0.1 --set pretrain.max_rows=400 "
      "--set data.max_seq_len=32 --set model.dropout=0 --set train.lr=1e-3 --set train.warmup_ratio=0 "
      "--set train.max_steps=8 --set train.log_every=1 --set train.eval_batch_size=16 --threads 1";
  auto run = [&](const std::string& name, const std::string& extra) {
    const auto metrics = tmp.path() / (name + ".jsonl");
    const auto out = ft_test::run_ok(fmt::format("pretrain {} --metrics-out {} --set train.output_dir={} {}", data,
                                                 metrics.string(), (tmp.path() / name).string(), extra));
    return std::make_pair(metrics, out);
  };
  const auto [single, single_out] = run("single", "--set train.batch_size=8");
  CHECK(single_out.find("pretraining corpus: 380 of 400 rows of data/imdb/train.jsonl (20 left out") != std::string::npos);
  CHECK(single_out.find("pretraining (masked LM) Bert (2 layers)") != std::string::npos);
  const auto ref = ft_test::step_losses(single);
  REQUIRE(ref.size() == 8u);
  CHECK(ref.front() > 9.0);  // ~ln(30522) = 10.3 at random init
  CHECK(ref.back() < ref.front());
  const auto eval = ft_test::read_events(single, "eval");
  REQUIRE(eval.size() == 1u);
  CHECK(eval[0].at("task") == "masked_lm");
  CHECK(eval[0].at("masked_tokens").get<int64_t>() > 50);

  ft_test::check_same_losses(ref, run("ddp", "--strategy ddp --nproc 2 --set train.batch_size=4").first, "ddp x2", 1e-4);
  ft_test::check_same_losses(ref, run("zero3", "--strategy zero3 --nproc 2 --set train.batch_size=4").first, "zero3 x2", 1e-4);
  ft_test::check_same_losses(ref, run("dp", "--strategy dp --set strategy.options.replicas=2 --set train.batch_size=8").first,
                             "dp x2 replicas", 1e-4);
  // Model parallel: the last stage's replica of the tied word embeddings
  // (their gradients summed with stage 0's); tensor keeps the table whole.
  ft_test::check_same_losses(
      ref, run("pipeline", "--strategy pipeline --nproc 2 --set train.batch_size=4 --set train.grad_accum=2").first,
      "pipeline x2", 1e-4);
  ft_test::check_same_losses(ref, run("tensor", "--strategy tensor --nproc 2 --set train.batch_size=8").first, "tensor x2",
                             1e-4);

  // The checkpoint is HF's BertForMaskedLM layout.
  const auto final_dir = tmp.path() / "single" / "final";
  const auto config = nlohmann::json::parse(ft_test::read_text(final_dir / "config.json"));
  CHECK(config.at("architectures") == nlohmann::json::array({"BertForMaskedLM"}));
  const auto weights = ft::safetensors::load((final_dir / "model.safetensors").string());
  std::map<std::string, at::Tensor> by_name(weights.begin(), weights.end());
  CHECK(by_name.count("cls.predictions.transform.dense.weight"));
  CHECK(by_name.at("cls.predictions.bias").numel() == 30522);
  CHECK_FALSE(by_name.count("bert.pooler.dense.weight"));

  // Resume at step 4: steps 5..8 as the uninterrupted run.
  run("first4", "--set train.batch_size=8 --set train.save_every=4");
  const auto [resumed, resumed_out] =
      run("resumed", fmt::format("--set train.batch_size=8 --resume {}", (tmp.path() / "first4" / "checkpoint-4").string()));
  ft_test::check_same_losses(std::vector<double>(ref.begin() + 4, ref.end()), resumed, "resumed", 1e-6);

  // Fine-tuning from it: the MLM head is dropped and named; the encoder arrives bit-equal (frozen for one step);
  // the classifier takes the data's label count.
  const auto ft_dir = tmp.path() / "finetune";
  const auto out = ft_test::run_ok(fmt::format(
      "run --config configs/tiny-imdb.yaml --set data.max_rows=200 --set data.take=first --set data.max_seq_len=32 "
      "--threads 1 --set train.max_steps=1 "
      "--set train.freeze_layers=2 --set model.weights={} --set train.output_dir={} --set data.labels=[neg,pos,unused]",
      final_dir.string(), ft_dir.string()));
  CHECK(out.find(final_dir.string() + ": newly initialised, not in the weights: bert.pooler.dense.weight, "
                 "bert.pooler.dense.bias, classifier.weight, classifier.bias") != std::string::npos);
  CHECK(out.find(final_dir.string() + ": not used by this model: cls.predictions.bias, "
                 "cls.predictions.transform.LayerNorm.bias, cls.predictions.transform.LayerNorm.weight, "
                 "cls.predictions.transform.dense.bias, cls.predictions.transform.dense.weight") != std::string::npos);
  const auto tuned = ft::safetensors::load((ft_dir / "final" / "model.safetensors").string());
  int64_t encoder = 0;
  for (const auto& [name, t] : tuned) {
    if (name.rfind("bert.embeddings.", 0) != 0 && name.rfind("bert.encoder.", 0) != 0) continue;
    INFO(name);
    REQUIRE(by_name.count(name));
    CHECK(at::equal(t, by_name.at(name)));
    ++encoder;
  }
  CHECK(encoder == 5 + 16 * 2);
  // The classifier is new, sized to the data's labels (3 here), whatever num_labels config.json says.
  std::map<std::string, at::Tensor> tuned_by_name(tuned.begin(), tuned.end());
  CHECK(tuned_by_name.at("classifier.weight").sizes() == at::IntArrayRef({3, 128}));
}

TEST_CASE("ft pretrain under bf16 autocast: the masked-LM head runs (its LayerNorm in fp32) and tracks fp32") {
  REQUIRE_IMDB();
  ft_test::TempDir tmp("pretrain-bf16");
  auto first_loss = [&](const std::string& precision) {
    const auto metrics = tmp.path() / (precision + ".jsonl");
    ft_test::run_ok(fmt::format("pretrain --config configs/tiny-imdb.yaml --set data.max_rows=200 --set data.take=first "
                                "--set pretrain.max_rows=200 --set data.max_seq_len=32 --set model.dropout=0 "
                                "--set train.max_steps=2 --set train.log_every=1 --set train.output_dir= --threads 1 "
                                "--set strategy.precision={} --metrics-out {}",
                                precision, metrics.string()));
    const auto losses = ft_test::step_losses(metrics);
    REQUIRE(losses.size() == 2u);
    return losses[0];
  };
  const double fp32 = first_loss("fp32"), bf16 = first_loss("bf16");
  CHECK(std::abs(bf16 - fp32) < 0.05);  // bf16 matmuls, ~3 significant digits
}
