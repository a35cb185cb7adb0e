#include "ft/tasks/run_inputs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include <fmt/ranges.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "tokenizer/hf_pipeline.h"
#include "run_inputs_detail.h"
#include "ft/io/safetensors.h"
#include "ft/tasks/token_classification.h"
#include "ft/data/sampler.h"
#include "ft/io/manifest.h"
#include "ft/io/torch_bin.h"

namespace ft {
namespace fsys = std::filesystem;

TensorList read_model_weights(const std::string& path) {
  fsys::path p(path);
  if (fsys::is_directory(p)) {
    verify_checkpoint(p);  // a checkpoint directory with a manifest must match it
    if (fsys::exists(p / "model.safetensors")) return safetensors::load((p / "model.safetensors").string());
    if (fsys::exists(p / "pytorch_model.bin")) return load_pytorch_bin((p / "pytorch_model.bin").string());
    fail("{}: no model.safetensors or pytorch_model.bin in this directory", path);
  }
  if (!fsys::exists(p)) fail("model.weights: {} does not exist", path);
  if (p.extension() == ".bin" || p.extension() == ".pt") return load_pytorch_bin(path);
  return safetensors::load(path);
}

BertConfig resolve_model_config(const RunConfig& config) {
  const std::string& ref = config.model.config;
  BertConfig c;
  const fsys::path weights_config = fsys::path(config.model.weights) / "config.json";
  const bool preset = ref == "tiny" || ref == "mini" || ref == "base";
  if (preset && !config.model.weights.empty() && fsys::is_directory(config.model.weights) &&
      fsys::exists(weights_config)) {
    // A checkpoint directory's weights come with their shapes: a preset
    // cannot describe them (an explicit config.json still wins).
    c = BertConfig::from_json_file(weights_config.string());
  } else if (preset) {
    c = BertConfig::preset(ref);
  } else if (ref.empty()) {
    fail("{}: model.config is empty; give a preset (tiny, mini, base), a config.json or a checkpoint dir",
         config.source);
  } else if (fsys::is_directory(ref)) {
    c = BertConfig::from_json_file((fsys::path(ref) / "config.json").string());
  } else {
    c = BertConfig::from_json_file(ref);
  }
  if (config.model.dropout) {
    c.hidden_dropout_prob = *config.model.dropout;
    c.attention_probs_dropout_prob = *config.model.dropout;
  }
  return c;
}

std::shared_ptr<const Tokenizer> load_model_dir_tokenizer(const std::string& dir, const TokenizerOptions& options) {
  const fsys::path d(dir);
  if (fsys::is_regular_file(d / "tokenizer.json")) {
    const std::string file = (d / "tokenizer.json").string();
    auto tok = hf::make_json_tokenizer(fs::read_file(file), file, read_tokenizer_config_keys(dir), file);
    // data.lowercase can override a WordPiece file's normalizer; other models keep their own.
    const auto* wp = dynamic_cast<const WordPieceTokenizer*>(tok.get());
    if (!wp || options.lowercase == Lowercase::Auto || (options.lowercase == Lowercase::Yes) == wp->lowercase()) {
      return tok;
    }
    TokenizerOptions overridden = wp->options();
    overridden.lowercase = options.lowercase;
    return std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_tokens(wp->tokens(), overridden));
  }
  if (fsys::is_regular_file(d / "vocab.txt")) {
    return std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_file((d / "vocab.txt").string(), options));
  }
  return convert_model_dir_tokenizer(dir);
}

std::shared_ptr<const Tokenizer> load_tokenizer(const RunConfig& config) {
  TokenizerOptions options;
  if (config.data.lowercase == "true") options.lowercase = Lowercase::Yes;
  if (config.data.lowercase == "false") options.lowercase = Lowercase::No;
  if (!config.data.vocab.empty()) {
    return std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_file(config.data.vocab, options));
  }
  if (fsys::is_directory(config.model.config)) {
    if (auto tok = load_model_dir_tokenizer(config.model.config, options)) return tok;
    // A pretrained model's tokenizer is part of it: a vocabulary built from
    // the data would not match its embeddings.
    fail("model.config: no tokenizer.json, vocab.txt, vocab.json+merges.txt or spm.model/sentencepiece.bpe.model in "
         "{}; copy the tokenizer files saved with the model into it, or point data.vocab at the model's vocab.txt",
         config.model.config);
  }
  fail("{}: data.vocab is not set; point it at a vocab.txt or make one with `ft vocab build --data {} --out vocab.txt`",
       config.source, config.data.train);
}

