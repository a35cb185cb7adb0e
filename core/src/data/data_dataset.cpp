// Datasets that collate row indices into ft::Batch: tokenized-on-the-fly text
// and pre-tokenized safetensors.
#include <algorithm>
#include <cstring>
#include <numeric>

#include <ATen/ATen.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/core/TensorOptions.h>
#include <fmt/ranges.h>

#include "ft/data/data.h"
#include "ft/base/error.h"
#include "ft/io/safetensors.h"
#include "ft/tokenizer/tokenizer.h"

namespace ft {
namespace {

at::Tensor empty_long(at::IntArrayRef shape) {
  return at::empty(shape, at::TensorOptions().dtype(at::kLong));
}

// Attended positions of each row of a mask, wherever they are.
std::vector<int64_t> attended_per_row(const at::Tensor& mask) {
  const at::Tensor attended = mask.ne(0).sum(1);
  const int64_t* p = attended.data_ptr<int64_t>();
  return {p, p + attended.size(0)};
}

void check_rows(const std::vector<int64_t>& rows, int64_t size, const std::string& source) {
  for (int64_t r : rows)
    if (r < 0 || r >= size)
      fail("{}: row index {} is outside the dataset's {} rows (sampler and dataset disagree)",
           source, r, size);
}

}  // namespace

Batch pad_encodings(const std::vector<const Encoding*>& inputs, int64_t pad_id, int64_t width) {
  const auto n = static_cast<int64_t>(inputs.size());
  for (const Encoding* e : inputs) {
    if (static_cast<int64_t>(e->input_ids.size()) > width)
      fail("pad_encodings: an input of {} tokens is wider than the batch's {} columns", e->input_ids.size(), width);
  }
  Batch b;
  b.input_ids = empty_long({n, width});
  b.attention_mask = empty_long({n, width});
  b.token_type_ids = empty_long({n, width});
  int64_t* ids = b.input_ids.data_ptr<int64_t>();
  int64_t* mask = b.attention_mask.data_ptr<int64_t>();
  int64_t* types = b.token_type_ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const Encoding& e = *inputs[static_cast<size_t>(i)];
    const auto len = static_cast<int64_t>(e.input_ids.size());
    const int64_t off = i * width;
    std::memcpy(ids + off, e.input_ids.data(), static_cast<size_t>(len) * sizeof(int64_t));
    std::memcpy(mask + off, e.attention_mask.data(), static_cast<size_t>(len) * sizeof(int64_t));
    std::memcpy(types + off, e.token_type_ids.data(), static_cast<size_t>(len) * sizeof(int64_t));
    std::fill(ids + off + len, ids + off + width, pad_id);
    std::fill(mask + off + len, mask + off + width, int64_t{0});
    std::fill(types + off + len, types + off + width, int64_t{0});
  }
  return b;
}

namespace {

class TextDataset final : public Dataset {
 public:
  TextDataset(TextData data, std::shared_ptr<const Tokenizer> tok, int max_length,
              Padding padding, PairTruncation pair_rule)
      : data_(std::move(data)), tok_(std::move(tok)), max_length_(max_length), padding_(padding),
        pair_rule_(pair_rule) {
    if (!tok_) fail("{}: text data needs a tokenizer (none was given)", data_.source);
    has_pairs_ = std::any_of(data_.rows.begin(), data_.rows.end(),
                             [](const TextExample& r) { return !r.pair.empty(); });
    const int specials = has_pairs_ ? 3 : 2;
    if (max_length_ < specials)
      fail("{}: max_seq_len is {}; it must be at least {} ([CLS], [SEP]{})", data_.source,
           max_length_, specials, has_pairs_ ? ", [SEP]" : "");
    if (data_.label_names.empty() && data_.problem_type != ProblemType::kRegression)
      fail("{}: the dataset has no label names; read it with read_text_data", data_.source);
  }

  int64_t size() const override { return static_cast<int64_t>(data_.rows.size()); }
  int64_t num_labels() const override {
    return data_.problem_type == ProblemType::kRegression ? 1 : static_cast<int64_t>(data_.label_names.size());
  }
  ProblemType problem_type() const override { return data_.problem_type; }

  std::vector<int64_t> labels() const override {
    std::vector<int64_t> out;
    if (data_.problem_type != ProblemType::kSingleLabel) return out;
    out.reserve(data_.rows.size());
    for (const auto& r : data_.rows) out.push_back(r.label);
    return out;
  }

  std::vector<int64_t> lengths() const override {
    std::vector<int64_t> all(data_.rows.size());
    std::iota(all.begin(), all.end(), int64_t{0});
    return lengths_of(all);
  }
  std::vector<int64_t> lengths_of(const std::vector<int64_t>& rows) const override {
    std::vector<int64_t> out;
    out.reserve(rows.size());
    for (int64_t r : rows) out.push_back(static_cast<int64_t>(encode(r).input_ids.size()));
    return out;
  }

