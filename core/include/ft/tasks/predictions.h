// What `ft predict` prints for one input, per problem type, as transformers'
// text-classification pipeline reports it: single-label softmax
// probabilities and the best label; multi-label a sigmoid per label and the
// labels at or above the threshold; regression the score itself (the
// pipeline's function_to_apply="none").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ft/model/model.h"

namespace ft {

/// Class `k`'s name: config.json's id2label, else transformers' "LABEL_<k>".
std::string label_name(const BertConfig& config, int64_t k);

/// One input of `ft predict`: a text, or a sentence pair.
struct PredictInput {
  std::string text;
  std::optional<std::string> text_pair;
};

/// A line of input: a JSON object {"text", "text_pair"?}, else `text<TAB>
/// text_pair`, else the whole line as one text. A model trained on pairs
/// (config.text_pair) refuses a single text with one line naming `source`.
PredictInput parse_predict_input(std::string_view line, const BertConfig& config, const std::string& source);

/// Token classification: {"text", "entities": [{"entity_group", "score",
/// "word", "start", "end"}]} as transformers' pipeline prints it, start and
/// end in code points (Python's str indices), word the text between them.
/// `entities` hold byte offsets (group_entities).
struct PredictedEntity;
nlohmann::ordered_json entity_record(const std::string& text, const std::vector<PredictedEntity>& entities);

/// The output record of `input` given the model's `logits` ([num_labels]).
nlohmann::ordered_json prediction_record(const PredictInput& input, const at::Tensor& logits, const BertConfig& config,
                                         double threshold, bool with_logits);

}  // namespace ft
