// Two ranks as two threads of one test process, each with its own Comm
// (Gloo over loopback), on a BERT small enough that a step takes
// milliseconds: for tests that drive a Strategy in-process at world size 2
// (sharded checkpoints, allocation counting).
#pragma once

#include <memory>

#include "ft/comm/comm.h"
#include "ft/model/model.h"
#include "ft/optim/optim.h"
#include "ft/optim/precision.h"
#include "ft/parallel/strategy.h"

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

// One rank's Comm, fp32 precision and strategy context; the constructor
// connects (world 1: no network) and sets `strategy` up on `model` with
// AdamW at lr 1e-2 and no weight decay.
struct RankSetup {
  std::unique_ptr<ft::Comm> comm;
  ft::Precision precision{ft::PrecisionMode::FP32, c10::kCPU};
  ft::StrategyContext ctx;

  RankSetup(ft::Strategy& strategy, const std::shared_ptr<ft::EncoderModel>& model, int rank,
            int world, int port)
      : comm(world == 1 ? ft::Comm::create(ft::DistEnv{}) : connect_rank(rank, world, port)) {
    ctx.comm = comm.get();
    ctx.precision = &precision;
    ft::OptimizerSpec spec;
    spec.lr = 1e-2;
    strategy.setup(model, spec, ft::default_param_plan(model->weights(), 0.0, false), ctx);
  }
};

}  // namespace ft_test
