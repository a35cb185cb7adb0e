// sentence-transformers' model directory: the encoder's own files (config.json,
// model.safetensors with base-model names, the tokenizer) plus modules.json,
// which lists the modules after the encoder, each with its config in its own
// folder: 1_Pooling/config.json, 2_Dense/{config.json,model.safetensors},
// and Normalize (no files). ft reads the ones a model of this kind is made
// of (Transformer, Pooling, Dense, Normalize, in that order), writes the
// same layout, so `SentenceTransformer(dir)` loads what ft saves, and refuses
// any other module with one line naming the file.
#pragma once

#include <filesystem>

#include "ft/model/model.h"
#include "ft/base/types.h"

namespace ft {

// ft's names of the Dense module's tensors are kSentenceDenseWeight and
// kSentenceDenseBias (ft/model/model.h): the head registers them.

// Whether `dir` holds a sentence-transformers model (a modules.json).
bool has_sentence_modules(const std::filesystem::path& dir);

// Reads dir's modules.json and the modules' configs into c.sentence and
// makes c a sentence-embedding model (head kSentenceEmbedding).
void read_sentence_modules(const std::filesystem::path& dir, BertConfig& c);

// The Dense module's weights under ft's names; empty when c has no Dense.
TensorList read_sentence_dense(const std::filesystem::path& dir, const BertConfig& c);

// Writes modules.json, sentence_bert_config.json,
// config_sentence_transformers.json and the module folders of c into `dir`
// (the Dense weights included), and returns the tensors of `model` that
// belong in dir's model.safetensors: the encoder's, under base-model names
// (no "bert." prefix), as sentence-transformers saves them.
TensorList write_sentence_modules(const std::filesystem::path& dir, const BertConfig& c, const TensorList& model);

// `weights` under base-model names: c's family prefix ("bert.") dropped
// where a name has it. A sentence-transformers encoder is a bare XModel, so
// its weights and its PEFT adapter's (base_model.model.encoder...) carry none.
TensorList base_model_names(const BertConfig& c, const TensorList& weights);

}  // namespace ft