namespace {

class SubsetDataset final : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<Dataset> base, std::vector<int64_t> rows)
      : base_(std::move(base)), rows_(std::move(rows)) {}
  int64_t size() const override { return static_cast<int64_t>(rows_.size()); }
  int64_t num_labels() const override { return base_->num_labels(); }
  ProblemType problem_type() const override { return base_->problem_type(); }
  bool labels_per_token() const override { return base_->labels_per_token(); }
  std::vector<int64_t> labels() const override {
    auto all = base_->labels();
    return all.empty() ? all : pick(all);  // empty: not class ids (Dataset::labels)
  }
  std::vector<int64_t> lengths() const override { return pick(base_->lengths()); }
  std::vector<int64_t> lengths_of(const std::vector<int64_t>& rows) const override {
    return base_->lengths_of(base_rows(rows));
  }
  Batch collate(const std::vector<int64_t>& rows) const override { return base_->collate(base_rows(rows)); }

 private:
  std::vector<int64_t> base_rows(const std::vector<int64_t>& rows) const {
    std::vector<int64_t> mapped;
    mapped.reserve(rows.size());
    for (int64_t r : rows) mapped.push_back(rows_.at(r));
    return mapped;
  }
  // The subset's entries of a per-row vector of the base dataset.
  std::vector<int64_t> pick(const std::vector<int64_t>& all) const {
    std::vector<int64_t> out;
    out.reserve(rows_.size());
    for (int64_t r : rows_) out.push_back(all[static_cast<size_t>(r)]);
    return out;
  }

  std::shared_ptr<Dataset> base_;
  std::vector<int64_t> rows_;
};

// Whether a classifier trained for `before` cannot serve `after`: another
// number of labels, or other names (transformers' generic LABEL_i and plain
// ids name nothing, so they never force a new head).
bool relabelled(const std::vector<std::string>& before, const std::vector<std::string>& after) {
  if (before.size() != after.size()) return true;
  auto named = [](const std::vector<std::string>& names) {
    return std::none_of(names.begin(), names.end(), [](const std::string& n) {
      return n.empty() || n.rfind("LABEL_", 0) == 0 || n.find_first_not_of("0123456789") == std::string::npos;
    });
  };
  if (!named(before) || !named(after)) return false;
  return std::set<std::string>(before.begin(), before.end()) != std::set<std::string>(after.begin(), after.end());
}

std::vector<int64_t> all_rows(const Dataset& d) {
  std::vector<int64_t> rows(d.size());
  std::iota(rows.begin(), rows.end(), 0);
  return rows;
}

}  // namespace