  Batch collate(const std::vector<int64_t>& rows) const override {
    check_rows(rows, size(), data_.source);
    std::vector<Encoding> enc(rows.size());
    std::vector<const Encoding*> views(rows.size());
    int64_t width = padding_ == Padding::MaxLength ? max_length_ : 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      enc[i] = encode(rows[i]);
      views[i] = &enc[i];
      width = std::max<int64_t>(width, static_cast<int64_t>(enc[i].input_ids.size()));
    }
    Batch b = pad_encodings(views, tok_->pad_id(), width);
    b.labels = collate_labels(rows);
    return b;
  }

 private:
  // What the loss reads (Dataset::problem_type).
  at::Tensor collate_labels(const std::vector<int64_t>& rows) const {
    const auto n = static_cast<int64_t>(rows.size());
    if (data_.problem_type == ProblemType::kSingleLabel) {
      at::Tensor out = empty_long({n});
      int64_t* p = out.data_ptr<int64_t>();
      for (size_t i = 0; i < rows.size(); ++i) p[i] = data_.rows[static_cast<size_t>(rows[i])].label;
      return out;
    }
    if (data_.problem_type == ProblemType::kRegression) {
      at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
      float* p = out.data_ptr<float>();
      for (size_t i = 0; i < rows.size(); ++i) p[i] = static_cast<float>(data_.rows[static_cast<size_t>(rows[i])].score);
      return out;
    }
    const int64_t k = num_labels();
    at::Tensor out = at::zeros({n, k}, at::TensorOptions().dtype(at::kFloat));
    float* p = out.data_ptr<float>();
    for (size_t i = 0; i < rows.size(); ++i) {
      for (const int64_t id : data_.rows[static_cast<size_t>(rows[i])].label_set) p[static_cast<int64_t>(i) * k + id] = 1.0F;
    }
    return out;
  }

  Encoding encode(int64_t row) const {
    const TextExample& ex = data_.rows[static_cast<size_t>(row)];
    std::optional<std::string_view> pair;
    // A pair column makes every row a pair, even with an empty second text,
    // as HF does when given a pair list.
    if (has_pairs_) pair = ex.pair;
    try {
      return tok_->encode(ex.text, pair, max_length_, false, pair_rule_);
    } catch (const Error& e) {
      fail("{}: row {}: {}", data_.source, row + 1, e.what());
    }
  }

  TextData data_;
  std::shared_ptr<const Tokenizer> tok_;
  int max_length_;
  Padding padding_;
  PairTruncation pair_rule_;
  bool has_pairs_ = false;
};

class TensorDataset final : public Dataset {
 public:
  TensorDataset(std::string path, at::Tensor ids, at::Tensor mask, at::Tensor types,
                at::Tensor labels, int64_t num_labels, Padding padding)
      : path_(std::move(path)),
        ids_(std::move(ids)),
        mask_(std::move(mask)),
        types_(std::move(types)),
        labels_(std::move(labels)),
        num_labels_(num_labels),
        padding_(padding) {
    const int64_t n = ids_.size(0);
    const int64_t width = ids_.size(1);
    const int64_t* m = mask_.data_ptr<int64_t>();
    lengths_.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      int64_t len = 0;
      for (int64_t c = 0; c < width; ++c)
        if (m[r * width + c] != 0) len = c + 1;
      lengths_[static_cast<size_t>(r)] = len;
    }
  }

  int64_t size() const override { return ids_.size(0); }
  std::vector<int64_t> lengths() const override {
    return attended_per_row(mask_);  // not lengths_, the trailing cut
  }
  std::vector<int64_t> lengths_of(const std::vector<int64_t>& rows) const override {
    return attended_per_row(mask_.index_select(0, at::tensor(rows, at::kLong)));
  }
  int64_t num_labels() const override { return num_labels_; }
  bool labels_per_token() const override { return labels_.dim() == 2 && labels_.scalar_type() == at::kLong; }
  // Float labels: one score per row, or a 0/1 row per label (load_tensor_dataset).
  ProblemType problem_type() const override {
    if (labels_.scalar_type() == at::kLong) return ProblemType::kSingleLabel;
    return labels_.dim() == 1 ? ProblemType::kRegression : ProblemType::kMultiLabel;
  }

  std::vector<int64_t> labels() const override {
    if (labels_.scalar_type() != at::kLong || labels_per_token()) return {};
    const int64_t* p = labels_.data_ptr<int64_t>();
    return {p, p + labels_.size(0)};
  }

  Batch collate(const std::vector<int64_t>& rows) const override {
    check_rows(rows, size(), path_);
    const int64_t full = ids_.size(1);
    int64_t width = full;
    if (padding_ == Padding::Longest) {
      width = 1;  // keep at least one column so shapes stay valid
      for (int64_t r : rows) width = std::max(width, lengths_[static_cast<size_t>(r)]);
    }
    Batch b;
    b.input_ids = slice(ids_, rows, width);
    b.attention_mask = slice(mask_, rows, width);
    b.token_type_ids = slice(types_, rows, width);
    if (labels_per_token()) {
      set_token_labels(b, slice(labels_, rows, width));
    } else {
      b.labels = labels_.index_select(0, at::tensor(rows, at::kLong));
    }
    return b;
  }

 private:
  // The first `width` columns of the given rows.
  static at::Tensor slice(const at::Tensor& t, const std::vector<int64_t>& rows, int64_t width) {
    const int64_t full = t.size(1);
    at::Tensor out = empty_long({static_cast<int64_t>(rows.size()), width});
    const int64_t* src = t.data_ptr<int64_t>();
    int64_t* dst = out.data_ptr<int64_t>();
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(dst + static_cast<int64_t>(i) * width, src + rows[i] * full,
                  static_cast<size_t>(width) * sizeof(int64_t));
    return out;
  }

  std::string path_;
  at::Tensor ids_, mask_, types_, labels_;
  int64_t num_labels_;
  Padding padding_;
  std::vector<int64_t> lengths_;  // last attended column + 1, per row
};

