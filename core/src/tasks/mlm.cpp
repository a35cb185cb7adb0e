// BERT's masked-LM data: masking, packing and the pretraining corpus.
#include "ft/tasks/mlm.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "ft/base/error.h"
#include "run_inputs_detail.h"

namespace ft {
namespace {

// splitmix64's finaliser: a bijection that scrambles every input bit.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform draw in [0, 1) for one (row, column, purpose) of one epoch.
class MaskDraws {
 public:
  MaskDraws(uint64_t seed, int64_t epoch) : base_(mix(mix(seed) + static_cast<uint64_t>(epoch))) {}
  double operator()(int64_t row, int64_t column, uint64_t purpose) const {
    const uint64_t h = mix(mix(mix(base_ + static_cast<uint64_t>(row)) + static_cast<uint64_t>(column)) + purpose);
    return static_cast<double>(h >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t base_;
};

enum Purpose : uint64_t { kChoose = 1, kReplace = 2, kRandomId = 3 };

// Blocks of the packed stream, collated like text rows.
class PackedDataset final : public Dataset {
 public:
  PackedDataset(std::vector<int32_t> stream, int64_t block, int64_t pad, Padding padding, std::string source)
      : stream_(std::move(stream)), block_(block), pad_(pad), padding_(padding), source_(std::move(source)) {}

  int64_t size() const override {
    return (static_cast<int64_t>(stream_.size()) + block_ - 1) / block_;
  }
  int64_t num_labels() const override { return 1; }
  std::vector<int64_t> labels() const override { return std::vector<int64_t>(static_cast<size_t>(size()), 0); }
  std::vector<int64_t> lengths() const override {
    std::vector<int64_t> out;
    for (int64_t r = 0; r < size(); ++r) out.push_back(length(r));
    return out;
  }
  Batch collate(const std::vector<int64_t>& rows) const override {
    const auto n = static_cast<int64_t>(rows.size());
    int64_t width = padding_ == Padding::MaxLength ? block_ : 0;
    for (int64_t r : rows) {
      if (r < 0 || r >= size()) fail("{}: packed block {} is outside the {} blocks", source_, r, size());
      width = std::max(width, length(r));
    }
    Batch b;
    b.input_ids = at::full({n, width}, pad_, at::kLong);
    b.attention_mask = at::zeros({n, width}, at::kLong);
    b.token_type_ids = at::zeros({n, width}, at::kLong);
    b.labels = at::zeros({n}, at::kLong);
    int64_t* ids = b.input_ids.data_ptr<int64_t>();
    int64_t* mask = b.attention_mask.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t start = rows[static_cast<size_t>(i)] * block_;
      const int64_t len = length(rows[static_cast<size_t>(i)]);
      for (int64_t j = 0; j < len; ++j) ids[i * width + j] = stream_[static_cast<size_t>(start + j)];
      std::fill(mask + i * width, mask + i * width + len, int64_t{1});
    }
    return b;
  }

 private:
  int64_t length(int64_t r) const {
    return std::min(block_, static_cast<int64_t>(stream_.size()) - r * block_);
  }
  std::vector<int32_t> stream_;
  int64_t block_, pad_;
  Padding padding_;
  std::string source_;
};

std::string row_key(const TextExample& r) { return r.text + '\x1f' + r.pair; }

}  // namespace

MaskingOptions MaskingOptions::from(const Tokenizer& tok, const PretrainConfig& pretrain, uint64_t seed) {
  MaskingOptions o;
  o.probability = pretrain.mlm_probability;
  o.whole_word = pretrain.whole_word_masking;
  o.seed = seed;
  o.vocab_size = tok.vocab_size();
  const auto mask = tok.mask_id();
  if (!mask) fail("data.vocab: the vocabulary has no [MASK] token; masked-LM pretraining needs one");
  o.mask_id = *mask;
  o.never_masked.assign(static_cast<size_t>(o.vocab_size), 0);
  for (int64_t id : {tok.pad_id(), tok.cls_id(), tok.sep_id(), tok.unk_id(), *mask}) {
    if (id >= 0) o.never_masked[static_cast<size_t>(id)] = 1;  // -1: a tokenizer without that token
  }
  o.continues_word.assign(static_cast<size_t>(o.vocab_size), 0);
  const auto& tokens = tok.tokens();
  for (size_t i = 0; i < tokens.size(); ++i) o.continues_word[i] = tokens[i].rfind("##", 0) == 0 ? 1 : 0;
  return o;
}

Batch mask_tokens(Batch batch, const std::vector<int64_t>& rows, int64_t epoch, const MaskingOptions& o) {
  const MaskDraws draw(o.seed, epoch);
  at::Tensor ids_t = batch.input_ids.contiguous().clone();
  const at::Tensor mask_t = batch.attention_mask.contiguous();
  const int64_t n = ids_t.size(0), width = ids_t.size(1);
  int64_t* ids = ids_t.data_ptr<int64_t>();
  const int64_t* attended = mask_t.data_ptr<int64_t>();
  std::vector<int64_t> positions, targets;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = rows[static_cast<size_t>(i)];
    bool word_chosen = false;
    for (int64_t c = 0; c < width; ++c) {
      const int64_t at = i * width + c;
      const int64_t id = ids[at];
      if (attended[at] == 0 || id < 0 || id >= o.vocab_size || o.never_masked[static_cast<size_t>(id)]) {
        word_chosen = false;  // a special token ends a word
        continue;
      }
      // A "##" piece shares its word's draw; every other token starts a word.
      const bool continues = o.whole_word && c > 0 && o.continues_word[static_cast<size_t>(id)];
      if (!continues) word_chosen = draw(row, c, kChoose) < o.probability;
      if (!word_chosen) continue;
      positions.push_back(at);
      targets.push_back(id);
      const double r = draw(row, c, kReplace);
      if (r < 0.8) {
        ids[at] = o.mask_id;
      } else if (r < 0.9) {
        ids[at] = std::min(o.vocab_size - 1, static_cast<int64_t>(draw(row, c, kRandomId) * static_cast<double>(o.vocab_size)));
      }
    }
  }
  batch.input_ids = ids_t;
  batch.labels = at::tensor(targets, at::kLong);
  batch.positions = at::tensor(positions, at::kLong);
  return batch;
}

std::unique_ptr<Dataset> make_packed_dataset(const TextData& data, const Tokenizer& tok, int max_length,
                                             Padding padding) {
  if (max_length < 2) fail("data.max_seq_len is {}; packing needs at least 2", max_length);
  const bool pairs = std::any_of(data.rows.begin(), data.rows.end(), [](const TextExample& r) { return !r.pair.empty(); });
  std::vector<int32_t> stream;
  for (size_t r = 0; r < data.rows.size(); ++r) {
    const TextExample& ex = data.rows[r];
    Encoding e;
    try {
      e = tok.encode(ex.text, pairs ? std::optional<std::string_view>(ex.pair) : std::nullopt, 0, false);
    } catch (const Error& err) {
      fail("{}: row {}: {}", data.source, r + 1, err.what());
    }
    stream.insert(stream.end(), e.input_ids.begin(), e.input_ids.end());
  }
  return std::make_unique<PackedDataset>(std::move(stream), max_length, tok.pad_id(), padding, data.source);
}

RunInputs prepare_pretrain_inputs(const RunConfig& config) {
  require_default_data(config);
  const auto& d = config.data;
  RunInputs in;
  in.model_config = resolve_model_config(config);
  in.model_config.head = BertHead::kMaskedLM;
  for (const auto& [on, key] : {std::pair{config.lora.rank > 0, "lora.rank"}, std::pair{config.adapter.size > 0, "adapter.size"},
                                 std::pair{config.prompt.length > 0, "prompt.length"},
                                 std::pair{config.prefix.length > 0, "prefix.length"}}) {
    if (on) fail("{}: ft pretrain trains the whole encoder; {} is a fine-tuning method (use it with ft run)", config.source, key);
  }
  detail::resolve_weights(config, in);
  if (d.train.empty()) fail("{}: data.train is not set", config.source);
  if (detect_data_format(d.train, parse_data_format(d.format)) == DataFormat::Safetensors) {
    fail("{}: ft pretrain reads text (json, jsonl, csv, tsv); data.train {} is pre-tokenized", config.source, d.train);
  }
  detail::attach_tokenizer(config, in);
  // Each dev set is evaluated on its own, under its name; all their rows leave the corpus.
  auto sets = detail::read_train_dev(config, in.skipped_rows).dev;
  int64_t dev_rows = 0;
  // The corpus: data.train again, without data.max_rows (it picked the fine-tuning rows).
  DataSource all_source = detail::make_source(config, d.train);
  all_source.max_rows = config.pretrain.max_rows;
  all_source.take = Take::First;
  all_source.label_names.clear();
  all_source.label_field = "";  // labels are not read
  TextData corpus = read_text_data(all_source);
  std::unordered_set<std::string> held_out;
  for (const auto& set : sets) {
    for (const auto& r : set.second.rows) held_out.insert(row_key(r));
    dev_rows += static_cast<int64_t>(set.second.rows.size());
  }
  const size_t before = corpus.rows.size();
  corpus.rows.erase(std::remove_if(corpus.rows.begin(), corpus.rows.end(),
                                   [&](const TextExample& r) { return held_out.count(row_key(r)) > 0; }),
                    corpus.rows.end());
  if (corpus.rows.empty()) fail("{}: every row of {} is a dev row; nothing is left to pretrain on", config.source, d.train);
  in.notes.push_back(fmt::format("pretraining corpus: {} of {} rows of {} ({} left out: the {} dev rows a fine-tuning "
                                 "run with this data section evaluates on, and their duplicates)",
                                 corpus.rows.size(), before, d.train, before - corpus.rows.size(), dev_rows));
  const Padding padding = detail::parse_padding(d.padding);
  const int max_len = static_cast<int>(d.max_seq_len);
  const PairTruncation pair_rule = d.pair_truncation == "slow" ? PairTruncation::kSlow : PairTruncation::kFast;
  if (config.pretrain.packing) {
    in.train = make_packed_dataset(corpus, *in.tokenizer, max_len, padding);
    in.notes.push_back(fmt::format("packing: {} rows -> {} blocks of {} tokens", corpus.rows.size(), in.train->size(), max_len));
  } else {
    in.train = make_text_dataset(std::move(corpus), in.tokenizer, max_len, padding, pair_rule);
  }
  for (auto& [name, dev] : sets) {
    if (!dev.rows.empty()) in.dev.push_back({name, make_text_dataset(std::move(dev), in.tokenizer, max_len, padding, pair_rule)});
  }
  return in;
}

}  // namespace ft
