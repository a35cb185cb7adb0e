// Training data: files -> labelled text rows -> train/dev split -> batches.
//
// Text data (JSON list, JSON Lines, CSV, TSV) is read whole into a TextData,
// split with a platform-independent seeded shuffle, and tokenized lazily in
// Dataset::collate (the seeds timed tokenisation inside the epoch loop).
// Pre-tokenized safetensors data (the parity/bench fixtures) skips the
// tokenizer and is sliced in collate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ft/base/problem_type.h"
#include "ft/tokenizer/tokenizer.h"  // PairTruncation
#include "ft/base/types.h"

namespace ft {


/// File formats. Auto picks by extension: .json -> JsonList, .jsonl/.ndjson
/// -> JsonLines, .csv -> Csv, .tsv/.tab -> Tsv, .safetensors -> Safetensors;
/// any other extension by content ('[' -> JsonList, '{' -> JsonLines).
enum class DataFormat { Auto, JsonList, JsonLines, Csv, Tsv, Safetensors };

/// What a malformed row does: stop with an ft::Error naming it, or be
/// counted in TextData::skipped.
enum class BadRows { Error, Skip };

/// Which max_rows rows to keep: the file's first N (as the seeds), or N
/// drawn with take_seed (for files sorted by label), kept in file order.
enum class Take { First, Random };

/// "auto", "json", "jsonl", "csv", "tsv", "safetensors" -> DataFormat;
/// ft::Error listing the known names otherwise.
DataFormat parse_data_format(std::string_view name);
std::string to_string(DataFormat format);

/// The concrete format of `path` (reads the first bytes when the extension
/// is unknown). Never returns Auto; ft::Error naming the file if undecidable.
DataFormat detect_data_format(const std::string& path, DataFormat requested = DataFormat::Auto);

/// Where text rows come from and how to read them.
struct DataSource {
  std::string path;
  DataFormat format = DataFormat::Auto;
  /// JSON objects / JSONL / CSV / TSV columns. A JSON list of arrays is
  /// positional instead: [text, label] or [text, pair, label].
  std::string text_field = "text";
  std::string pair_field = "";  ///< empty: single sentences
  std::string label_field = "label";
  int64_t max_rows = 0;  ///< 0 = all rows
  Take take = Take::First;
  uint64_t take_seed = 0;  ///< for Take::Random
  /// Remove ASCII spaces from text and pair (Weibo text is space-segmented).
  bool strip_spaces = false;
  BadRows bad_rows = BadRows::Error;
  /// Fixes the label ids (their order). Labels in the file may then be these
  /// names or integer ids in [0, size). Empty: inferred (see read_text_data).
  std::vector<std::string> label_names;
  /// What the labels are; nullopt: inferred from the rows (read_text_data).
  std::optional<ProblemType> problem_type;
  /// Multi-label labels held in one string, cut here ("a|b"); non-empty
  /// makes the data multi-label.
  std::string label_delimiter;
  /// Regression labels are divided by this.
  double label_scale = 1.0;
};

struct TextExample {
  std::string text;
  std::string pair;  ///< empty for single sentences
  int64_t label = 0;                ///< single-label: the class id
  std::vector<int64_t> label_set;   ///< multi-label: the class ids, ascending, unique
  double score = 0.0;               ///< regression: the label over label_scale
};

struct TextData {
  std::vector<TextExample> rows;
  std::vector<std::string> label_names;  ///< id -> name; size = num_labels (regression: none)
  ProblemType problem_type = ProblemType::kSingleLabel;
  int64_t skipped = 0;                   ///< bad rows dropped under BadRows::Skip
  std::vector<std::string> skip_notes;   ///< the first few skipped rows' messages
  std::string source;                    ///< the file read
};

/// Reads a text data file.
///
/// Labels: with label_names given, a string label must be one of them (or an
/// integer literal naming an id) and an integer id must be in [0, size).
/// Without, the label set is inferred from the rows read: integer ids (JSON
/// numbers or integer literals in CSV) give names "0".."max" (negative ids
/// are bad rows); names give their sorted unique set; mixing both is a bad
/// row. Strings are UTF-8 validated; empty text is allowed.
///
/// The problem type, unless source.problem_type fixes it, is inferred as
/// transformers' examples infer it from a dataset's label column: a list of
/// labels per row (or a label_delimiter) is multi-label, numbers of which
/// any has a fraction are regression, anything else single-label. Rows that
/// disagree with the rows before them are bad rows, as is a regression
/// label that is not a number or a multi-label item not in label_names.
///
/// Errors are one line: "<file>: row N: <problem>; <fix>", N 1-based: the
/// element index for a JSON list, the line number for JSONL/CSV/TSV (the
/// header is line 1; a CSV record spanning lines counts from its first).
/// An unreadable, empty or rowless file is an ft::Error naming the file.
TextData read_text_data(const DataSource& source);

/// read_text_data on bytes already in memory (the fuzz targets use it):
/// `source.path` only names the data in messages and `source.format` must
/// be json, jsonl, csv or tsv (there is no file to sniff). A leading UTF-8
/// BOM is skipped.
TextData parse_text_data(std::string_view bytes, const DataSource& source);

/// Splits into (train, dev): a seeded Fisher-Yates shuffle (platform
/// independent, see seeded_permutation) unless !shuffle, then dev = the last
/// llround(n * dev_fraction) rows. dev_fraction must be in [0, 1). Both
/// halves keep label_names, source and the skip counts.
std::pair<TextData, TextData> split_train_dev(TextData all, double dev_fraction, uint64_t seed,
                                              bool shuffle = true);

/// Longest: pad each batch to its longest row. MaxLength: always pad to
/// max_length (the seeds' choice; fixed shapes).
enum class Padding { Longest, MaxLength };

/// Random-access rows that collate into a Batch.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t num_labels() const = 0;
  /// What collate()'s labels are: single-label [rows] int64 class ids,
  /// multi-label [rows, num_labels] float 0/1, regression [rows] float.
  virtual ProblemType problem_type() const { return ProblemType::kSingleLabel; }
  /// Every row's label id, for metrics and class counts; empty unless the
  /// labels are single-label class ids.
  virtual std::vector<int64_t> labels() const = 0;
  /// CPU int64 tensors for `rows` (any order, repeats allowed), in that
  /// order; padding positions have the pad id, mask 0 and token type 0.
  /// ft::Error on an index outside [0, size()). Safe to call concurrently.
  virtual Batch collate(const std::vector<int64_t>& rows) const = 0;
  /// Tokens of every row after truncation, pads excluded (group_by_length).
  virtual std::vector<int64_t> lengths() const = 0;
  /// The same for `rows` alone, cheaply (one global batch per step: the
  /// sampler balances ranks by it); empty where a dataset cannot say so
  /// without reading every row, which leaves the ranks' slices contiguous.
  virtual std::vector<int64_t> lengths_of(const std::vector<int64_t>& rows) const {
    (void)rows;
    return {};
  }
  /// Token classification: collate() gives `positions` and one label per
  /// labelled token (set_token_labels) rather than one per row.
  virtual bool labels_per_token() const { return false; }
  /// Rows are extracted features (make_feature_dataset): collate() gives
  /// Batch::features and no tokens.
  virtual bool extracted_features() const { return false; }
};

