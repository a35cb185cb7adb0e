// The sentence-embedding task's data: rows of texts in named columns, as
// sentence-transformers' datasets have them (anchor, positive, negative...;
// or sentence1, sentence2 and a score), in any text format ft reads.
//
// A batch of B rows holds k columns as k blocks of B model rows, column
// after column ([anchors; positives; negatives]), padded to one width, so
// one forward embeds them all. Its labels are the scores (float [B]) of
// scored pairs, else each anchor's positive: arange(B) (int64), which is
// also how the loss finds k (= model rows / B).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ft/data/data.h"
#include "ft/tokenizer/tokenizer.h"

namespace ft {

struct SentenceColumns {
  std::vector<std::string> names;               // text columns, in order
  std::vector<std::vector<std::string>> texts;  // [column][row]
  std::vector<double> scores;                   // per row; empty: no score column
  std::string score_name;                       // the score's column, when read
  std::string source;                           // the file
  int64_t rows() const { return texts.empty() ? 0 : static_cast<int64_t>(texts.front().size()); }
};

// The text columns and score of `source` (path, format, max_rows, take,
// strip_spaces and label_scale as ft::DataSource; bad rows are errors):
// `columns` when given, else the names sentence-transformers uses as the
// first row has them (anchor, positive, negative, negative_1, ...; else
// sentence1, sentence2). The score is column `score`, else
// source.label_field, when the first row has it. A row missing a column is
// an error naming the file, the row and the column.
SentenceColumns read_sentence_columns(DataSource source, const std::vector<std::string>& columns);

// The rows of `data`, tokenized in collate (each text alone, truncated to
// max_length) and laid out as described above.
std::unique_ptr<Dataset> make_sentence_dataset(SentenceColumns data, std::shared_ptr<const Tokenizer> tok,
                                               int max_length, Padding padding);

// Pre-tokenized rows: a safetensors file with, per text column c, I64
// `c.input_ids` and `c.attention_mask` [N, L] (`c.token_type_ids`
// optional), and F32 `score` [N] for scored pairs; the columns as
// read_sentence_columns names them. max_rows > 0 keeps the first rows.
std::unique_ptr<Dataset> load_sentence_tensors(const std::string& path, const std::vector<std::string>& columns,
                                               Padding padding, int64_t max_rows = 0);

// The rows `rows` of `data` (a dev split).
SentenceColumns take_rows(const SentenceColumns& data, const std::vector<int64_t>& rows);

}  // namespace ft
