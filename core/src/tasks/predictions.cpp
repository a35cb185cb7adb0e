// `ft predict`'s inputs and records (ft/tasks/predictions.h).
#include "ft/tasks/predictions.h"

#include <ATen/ATen.h>

#include "ft/base/error.h"
#include "ft/tasks/token_classification.h"

namespace ft {

std::string label_name(const BertConfig& config, int64_t k) {
  return k < static_cast<int64_t>(config.id2label.size()) ? config.id2label[static_cast<size_t>(k)]
                                                          : "LABEL_" + std::to_string(k);
}

PredictInput parse_predict_input(std::string_view line, const BertConfig& config, const std::string& source) {
  PredictInput in;
  bool parsed = false;
  if (!line.empty() && line.front() == '{') {
    // A text that merely starts with '{' stays a text.
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("text") && j.at("text").is_string()) {
      in.text = j.at("text").get<std::string>();
      if (auto it = j.find("text_pair"); it != j.end() && it->is_string()) in.text_pair = it->get<std::string>();
      parsed = true;
    }
  }
  if (!parsed) {
    const size_t tab = line.find('\t');
    in.text = std::string(line.substr(0, tab));
    if (tab != std::string_view::npos) in.text_pair = std::string(line.substr(tab + 1));
  }
  if (config.text_pair && !in.text_pair) {
    fail("{}: the model was trained on sentence pairs (config.json text_pair); give each input as "
         "text<TAB>text_pair or as a JSON line {{\"text\": ..., \"text_pair\": ...}}",
         source);
  }
  return in;
}

nlohmann::ordered_json prediction_record(const PredictInput& input, const at::Tensor& logits, const BertConfig& config,
                                         double threshold, bool with_logits) {
  // In the model's own dtype, as the probabilities were always computed.
  const at::Tensor scores = logits.to(at::kCPU).contiguous();
  const int64_t k = scores.numel();
  // The documented order: text, text_pair, the answer, then the details.
  nlohmann::ordered_json out{{"text", input.text}};
  if (input.text_pair) out["text_pair"] = *input.text_pair;
  switch (config.problem()) {
    case ProblemType::kRegression:
      out["score"] = scores[0].item<double>();
      break;
    case ProblemType::kMultiLabel: {
      const at::Tensor probs = scores.sigmoid();
      nlohmann::ordered_json labels = nlohmann::ordered_json::array(), p = nlohmann::ordered_json::object();
      for (int64_t j = 0; j < k; ++j) {
        const double prob = probs[j].item<double>();
        if (prob >= threshold) labels.push_back(label_name(config, j));
        p[label_name(config, j)] = prob;
      }
      out["labels"] = labels;
      out["probabilities"] = p;
      break;
    }
    case ProblemType::kSingleLabel: {
      const at::Tensor probs = at::softmax(scores, -1);
      out["label"] = label_name(config, probs.argmax().item<int64_t>());
      nlohmann::ordered_json p = nlohmann::ordered_json::object();
      for (int64_t j = 0; j < k; ++j) p[label_name(config, j)] = probs[j].item<double>();
      out["probabilities"] = p;
      break;
    }
  }
  if (with_logits) {
    std::vector<double> raw(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) raw[static_cast<size_t>(j)] = scores[j].item<double>();
    out["logits"] = raw;
  }
  return out;
}

nlohmann::ordered_json entity_record(const std::string& text, const std::vector<PredictedEntity>& entities) {
  // Byte offset -> code point offset: count the bytes that start a code point.
  auto chars = [&](int64_t byte) {
    int64_t n = 0;
    for (int64_t i = 0; i < byte; ++i) n += (static_cast<unsigned char>(text[static_cast<size_t>(i)]) & 0xC0u) != 0x80u;
    return n;
  };
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& e : entities) {
    list.push_back({{"entity_group", e.entity_group}, {"score", e.score}, {"word", e.word},
                    {"start", chars(e.start)}, {"end", chars(e.end)}});
  }
  return {{"text", text}, {"entities", list}};
}

}  // namespace ft