/// `inputs` as one batch of `width` columns (at least the longest input):
/// after each row's own tokens, the pad id, mask 0 and token type 0.
Batch pad_encodings(const std::vector<const Encoding*>& inputs, int64_t pad_id, int64_t width);

/// Token classification's labels: per_token [rows, seq] int64 with
/// kIgnoreLabel (-100) where a token has none -> batch.positions (the flat
/// positions of the labelled tokens) and batch.labels (their labels).
void set_token_labels(Batch& batch, const at::Tensor& per_token);

/// Text rows tokenized in collate with `tok` (truncated to max_length; pairs
/// by `pair_rule`).
std::unique_ptr<Dataset> make_text_dataset(TextData data,
                                           std::shared_ptr<const Tokenizer> tok,
                                           int max_length, Padding padding,
                                           PairTruncation pair_rule = PairTruncation::kFast);

/// Word/tag rows (token classification, ft/tasks/token_classification.h)
/// tokenized in collate with encode_words (truncated to max_length), the
/// word tags aligned onto the tokens by run_ner.py's rule (LabelAligner).
struct TaggedData;
std::unique_ptr<Dataset> make_tagged_dataset(TaggedData data, std::shared_ptr<const Tokenizer> tok, int max_length,
                                             Padding padding, bool label_all_tokens);

/// Pre-tokenized rows: a safetensors file with I64 input_ids,
/// attention_mask, token_type_ids [N, L] and labels [N] (I64 [N, L] with
/// -100 on unlabelled tokens: token classification). Names, dtypes,
/// shapes and label range are validated (ft::Error naming file and tensor).
/// num_labels <= 0: max label + 1. max_rows > 0 keeps the first rows.
/// Longest trims the batch's trailing columns whose attention_mask is 0 on
/// every row; MaxLength keeps all L columns.
std::unique_ptr<Dataset> load_tensor_dataset(const std::string& path, int64_t num_labels,
                                             Padding padding, int64_t max_rows = 0);

/// Rows of extracted features (`ft features extract`): `features` float
/// [N, d] and class ids `labels` int64 [N] in [0, num_labels) (ft::Error
/// naming `source` otherwise). Every row counts as one token for
/// group_by_length.
std::unique_ptr<Dataset> make_feature_dataset(at::Tensor features, at::Tensor labels, int64_t num_labels,
                                              std::string source);

}  // namespace ft
