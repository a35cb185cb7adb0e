// Masked-language-model pretraining data (`ft pretrain`): BERT's token
// masking, packing of short texts, and the pretraining corpus.
//
// Masking is a pure function of (seed, epoch, dataset row, column): no
// random generator state, so every rank and every world size draws the same
// masks for the same rows (distributed pretraining equals single-process),
// masks are fresh each epoch (dynamic masking, as HF's collator) and a
// resumed run continues with exactly the masks it would have drawn.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/data/data.h"
#include "ft/tasks/run_inputs.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft/base/types.h"

namespace ft {

struct MaskingOptions {
  double probability = 0.15;
  bool whole_word = false;
  int64_t mask_id = 0;
  int64_t vocab_size = 0;
  std::vector<uint8_t> never_masked;    // per id: [CLS], [SEP], [PAD], [UNK], [MASK]
  std::vector<uint8_t> continues_word;  // per id: "##" pieces (whole-word masking)
  uint64_t seed = 0;

  // From the vocabulary; ft::Error when it has no [MASK].
  static MaskingOptions from(const Tokenizer& tok, const PretrainConfig& pretrain, uint64_t seed);
};

// The evaluation masks' epoch: the same tokens at every evaluation.
constexpr int64_t kEvalMaskEpoch = -1;

// Chooses the tokens to predict in `batch` (collated from dataset `rows`):
// each real, non-special token (with whole_word, each word) with
// `probability`; of those 80 % become [MASK], 10 % a uniformly drawn token,
// 10 % stay. Sets labels to the chosen tokens' original ids and
// positions to their flat positions (ascending).
Batch mask_tokens(Batch batch, const std::vector<int64_t>& rows, int64_t epoch, const MaskingOptions& options);

// Packing: "[CLS] text [SEP]" (or "[CLS] text [SEP] pair [SEP]") of every row,
// in order, as one stream cut into blocks of max_length tokens (the last one
// shorter), as HF's run_mlm groups texts. Nothing is truncated and no block
// position is padding. Token types are 0.
std::unique_ptr<Dataset> make_packed_dataset(const TextData& data, const Tokenizer& tok, int max_length,
                                             Padding padding);

// What `ft pretrain` trains on. The data section is read as `ft run` reads
// it, to find the rows a fine-tuning run evaluates on (its dev split, or
// data.dev); pretraining uses every other row of data.train (the first
// pretrain.max_rows, 0 = all) and evaluates the MLM on the dev rows. A row
// whose text equals a dev row's is left out too (duplicates). The model is
// BertForMaskedLM: initial weights may be an encoder or a classifier
// checkpoint (its head is dropped and the MLM head starts fresh).
RunInputs prepare_pretrain_inputs(const RunConfig& config);

}  // namespace ft
