// Turning a RunConfig into what training needs: the model config and
// initial weights, the tokenizer, and the train/dev datasets. Every rank
// does this identically (same seeds), so no data is broadcast.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/data/data.h"
#include "ft/model/model.h"
#include "ft/tokenizer/tokenizer.h"

namespace ft {

// One evaluation set: its data.dev name ("" for a single dev file or the
// dev_fraction split) and its rows.
struct DevSet {
  std::string name;
  std::unique_ptr<Dataset> data;
};

struct RunInputs {
  BertConfig model_config;
  std::optional<TensorList> initial_weights;  // none: random init
  std::string weights_source;
  // Re-heading: the weights' classifier is for another label set of the same
  // size, so it starts afresh (another size is replaced by shape anyway).
  bool replace_classifier = false;
  std::shared_ptr<const Tokenizer> tokenizer;  // null for pre-tokenized data
  std::unique_ptr<Dataset> train;
  std::vector<DevSet> dev;  // in data.dev's order; empty: no evaluation
  // The first dev set (what single-set commands such as ft eval read); null: none.
  const Dataset* first_dev() const { return dev.empty() ? nullptr : dev.front().data.get(); }
  std::vector<std::string> label_names;
  int64_t skipped_rows = 0;
  std::vector<std::string> skip_notes;  // the first few skipped rows and why
  std::vector<std::string> notes;  // lines for the start of the run (what was read, left out)
  // A model the caller built (its PEFT method applied, its weights loaded):
  // trained as it is, instead of one built from model_config and
  // initial_weights. `trainable`, when set, names the parameters that train
  // (the rest stay frozen): a head fitted on extracted features.
  std::shared_ptr<EncoderModel> model;
  std::function<bool(const std::string&)> trainable;
};

// Resolves model.config (preset name, config.json or checkpoint directory)
// and applies the dropout override.
BertConfig resolve_model_config(const RunConfig& config);

// Loads the tokenizer named by data.vocab, else the model directory's (see
// load_model_dir_tokenizer).
std::shared_ptr<const Tokenizer> load_tokenizer(const RunConfig& config);

// The tokenizer a model or checkpoint directory ships: tokenizer.json when
// present (what AutoTokenizer reads first), else vocab.txt, else the
// SentencePiece model or vocab.json + merges.txt converted as transformers
// does (convert_model_dir_tokenizer); null when it has none of them.
// `options.lowercase` other than Auto overrides a WordPiece file's.
std::shared_ptr<const Tokenizer> load_model_dir_tokenizer(const std::string& dir,
                                                                   const TokenizerOptions& options = {});

RunInputs prepare_inputs(const RunConfig& config);

// The shape of the classifier prepare_inputs(config) leads to, without reading
// the data or the weights: resolve_model_config, a random-init model's word
// table sized to its tokenizer, and data.labels' count when it lists them (else
// the config's). ft bench's theory column counts this model.
BertConfig planned_model_config(const RunConfig& config);

// A view of some rows of another dataset (dev split of pre-tokenized data).
std::unique_ptr<Dataset> subset(std::shared_ptr<Dataset> base, std::vector<int64_t> rows);

}  // namespace ft