namespace detail {

Padding parse_padding(const std::string& s) {
  return s == "max_length" ? Padding::MaxLength : Padding::Longest;
}

DataSource make_source(const RunConfig& config, const std::string& path) {
  const auto& d = config.data;
  DataSource src;
  src.path = path;
  src.format = parse_data_format(d.format);
  src.text_field = d.text_field;
  src.pair_field = d.pair_field;
  src.label_field = d.label_field;
  src.max_rows = d.max_rows;
  src.take = d.take == "random" ? Take::Random : Take::First;
  src.take_seed = static_cast<uint64_t>(d.split_seed);
  src.strip_spaces = d.strip_spaces;
  src.bad_rows = d.bad_rows == "skip" ? BadRows::Skip : BadRows::Error;
  src.label_names = d.labels;
  src.problem_type = parse_problem_type(config.model.problem_type);  // empty: nullopt
  src.label_delimiter = d.label_delimiter;
  src.label_scale = d.label_scale;
  return src;
}

void attach_tokenizer(const RunConfig& config, RunInputs& in) {
  const auto& d = config.data;
  in.tokenizer = load_tokenizer(config);
  if (in.tokenizer->vocab_size() != in.model_config.vocab_size) {
    if (in.initial_weights) {
      fail("{}: the tokenizer has {} tokens but the model's vocab_size is {}; use the tokenizer the weights were "
           "trained with",
           d.vocab.empty() ? config.model.config : d.vocab, in.tokenizer->vocab_size(), in.model_config.vocab_size);
    }
    in.model_config.vocab_size = in.tokenizer->vocab_size();  // random init: size the embeddings to the vocab
  }
  if (d.max_seq_len > in.model_config.max_tokens()) {
    fail("data.max_seq_len {} exceeds the {} positions of the model (max_position_embeddings {})", d.max_seq_len,
         in.model_config.max_tokens(), in.model_config.max_position_embeddings);
  }
}

TrainDev read_train_dev(const RunConfig& config, int64_t& skipped, std::optional<ProblemType> model_problem) {
  const auto& d = config.data;
  auto source = make_source(config, d.train);
  if (!source.problem_type) source.problem_type = model_problem;
  TrainDev out;
  out.train = read_text_data(source);
  skipped = out.train.skipped;
  for (const auto& f : d.dev.files) {
    auto dev_source = make_source(config, f.path);
    dev_source.max_rows = 0;
    dev_source.label_names = out.train.label_names;
    dev_source.problem_type = out.train.problem_type;  // the dev file is read as the model was
    out.dev.emplace_back(f.name, read_text_data(dev_source));
    skipped += out.dev.back().second.skipped;
  }
  if (d.dev.empty() && d.dev_fraction > 0) {
    auto split = split_train_dev(std::move(out.train), d.dev_fraction, static_cast<uint64_t>(d.split_seed),
                                 d.shuffle_before_split);
    out.train = std::move(split.first);
    out.dev.emplace_back("", std::move(split.second));
  }
  return out;
}

std::string weights_source(const RunConfig& config) {
  if (!config.model.weights.empty() || !fsys::is_directory(config.model.config)) return config.model.weights;
  return config.model.config;
}

void resolve_weights(const RunConfig& config, RunInputs& in) {
  const std::string weights = weights_source(config);
  if (config.model.weights.empty() && !weights.empty()) {
    // A model or checkpoint directory brings its weights; with a manifest, a
    // missing model.safetensors is named by the verification. A directory is
    // never silently trained from scratch: that is what config.json alone is for.
    const fsys::path dir(config.model.config);
    if (!fsys::exists(dir / "model.safetensors") && !fsys::exists(dir / "pytorch_model.bin") &&
        !fsys::exists(dir / kManifestFile)) {
      fail("model.config: {} has no model.safetensors or pytorch_model.bin; to train from random init point "
           "model.config at {}",
           dir.string(), (dir / "config.json").string());
    }
  }
  if (!weights.empty()) {
    in.initial_weights = read_model_weights(weights);
    in.weights_source = weights;
  }
}

}  // namespace detail

