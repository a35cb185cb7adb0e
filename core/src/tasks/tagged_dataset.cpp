// Word/tag rows as a Dataset: each row's words through the tokenizer's
// encode_words, its tags onto the tokens (ft/tasks/token_classification.h), and
// the labelled tokens' positions in the batch (set_token_labels).
#include <algorithm>
#include <cstring>

#include <ATen/ATen.h>

#include "ft/data/data.h"
#include "ft/base/error.h"
#include "ft/tasks/token_classification.h"

namespace ft {
namespace {

class TaggedDataset final : public Dataset {
 public:
  TaggedDataset(TaggedData data, std::shared_ptr<const Tokenizer> tok, int max_length, Padding padding,
                bool label_all_tokens)
      : data_(std::move(data)),
        tok_(std::move(tok)),
        max_length_(max_length),
        padding_(padding),
        aligner_(data_.label_names, label_all_tokens) {
    if (!tok_) fail("{}: word/tag data needs a tokenizer (none was given)", data_.source);
    if (max_length_ < 3) fail("{}: max_seq_len is {}; a word needs at least 3 tokens with [CLS] and [SEP]", data_.source, max_length_);
  }

  int64_t size() const override { return static_cast<int64_t>(data_.rows.size()); }
  int64_t num_labels() const override { return static_cast<int64_t>(data_.label_names.size()); }
  std::vector<int64_t> labels() const override { return {}; }  // tags per word, not a class per row
  bool labels_per_token() const override { return true; }

  std::vector<int64_t> lengths() const override {
    std::vector<int64_t> out;
    out.reserve(data_.rows.size());
    for (size_t r = 0; r < data_.rows.size(); ++r) out.push_back(encode(static_cast<int64_t>(r)).encoding.input_ids.size());
    return out;
  }

  Batch collate(const std::vector<int64_t>& rows) const override {
    const auto n = static_cast<int64_t>(rows.size());
    std::vector<WordsEncoding> enc(rows.size());
    int64_t width = padding_ == Padding::MaxLength ? max_length_ : 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= size())
        fail("{}: row index {} is outside the dataset's {} rows (sampler and dataset disagree)", data_.source, rows[i], size());
      enc[i] = encode(rows[i]);
      width = std::max<int64_t>(width, static_cast<int64_t>(enc[i].encoding.input_ids.size()));
    }
    const auto opts = at::TensorOptions().dtype(at::kLong);
    Batch b;
    b.input_ids = at::full({n, width}, tok_->pad_id(), opts);
    b.attention_mask = at::zeros({n, width}, opts);
    b.token_type_ids = at::zeros({n, width}, opts);
    at::Tensor per_token = at::full({n, width}, kIgnoreLabel, opts);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Encoding& e = enc[i].encoding;
      const auto len = static_cast<int64_t>(e.input_ids.size());
      const size_t bytes = static_cast<size_t>(len) * sizeof(int64_t);
      const int64_t off = static_cast<int64_t>(i) * width;
      std::memcpy(b.input_ids.data_ptr<int64_t>() + off, e.input_ids.data(), bytes);
      std::memcpy(b.attention_mask.data_ptr<int64_t>() + off, e.attention_mask.data(), bytes);
      std::memcpy(b.token_type_ids.data_ptr<int64_t>() + off, e.token_type_ids.data(), bytes);
      const std::vector<int64_t> labels =
          aligner_.align(enc[i].word_ids, data_.rows[static_cast<size_t>(rows[i])].tags);
      std::memcpy(per_token.data_ptr<int64_t>() + off, labels.data(), bytes);
    }
    set_token_labels(b, per_token);
    return b;
  }

 private:
  WordsEncoding encode(int64_t row) const {
    try {
      return tok_->encode_words(data_.rows[static_cast<size_t>(row)].words, max_length_, false);
    } catch (const Error& e) {
      fail("{}: sentence {}: {}", data_.source, row + 1, e.what());
    }
  }

  TaggedData data_;
  std::shared_ptr<const Tokenizer> tok_;
  int max_length_;
  Padding padding_;
  LabelAligner aligner_;
};

}  // namespace

std::unique_ptr<Dataset> make_tagged_dataset(TaggedData data, std::shared_ptr<const Tokenizer> tok, int max_length,
                                             Padding padding, bool label_all_tokens) {
  return std::make_unique<TaggedDataset>(std::move(data), std::move(tok), max_length, padding, label_all_tokens);
}

}  // namespace ft
