// Two ranks as two threads of one test process, each with its own Comm
// (Gloo over loopback), on a BERT small enough that a step takes
// milliseconds: for tests that drive a Strategy in-process at world size 2
// (sharded checkpoints, allocation counting).
#pragma once

#include <memory>

#include "ft/comm.h"
#include "ft/model.h"

namespace ft_test {

// vocab 41: no unit divides evenly by 2, so shard padding is exercised.
inline ft::BertConfig two_rank_config() {
  ft::BertConfig c;
  c.vocab_size = 41;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 12;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  c.num_labels = 3;
  c.id2label = {"a", "b", "c"};
  return c;
}

// Rank `rank` of a `world`-rank job whose store is on 127.0.0.1:`port`.
inline std::unique_ptr<ft::Comm> connect_rank(int rank, int world, int port) {
  ft::DistEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_port = port;
  env.source = "torchrun";
  return ft::Comm::create(env);
}

}  // namespace ft_test