namespace {
using detail::make_source;
using detail::parse_padding;

// Pre-tokenized data: the label count comes from the model config.
// Train and dev rows of `all`: all of it to train when data.dev names a file
// (read by the caller) or no dev split is asked for, else the seeded split.
void split_dataset(const RunConfig& config, std::shared_ptr<Dataset> all, RunInputs& in) {
  const auto& d = config.data;
  if (!d.dev.empty() || d.dev_fraction <= 0) {
    in.train = subset(all, all_rows(*all));
    return;
  }
  std::vector<int64_t> perm(all->size());
  std::iota(perm.begin(), perm.end(), 0);
  if (d.shuffle_before_split) perm = seeded_permutation(all->size(), static_cast<uint64_t>(d.split_seed));
  const auto n_dev = static_cast<int64_t>(std::llround(all->size() * d.dev_fraction));
  std::vector<int64_t> train_rows(perm.begin(), perm.end() - n_dev), dev_rows(perm.end() - n_dev, perm.end());
  in.train = subset(all, train_rows);
  in.dev.push_back({"", subset(all, dev_rows)});
}

void prepare_tensor_inputs(const RunConfig& config, RunInputs& in) {
  const auto& d = config.data;
  const Padding padding = parse_padding(d.padding);
  std::shared_ptr<Dataset> all = load_tensor_dataset(d.train, in.model_config.num_labels, padding, d.max_rows);
  split_dataset(config, all, in);
  for (const auto& f : d.dev.files) {
    in.dev.push_back({f.name, load_tensor_dataset(f.path, in.model_config.num_labels, padding)});
  }
  in.label_names = in.model_config.id2label;
  const bool per_token = in.train->labels_per_token();
  if (per_token != (config.task == RunConfig::Task::kTokenClassify)) {
    if (per_token) fail("{}: its labels are per token (I64 [rows, seq]): train it with --task token-classification", d.train);
    fail("{}: its labels are per row, but task is token-classification: give I64 labels [rows, seq] with -100 on "
         "unlabelled tokens",
         d.train);
  }
  if (per_token) {
    in.model_config.head = BertHead::kTokenClassification;
    return;
  }
  // Float labels are scores or label sets: the model must be built for them.
  const ProblemType type = in.train->problem_type();
  if (!config.model.problem_type.empty() && parse_problem_type(config.model.problem_type) != type) {
    fail("{}: its labels are {} but model.problem_type is {}", d.train, problem_type_name(type),
         config.model.problem_type);
  }
  if (type == ProblemType::kRegression && in.model_config.num_labels != 1) {
    fail("{}: its labels are regression scores but the model has num_labels {}; give a config.json with num_labels 1",
         d.train, in.model_config.num_labels);
  }
  if (config.model.problem_type.empty() && in.model_config.problem_type && *in.model_config.problem_type != type) {
    fail("{}: its labels are {} but {} says problem_type {}; set model.problem_type or use matching labels", d.train,
         problem_type_name(type), config.model.config, problem_type_name(*in.model_config.problem_type));
  }
  if (type != ProblemType::kSingleLabel) in.model_config.problem_type = type;
}

void prepare_text_inputs(const RunConfig& config, RunInputs& in) {
  const auto& d = config.data;
  if (d.label_field.empty()) {
    fail("{}: data.label_field is empty; ft run trains a classifier and needs labels (unlabelled text is for "
         "ft pretrain)", config.source);
  }
  detail::attach_tokenizer(config, in);
  // A classifier's own problem_type (a checkpoint's config.json) decides
  // unless model.problem_type does; an encoder's leaves it to the data.
  const std::string classifier = head_names(in.model_config, BertHead::kSequenceClassification).output_weight;
  const bool has_classifier =
      in.initial_weights && std::any_of(in.initial_weights->begin(), in.initial_weights->end(),
                                        [&](const auto& named) { return named.first == classifier; });
  auto [train, dev] = detail::read_train_dev(
      config, in.skipped_rows, has_classifier ? in.model_config.problem_type : std::nullopt);
  std::vector<const TextData*> parts{&train};
  for (const auto& named : dev) parts.push_back(&named.second);
  for (const auto* part : parts) {  // a split's halves both carry the file's notes
    for (const auto& note : part->skip_notes) {
      if (in.skip_notes.size() < 5 && std::find(in.skip_notes.begin(), in.skip_notes.end(), note) == in.skip_notes.end())
        in.skip_notes.push_back(note);
    }
  }
  in.label_names = train.label_names;
  const bool regression = train.problem_type == ProblemType::kRegression;
  const auto n_labels = regression ? int64_t{1} : static_cast<int64_t>(in.label_names.size());
  if (has_classifier && !regression && relabelled(in.model_config.id2label, in.label_names)) {
    // Re-heading: the weights' classifier answers another question; as
    // from_pretrained(..., num_labels=N, ignore_mismatched_sizes=True) does,
    // the encoder is kept and the classifier starts afresh (said at load).
    in.notes.push_back(fmt::format("re-heading: the weights classify into [{}], the data into [{}]: new classifier",
                                   fmt::join(in.model_config.id2label, ", "), fmt::join(in.label_names, ", ")));
    in.replace_classifier = in.model_config.num_labels == n_labels;
  }
  // Weights without a classifier (an encoder, an ft pretrain checkpoint) get a fresh one of the data's size.
  in.model_config.num_labels = n_labels;
  in.model_config.id2label = in.label_names;
  in.model_config.problem_type = train.problem_type;
  in.model_config.text_pair = !d.pair_field.empty();
  const Padding padding = parse_padding(d.padding);
  const int max_len = static_cast<int>(d.max_seq_len);
  const PairTruncation pair_rule = d.pair_truncation == "slow" ? PairTruncation::kSlow : PairTruncation::kFast;
  in.train = make_text_dataset(std::move(train), in.tokenizer, max_len, padding, pair_rule);
  for (auto& [name, rows] : dev) {
    if (rows.rows.empty()) continue;
    in.dev.push_back({name, make_text_dataset(std::move(rows), in.tokenizer, max_len, padding, pair_rule)});
  }
}

// Word/tag data (token classification): the tags' names become the labels.
void prepare_tagged_inputs(const RunConfig& config, RunInputs& in, BertHead weights_head) {
  const auto& d = config.data;
  detail::attach_tokenizer(config, in);
  TaggedSource source;
  source.path = d.train;
  source.words_field = d.tokens_field;
  source.tags_field = d.tags_field;
  source.scheme = d.tag_scheme == "any" ? TagScheme::Any : TagScheme::Iob2;
  source.label_names = d.labels;
  TaggedData train = read_tagged_data(source);
  if (d.max_rows > 0 && static_cast<int64_t>(train.rows.size()) > d.max_rows) train.rows.resize(static_cast<size_t>(d.max_rows));
  in.label_names = train.label_names;
  const auto n_labels = static_cast<int64_t>(in.label_names.size());
  const bool has_classifier =
      in.initial_weights && std::any_of(in.initial_weights->begin(), in.initial_weights->end(),
                                        [](const auto& named) { return named.first == "classifier.weight"; });
  if (has_classifier && (weights_head != BertHead::kTokenClassification ||
                         relabelled(in.model_config.id2label, in.label_names))) {
    // Another task's classifier, or another tag set: the encoder is kept and the classifier starts afresh.
    in.notes.push_back(fmt::format("re-heading: the weights' classifier is not a token classifier for [{}]: new classifier",
                                   fmt::join(in.label_names, ", ")));
    in.replace_classifier = in.model_config.num_labels == n_labels;
  }
  in.model_config.head = BertHead::kTokenClassification;
  in.model_config.num_labels = n_labels;
  in.model_config.id2label = in.label_names;
  in.model_config.problem_type = std::nullopt;
  in.model_config.text_pair = false;
  const Padding padding = parse_padding(d.padding);
  const int max_len = static_cast<int>(d.max_seq_len);
  std::shared_ptr<Dataset> all;
  source.label_names = in.label_names;  // the dev files are read with the train file's ids
  for (const auto& f : d.dev.files) {
    source.path = f.path;
    in.dev.push_back(
        {f.name, make_tagged_dataset(read_tagged_data(source), in.tokenizer, max_len, padding, d.label_all_tokens)});
  }
  all = make_tagged_dataset(std::move(train), in.tokenizer, max_len, padding, d.label_all_tokens);
  split_dataset(config, all, in);
}

}  // namespace

