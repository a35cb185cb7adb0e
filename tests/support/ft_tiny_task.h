// A very small text task for subprocess tests that run `ft` many times
// (crash trials, resume exactness): a 2-layer BERT of hidden size 16 on 96
// "good"/"bad" sentences, so a step and a checkpoint take milliseconds.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ft_test {

// Writes vocab.txt, config.json, train.jsonl and run.yaml into `dir`.
// run.yaml: dropout 0.1, shuffle on, AdamW, linear schedule with 5 warm-up
// steps, batch 4 per rank, no dev set, log every step, one thread per rank.
inline void write_tiny_task(const std::filesystem::path& dir) {
  const char* tokens[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film",
                          "plot", "the",  "very", "was",  "a",      "##s",  "!"};
  std::ofstream vocab(dir / "vocab.txt");
  for (const char* t : tokens) vocab << t << "\n";
  nlohmann::json config{{"architectures", {"BertForSequenceClassification"}},
                        {"model_type", "bert"},
                        {"vocab_size", 15},
                        {"hidden_size", 16},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 2},
                        {"intermediate_size", 32},
                        {"hidden_act", "gelu"},
                        {"hidden_dropout_prob", 0.1},
                        {"attention_probs_dropout_prob", 0.1},
                        {"max_position_embeddings", 32},
                        {"type_vocab_size", 2},
                        {"initializer_range", 0.02},
                        {"layer_norm_eps", 1e-12},
                        {"pad_token_id", 0},
                        {"num_labels", 2},
                        {"id2label", {{"0", "neg"}, {"1", "pos"}}},
                        {"label2id", {{"neg", 0}, {"pos", 1}}}};
  std::ofstream(dir / "config.json") << config.dump(2) << "\n";
  const char* good[] = {"the film was good", "very good plot", "good good film !", "a good film",
                        "the plot was very good", "good films", "a very good plot !", "the good film"};
  const char* bad[] = {"the film was bad", "very bad plot", "bad bad film !", "a bad film",
                       "the plot was very bad", "bad films", "a very bad plot !", "the bad film"};
  std::ofstream data(dir / "train.jsonl");
  for (int i = 0; i < 48; ++i) {
    data << nlohmann::json{{"text", good[i % 8]}, {"label", "pos"}}.dump() << "\n";
    data << nlohmann::json{{"text", bad[(i * 3) % 8]}, {"label", "neg"}}.dump() << "\n";
  }
  std::ofstream(dir / "run.yaml") << fmt::format(R"(model:
  config: {0}/config.json
data:
  train: {0}/train.jsonl
  labels: [neg, pos]
  vocab: {0}/vocab.txt
  dev_fraction: 0
  max_seq_len: 12
train:
  epochs: 1000
  batch_size: 4
  optimizer: adamw
  lr: 5.0e-3
  weight_decay: 0.01
  scheduler: linear
  warmup_steps: 5
  max_grad_norm: 1.0
  shuffle: true
  log_every: 1
  seed: 11
strategy:
  name: single
  precision: fp32
runtime:
  device: cpu
  threads: 1
)",
                                                 dir.string());
}

}  // namespace ft_test