std::string shape_string(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

}  // namespace

void set_token_labels(Batch& batch, const at::Tensor& per_token) {
  const at::Tensor flat = per_token.reshape({-1});
  batch.positions = flat.ne(kIgnoreLabel).nonzero().view({-1});  // ascending
  batch.labels = flat.index_select(0, batch.positions);
}

std::unique_ptr<Dataset> make_text_dataset(TextData data,
                                           std::shared_ptr<const Tokenizer> tok,
                                           int max_length, Padding padding, PairTruncation pair_rule) {
  return std::make_unique<TextDataset>(std::move(data), std::move(tok), max_length, padding, pair_rule);
}

std::unique_ptr<Dataset> load_tensor_dataset(const std::string& path, int64_t num_labels,
                                             Padding padding, int64_t max_rows) {
  safetensors::TensorList tensors = safetensors::load(path);
  auto get = [&](const char* name) {
    for (auto& [n, t] : tensors)
      if (n == name) {
        // Labels may be float: regression scores [rows] or multi-label [rows, labels].
        if (std::string(name) == "labels" && t.scalar_type() == at::kFloat) return t.contiguous();
        if (t.scalar_type() != at::kLong)
          fail("{}: tensor '{}' has dtype {}, expected I64; re-export it as int64", path, name,
               safetensors::dtype_name(t.scalar_type()));
        return t.contiguous();
      }
    fail("{}: no tensor '{}'; pre-tokenized data needs input_ids, attention_mask, "
         "token_type_ids and labels",
         path, name);
  };
  at::Tensor ids = get("input_ids");
  at::Tensor mask = get("attention_mask");
  at::Tensor types = get("token_type_ids");
  at::Tensor labels = get("labels");
  if (ids.dim() != 2 || ids.size(0) == 0 || ids.size(1) == 0)
    fail("{}: tensor 'input_ids' has shape {}, expected [rows, seq] with rows, seq >= 1", path,
         shape_string(ids));
  for (auto [name, t] : {std::pair{"attention_mask", &mask}, std::pair{"token_type_ids", &types}})
    if (!t->sizes().equals(ids.sizes()))
      fail("{}: tensor '{}' has shape {} but input_ids has {}; they must match", path, name,
           shape_string(*t), shape_string(ids));
  const bool multi_label = labels.scalar_type() == at::kFloat && labels.dim() == 2;
  const bool per_token = labels.scalar_type() == at::kLong && labels.dim() == 2;
  if ((labels.dim() != 1 && !multi_label && !per_token) || labels.size(0) != ids.size(0) ||
      (per_token && labels.size(1) != ids.size(1)))
    fail("{}: tensor 'labels' has shape {}, expected [{}] (one per input_ids row; F32 [{}, labels] for multi-label; "
         "I64 {} for token classification)",
         path, shape_string(labels), ids.size(0), ids.size(0), shape_string(ids));
  if (max_rows < 0) fail("{}: max_rows is {}; use 0 for all rows", path, max_rows);
  if (max_rows > 0 && max_rows < ids.size(0)) {
    ids = ids.narrow(0, 0, max_rows).contiguous();
    mask = mask.narrow(0, 0, max_rows).contiguous();
    types = types.narrow(0, 0, max_rows).contiguous();
    labels = labels.narrow(0, 0, max_rows).contiguous();
  }
  if (labels.scalar_type() == at::kFloat) {
    if (!labels.isfinite().all().item<bool>()) fail("{}: tensor 'labels' holds a NaN or an infinity", path);
    if (multi_label && num_labels > 0 && labels.size(1) != num_labels)
      fail("{}: tensor 'labels' has {} columns but the model has num_labels {}", path, labels.size(1), num_labels);
    if (multi_label && (labels.lt(0).any().item<bool>() || labels.gt(1).any().item<bool>()))
      fail("{}: tensor 'labels' holds multi-label targets outside [0, 1]", path);
    return std::make_unique<TensorDataset>(path, ids, mask, types, labels, multi_label ? labels.size(1) : 1, padding);
  }
  const int64_t* lab = labels.data_ptr<int64_t>();
  const int64_t per_row = per_token ? labels.size(1) : 1;
  const int64_t* m = mask.data_ptr<int64_t>();
  int64_t max_label = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (per_token && lab[i] == kIgnoreLabel) continue;
    if (lab[i] < 0 || (num_labels > 0 && lab[i] >= num_labels))
      fail("{}: tensor 'labels' row {}: label {} is outside [0, {}){}; check the model's num_labels", path,
           i / per_row + 1, lab[i], num_labels > 0 ? std::to_string(num_labels) : std::string("inf"),
           per_token ? " and is not -100" : "");
    if (per_token && m[i] == 0) fail("{}: tensor 'labels' row {}: a padding token has label {}; give it -100", path, i / per_row + 1, lab[i]);
    max_label = std::max(max_label, lab[i]);
  }
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (m[i] != 0 && m[i] != 1)
      fail("{}: tensor 'attention_mask' row {} has value {}; it must be 0 or 1", path,
           i / ids.size(1) + 1, m[i]);
    if (id[i] < 0)
      fail("{}: tensor 'input_ids' row {} has negative id {}", path, i / ids.size(1) + 1, id[i]);
  }
  return std::make_unique<TensorDataset>(path, ids, mask, types, labels,
                                         num_labels > 0 ? num_labels : max_label + 1, padding);
}