std::unique_ptr<Dataset> subset(std::shared_ptr<Dataset> base, std::vector<int64_t> rows) {
  return std::make_unique<SubsetDataset>(std::move(base), std::move(rows));
}

BertConfig planned_model_config(const RunConfig& config) {
  BertConfig c = resolve_model_config(config);
  c.head = config.task == RunConfig::Task::kTokenClassify ? BertHead::kTokenClassification
                                                          : BertHead::kSequenceClassification;
  if (config.task == RunConfig::Task::kSentenceEmbedding) detail::apply_sentence_modules(config, c);
  // As attach_tokenizer: a random-init model reading text gets its tokenizer's vocabulary.
  const bool text = !config.data.train.empty() &&
                    detect_data_format(config.data.train, parse_data_format(config.data.format)) != DataFormat::Safetensors;
  if (text && detail::weights_source(config).empty()) c.vocab_size = load_tokenizer(config)->vocab_size();
  if (!config.data.labels.empty()) c.num_labels = static_cast<int64_t>(config.data.labels.size());
  if (config.model.problem_type == "regression") c.num_labels = 1;
  return c;
}

RunInputs prepare_inputs(const RunConfig& config) {
  require_default_data(config);
  RunInputs in;
  in.model_config = resolve_model_config(config);
  const BertHead weights_head = in.model_config.head;
  in.model_config.head = BertHead::kSequenceClassification;  // whatever the weights were trained as
  detail::resolve_weights(config, in);
  if (config.data.train.empty()) fail("{}: data.train is not set", config.source);
  if (config.task == RunConfig::Task::kSentenceEmbedding) {
    detail::prepare_sentence_inputs(config, in);  // text or pre-tokenized columns
  } else if (detect_data_format(config.data.train, parse_data_format(config.data.format)) == DataFormat::Safetensors) {
    prepare_tensor_inputs(config, in);
  } else if (config.task == RunConfig::Task::kTokenClassify) {
    prepare_tagged_inputs(config, in, weights_head);
  } else {
    prepare_text_inputs(config, in);
  }
  if (in.train->size() == 0) fail("{}: no training rows", config.data.train);
  return in;
}

}  // namespace ft
