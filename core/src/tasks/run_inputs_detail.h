// Private to the data TUs: the steps `ft run` (run_inputs.cpp) and
// `ft pretrain` (mlm.cpp) share, so both read a data section the same way.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ft/config/config.h"
#include "ft/data/data.h"
#include "ft/tasks/run_inputs.h"

namespace ft::detail {

Padding parse_padding(const std::string& s);
// The reader settings of data.* for `path`.
DataSource make_source(const RunConfig& config, const std::string& path);
// Loads data.vocab into in.tokenizer; sizes the model's vocabulary to it
// (random init) or checks they agree (initial weights); checks max_seq_len.
void attach_tokenizer(const RunConfig& config, RunInputs& in);
// data.train and the dev rows `ft run` evaluates on: each of data.dev's
// files, or the dev_fraction split (one unnamed set; none when neither).
struct TrainDev {
  TextData train;
  std::vector<std::pair<std::string, TextData>> dev;  // name, rows
};
// Reads them; adds the skipped bad rows to `skipped`. The labels are read
// as model.problem_type, else `model_problem`, else as they look; the dev
// files with the train file's label ids.
TrainDev read_train_dev(const RunConfig& config, int64_t& skipped,
                        std::optional<ProblemType> model_problem = std::nullopt);
// model.weights, else a model directory's own weights ("" for random init).
std::string weights_source(const RunConfig& config);
// Reads weights_source(config) into `in` (a model directory without weights is an error).
void resolve_weights(const RunConfig& config, RunInputs& in);
// Sentence embedding (tasks/sentence_inputs.cpp): the model's pooling
// modules, the tokenizer and the column data, after resolve_weights.
void prepare_sentence_inputs(const RunConfig& config, RunInputs& in);
// The sentence modules a run of `config` puts on the encoder `c`: the model
// directory's (modules.json), else embedding.pooling's; embedding.pooling
// and .normalize, when not auto, override the directory's.
void apply_sentence_modules(const RunConfig& config, BertConfig& c);

}  // namespace ft::detail