namespace {

// Extracted features: the model runs only the head's last projection on them.
class FeatureDataset final : public Dataset {
 public:
  FeatureDataset(at::Tensor features, at::Tensor labels, int64_t num_labels, std::string source)
      : features_(std::move(features)), labels_(std::move(labels)), num_labels_(num_labels), source_(std::move(source)) {}

  int64_t size() const override { return features_.size(0); }
  int64_t num_labels() const override { return num_labels_; }
  std::vector<int64_t> labels() const override {
    const int64_t* p = labels_.data_ptr<int64_t>();
    return {p, p + labels_.size(0)};
  }
  std::vector<int64_t> lengths() const override { return std::vector<int64_t>(static_cast<size_t>(size()), 1); }
  bool extracted_features() const override { return true; }
  Batch collate(const std::vector<int64_t>& rows) const override {
    check_rows(rows, size(), source_);
    const at::Tensor index = at::tensor(rows, at::kLong);
    Batch b;
    b.features = features_.index_select(0, index);
    b.labels = labels_.index_select(0, index);
    return b;
  }

 private:
  at::Tensor features_, labels_;
  int64_t num_labels_;
  std::string source_;
};

}  // namespace

std::unique_ptr<Dataset> make_feature_dataset(at::Tensor features, at::Tensor labels, int64_t num_labels,
                                              std::string source) {
  if (features.dim() != 2 || !features.is_floating_point()) {
    fail("{}: features must be a float [rows, d] tensor, not {} [{}]", source, c10::toString(features.scalar_type()),
         fmt::join(features.sizes(), ", "));
  }
  if (labels.dim() != 1 || labels.scalar_type() != at::kLong || labels.size(0) != features.size(0)) {
    fail("{}: labels must be int64 [{}] (one class id per feature row), not {} [{}]", source, features.size(0),
         c10::toString(labels.scalar_type()), fmt::join(labels.sizes(), ", "));
  }
  if (labels.numel() > 0 && (labels.min().item<int64_t>() < 0 || labels.max().item<int64_t>() >= num_labels)) {
    fail("{}: labels outside [0, {}): the features were extracted for another label set than the checkpoint's",
         source, num_labels);
  }
  return std::make_unique<FeatureDataset>(features.to(at::kFloat).contiguous(), labels.contiguous(), num_labels,
                                          std::move(source));
}

}  // namespace ft
