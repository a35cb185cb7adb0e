// `ft run --task sentence-embedding`'s inputs: the encoder with its
// sentence-transformers modules, and rows of texts in columns.
#include <algorithm>
#include <filesystem>
#include <numeric>

#include <fmt/ranges.h>

#include "tasks/run_inputs_detail.h"
#include "ft/base/error.h"
#include "ft/data/sampler.h"
#include "ft/tasks/sentence_pairs.h"
#include "ft/tasks/sentence_transformers.h"

namespace ft::detail {
namespace fsys = std::filesystem;

namespace {

// The model directory whose modules.json describes the run's model, if any.
fsys::path sentence_dir(const RunConfig& config) {
  for (const std::string& dir : {config.model.weights, config.model.config}) {
    if (!dir.empty() && fsys::is_directory(dir)) return dir;
  }
  return {};
}

// What each loss reads: a score within its range, or none.
void check_scores(const RunConfig& config, const SentenceColumns& data, bool scored) {
  const std::string& loss = config.embedding.loss;
  const bool wants_score = loss == "CoSENTLoss" || loss == "CosineSimilarityLoss" || (loss == "auto" && scored);
  if (wants_score && !scored) {
    fail("{}: embedding.loss {} needs a score per pair, and the rows have no 'score' (or data.label_field '{}') column",
         data.source, loss, config.data.label_field);
  }
  if (loss == "CosineSimilarityLoss") {
    for (size_t r = 0; r < data.scores.size(); ++r) {
      if (data.scores[r] < -1.0 || data.scores[r] > 1.0) {
        fail("{}: row {}: score {} is outside [-1, 1], the cosine similarity CosineSimilarityLoss fits; scale it with "
             "data.label_scale (5 for 0-5 scores)",
             data.source, r + 1, data.scores[r]);
      }
    }
  }
  if (wants_score && data.names.size() != 2) {
    fail("{}: {} scores pairs, but the rows have {} text columns [{}]; give two with data.columns", data.source,
         loss == "auto" ? "CoSENTLoss" : loss, data.names.size(), fmt::join(data.names, ", "));
  }
}

}  // namespace

void apply_sentence_modules(const RunConfig& config, BertConfig& c) {
  const fsys::path dir = sentence_dir(config);
  const auto& e = config.embedding;
  if (!dir.empty() && has_sentence_modules(dir)) {
    read_sentence_modules(dir, c);
  } else {
    c.sentence = {};
    c.sentence.pooling = "mean";  // what sentence-transformers puts on a plain encoder
  }
  if (e.pooling != "auto") c.sentence.pooling = e.pooling;
  if (e.normalize != "auto") c.sentence.normalize = e.normalize == "true";
  c.head = BertHead::kSentenceEmbedding;
}

void prepare_sentence_inputs(const RunConfig& config, RunInputs& in) {
  const auto& d = config.data;
  apply_sentence_modules(config, in.model_config);
  const fsys::path dir = sentence_dir(config);
  if (in.initial_weights && !dir.empty() && has_sentence_modules(dir) && in.model_config.sentence.dense_out > 0) {
    for (auto& named : read_sentence_dense(dir, in.model_config)) in.initial_weights->push_back(std::move(named));
  }
  const bool tokenized = detect_data_format(d.train, parse_data_format(d.format)) == DataFormat::Safetensors;
  if (!tokenized) {
    attach_tokenizer(config, in);
  } else if (!dir.empty()) {
    in.tokenizer = load_model_dir_tokenizer(dir.string());  // saved with the model, for ft predict; may be none
  }
  if (in.model_config.sentence.max_seq_length > 0 && d.max_seq_len > in.model_config.sentence.max_seq_length) {
    in.notes.push_back(fmt::format("data.max_seq_len {} is above the {} tokens the model was trained to embed "
                                   "(sentence_bert_config.json)",
                                   d.max_seq_len, in.model_config.sentence.max_seq_length));
  }
  const Padding padding = parse_padding(d.padding);
  const int max_len = static_cast<int>(d.max_seq_len);
  if (tokenized) {
    std::shared_ptr<Dataset> all = load_sentence_tensors(d.train, d.columns, padding, d.max_rows);
    std::vector<int64_t> perm(static_cast<size_t>(all->size()));
    std::iota(perm.begin(), perm.end(), 0);
    if (d.shuffle_before_split && d.dev.empty()) perm = seeded_permutation(all->size(), static_cast<uint64_t>(d.split_seed));
    const auto n_dev = d.dev.empty() ? static_cast<int64_t>(std::llround(static_cast<double>(all->size()) * d.dev_fraction)) : 0;
    in.train = subset(all, std::vector<int64_t>(perm.begin(), perm.end() - n_dev));
    if (n_dev > 0) in.dev.push_back({"", subset(all, std::vector<int64_t>(perm.end() - n_dev, perm.end()))});
    for (const auto& f : d.dev.files) in.dev.push_back({f.name, load_sentence_tensors(f.path, d.columns, padding)});
    return;
  }
  DataSource source = make_source(config, d.train);
  SentenceColumns train = read_sentence_columns(source, d.columns);
  const bool scored = !train.scores.empty();
  check_scores(config, train, scored);
  in.notes.push_back(fmt::format("{}: {} rows of [{}]{}", d.train, train.rows(), fmt::join(train.names, ", "),
                                 scored ? fmt::format(", scored by '{}'", train.score_name) : ""));
  in.model_config.text_pair = false;
  std::vector<std::pair<std::string, SentenceColumns>> devs;
  for (const auto& f : d.dev.files) {
    DataSource dev_source = make_source(config, f.path);
    dev_source.max_rows = 0;
    SentenceColumns dev = read_sentence_columns(dev_source, train.names);
    if (dev.scores.empty() != train.scores.empty()) {
      fail("{}: {} a score column, but {} {}", f.path, dev.scores.empty() ? "has no" : "has", d.train,
           dev.scores.empty() ? "does" : "does not");
    }
    devs.emplace_back(f.name, std::move(dev));
  }
  if (d.dev.empty() && d.dev_fraction > 0) {
    std::vector<int64_t> perm(static_cast<size_t>(train.rows()));
    std::iota(perm.begin(), perm.end(), 0);
    if (d.shuffle_before_split) perm = seeded_permutation(train.rows(), static_cast<uint64_t>(d.split_seed));
    const auto n_dev = static_cast<int64_t>(std::llround(static_cast<double>(train.rows()) * d.dev_fraction));
    devs.emplace_back("", take_rows(train, std::vector<int64_t>(perm.end() - n_dev, perm.end())));
    train = take_rows(train, std::vector<int64_t>(perm.begin(), perm.end() - n_dev));
  }
  in.train = make_sentence_dataset(std::move(train), in.tokenizer, max_len, padding);
  for (auto& [name, dev] : devs) {
    if (dev.rows() > 0) in.dev.push_back({name, make_sentence_dataset(std::move(dev), in.tokenizer, max_len, padding)});
  }
}

}  // namespace ft::detail
