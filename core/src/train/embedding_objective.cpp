// The sentence-embedding objective: sentence-transformers' losses on the
// column blocks of ft/tasks/sentence_pairs.h, with negatives from every
// data-parallel rank, and its evaluators' scores.
//
// Global-batch negatives: each rank embeds its own rows; the loss all-gathers
// the embeddings with their gradient (backward sums every rank's gradient
// of its rows and keeps this rank's), and scores this rank's anchors against
// every rank's candidates. With the strategies' mean over ranks, the
// gradient is that of the single-process loss on the global batch.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <fmt/format.h>

#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/observe/events.h"
#include "ft/observe/metrics.h"
#include "ft/train/objective.h"
#include "ft/data/sampler.h"
#include "ft/parallel/strategy.h"

namespace ft {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Comm& comm_at(int64_t address) { return *reinterpret_cast<Comm*>(address); }

// Every rank's rows of x [n_r, d] in rank order, [sum n_r, d]; backward
// sums the gradient over ranks and returns this rank's rows of it.
struct GatherRows : torch::autograd::Function<GatherRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm_address) {
    Comm& comm = comm_at(comm_address);
    const int world = comm.world_size();
    at::Tensor counts = at::zeros({world}, at::TensorOptions().dtype(at::kLong).device(x.device()));
    counts[comm.rank()] = x.size(0);
    comm.all_reduce(counts, ReduceOp::Sum);
    const at::Tensor host = counts.to(at::kCPU);
    const int64_t longest = host.max().item<int64_t>();
    at::Tensor padded = at::zeros({longest, x.size(1)}, x.options());
    padded.narrow(0, 0, x.size(0)).copy_(x);
    at::Tensor flat;
    comm.all_gather_flat(flat, padded.contiguous().view({-1}));
    const at::Tensor all = flat.view({world, longest, x.size(1)});
    std::vector<at::Tensor> parts;
    for (int r = 0; r < world; ++r) parts.push_back(all[r].narrow(0, 0, host[r].item<int64_t>()));
    ctx->saved_data["comm"] = comm_address;
    ctx->saved_data["counts"] = host;
    return at::cat(parts);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Comm& comm = comm_at(ctx->saved_data["comm"].toInt());
    const at::Tensor counts = ctx->saved_data["counts"].toTensor();
    at::Tensor g = grads[0].contiguous().clone();
    comm.all_reduce(g, ReduceOp::Sum);
    int64_t start = 0;
    for (int r = 0; r < comm.rank(); ++r) start += counts[r].item<int64_t>();
    return {g.narrow(0, start, counts[comm.rank()].item<int64_t>()), at::Tensor()};
  }
};

// sentence-transformers' cos_sim: rows normalised (eps 1e-12), then a @ b^T.
at::Tensor cos_sim(const at::Tensor& a, const at::Tensor& b) {
  auto unit = [](const at::Tensor& x) { return x / x.norm(2, {1}, true).clamp_min(1e-12); };
  return at::matmul(unit(a), unit(b).t());
}

enum class Loss { kMnrl, kCachedMnrl, kCosent, kCosine };

Loss parse_loss(const std::string& name, bool scored) {
  if (name == "auto") return scored ? Loss::kCosent : Loss::kMnrl;
  if (name == "MultipleNegativesRankingLoss") return Loss::kMnrl;
  if (name == "CachedMultipleNegativesRankingLoss") return Loss::kCachedMnrl;
  if (name == "CoSENTLoss") return Loss::kCosent;
  return Loss::kCosine;
}

class SentenceEmbedding final : public Objective {
 public:
  SentenceEmbedding(EmbeddingConfig config, Loss loss, int64_t dimension)
      : config_(std::move(config)), loss_(loss), model_dimension_(dimension) {}

  Batch batch(const Dataset& data, const std::vector<int64_t>& rows, int64_t) const override {
    return data.collate(rows);
  }
  void attach(Comm& data_comm) override { comm_ = &data_comm; }
  bool evaluates_first() const override { return true; }
  int64_t negatives_per_anchor(const Dataset& train, int64_t rows_per_rank, int data_ranks) const override {
    if (loss_ != Loss::kMnrl && loss_ != Loss::kCachedMnrl) return -1;
    const int64_t candidates = train.collate({0}).rows() - 1;  // positive and negative columns
    const int64_t rows = rows_per_rank * (config_.gather_across_devices ? data_ranks : 1);
    return rows * candidates - 1;
  }

  at::Tensor loss(const at::Tensor& embeddings, const Batch& batch) const override {
    return loss_of(embeddings, batch.labels, config_.gather_across_devices ? comm_ : nullptr);
  }
  double step_divisor(const std::vector<Batch>& micro_batches, Comm&) const override {
    return static_cast<double>(micro_batches.size());
  }

  // GradCache: embeddings of mini-batches without a graph, the loss and its
  // gradient by embedding, then each mini-batch again with its graph and
  // that gradient. The random state is replayed, so dropout masks match.
  std::optional<double> train_micro_batch(Strategy& strategy, const Batch& batch, double divisor,
                                          bool sync) const override {
    if (loss_ != Loss::kCachedMnrl) return std::nullopt;
    const int64_t rows = batch.rows();
    const int64_t step = config_.mini_batch_size;
    std::vector<Batch> chunks;
    std::vector<at::Tensor> states;
    for (int64_t at = 0; at < rows; at += step) chunks.push_back(slice_rows(batch, at, std::min(step, rows - at)));
    std::vector<at::Tensor> parts;
    {
      torch::NoGradGuard no_grad;
      for (const auto& chunk : chunks) {
        states.push_back(random_state());
        parts.push_back(strategy.forward(chunk));
      }
    }
    const at::Tensor cached = at::cat(parts).detach().requires_grad_(true);
    const at::Tensor value = loss(cached, batch) / divisor;
    value.backward();
    const at::Tensor grad = cached.grad();
    int64_t at = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      set_random_state(states[i]);
      const at::Tensor e = strategy.forward(chunks[i]);
      const at::Tensor surrogate = (e * grad.narrow(0, at, e.size(0)).to(e.device())).sum();
      strategy.backward(surrogate, sync && i + 1 == chunks.size());
      at += e.size(0);
    }
    return value.item<double>();
  }

  ClassificationReport evaluate(Strategy& strategy, const Dataset& dev, Comm& comm, EventLog& events,
                                int64_t per_rank) const override {
    auto batches = eval_batches(dev.size(), per_rank, comm.world_size(), comm.rank());
    const bool scored = dev.problem_type() == ProblemType::kRegression;
    const int64_t k = dev.collate({0}).rows();  // the columns: a row's model rows
    const int64_t dim = model_dimension_;
    std::vector<std::vector<at::Tensor>> columns(static_cast<size_t>(k));  // [column][batch]: this rank's valid rows
    std::vector<at::Tensor> scores;
    const auto total = static_cast<int64_t>(batches.size());
    int64_t done = 0;
    for (const auto& b : batches) {
      events.eval_progress(done++, total);
      const Batch batch = dev.collate(b.rows);
      const at::Tensor e = strategy.forward(batch).to(at::kCPU, at::kFloat);
      const auto n = static_cast<int64_t>(b.rows.size());
      for (int64_t c = 0; c < k; ++c) columns[static_cast<size_t>(c)].push_back(e.narrow(0, c * n, b.num_valid));
      if (scored) scores.push_back(batch.labels.narrow(0, 0, b.num_valid).to(at::kFloat));
    }
    events.eval_progress(total, total);
    // Every rank needs every row: retrieval ranks each anchor against all positives.
    auto everyone = [&](const std::vector<at::Tensor>& local, int64_t width) {
      const at::Tensor mine = local.empty() ? at::empty({0}, at::kFloat) : at::cat(local).reshape({-1});
      std::vector<at::Tensor> parts;
      for (auto& p : comm.all_gather_varlen(mine.to(at::kDouble))) parts.push_back(p.to(at::kFloat).view({-1, width}));
      return at::cat(parts);
    };
    std::vector<at::Tensor> all;
    for (const auto& c : columns) all.push_back(everyone(c, dim));
    if (scored) return scored_report(all[0], all[1], everyone(scores, 1).view({-1}));
    return retrieval_report(all[0], all[1]);
  }

  void report(EventLog& events, int64_t step, int64_t epoch, const ClassificationReport& r,
              const std::vector<std::string>& label_names) const override {
    events.eval(step, epoch, r, label_names);
  }

 private:
  static at::Tensor random_state() {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
  }
  static void set_random_state(const at::Tensor& state) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }

  // Column c's rows of the [k B, d] embeddings.
  static at::Tensor column(const at::Tensor& e, int64_t c, int64_t rows) { return e.narrow(0, c * rows, rows); }

  at::Tensor loss_of(const at::Tensor& e, const at::Tensor& labels, Comm* gather) const {
    const int64_t rows = labels.size(0);
    if (rows == 0 || e.size(0) % rows != 0) {
      fail("sentence embedding: {} embeddings for {} rows; the batch's columns must be whole", e.size(0), rows);
    }
    const int64_t k = e.size(0) / rows;
    const bool across = gather != nullptr && gather->world_size() > 1;
    auto global = [&](const at::Tensor& x) {
      return across ? GatherRows::apply(x, reinterpret_cast<int64_t>(gather)) : x;
    };
    if (loss_ == Loss::kCosine || loss_ == Loss::kCosent) {
      if (labels.scalar_type() == at::kLong) {
        fail("sentence embedding: {} needs a score per pair (a score column); these rows have none",
             loss_ == Loss::kCosent ? "CoSENTLoss" : "CosineSimilarityLoss");
      }
      const at::Tensor a = column(e, 0, rows), b = column(e, 1, rows);
      const at::Tensor cos = (a * b).sum(1) / (a.norm(2, {1}) * b.norm(2, {1})).clamp_min(1e-8);
      const at::Tensor truth = labels.to(e.device(), at::kFloat);
      if (loss_ == Loss::kCosine) return at::mse_loss(cos, truth);
      // CoSENT over every pair of the global batch: each rank holds the whole loss.
      return cosent(global(cos.unsqueeze(1)).view({-1}) * config_.scale,
                    across ? global(truth.unsqueeze(1)).view({-1}) : truth);
    }
    const at::Tensor anchors = column(e, 0, rows);
    std::vector<at::Tensor> candidates;
    for (int64_t c = 1; c < k; ++c) candidates.push_back(global(column(e, c, rows)));
    int64_t offset = 0;
    if (across) {
      at::Tensor counts = at::zeros({gather->world_size()}, at::kLong);
      counts[gather->rank()] = rows;
      gather->all_reduce(counts, ReduceOp::Sum);
      offset = counts.narrow(0, 0, gather->rank()).sum().item<int64_t>();
    }
    const at::Tensor target = at::arange(offset, offset + rows, at::TensorOptions().dtype(at::kLong).device(e.device()));
    const at::Tensor forward = at::cross_entropy_loss(cos_sim(anchors, at::cat(candidates)) * config_.scale, target);
    if (!config_.symmetric) return forward;
    // Each positive ranks every anchor of the global batch.
    const at::Tensor backward =
        at::cross_entropy_loss(cos_sim(column(e, 1, rows), global(anchors)) * config_.scale, target);
    return (forward + backward) / 2;
  }

  // CoSENT: log(1 + sum over pairs (i, j) with label_i < label_j of exp(s_i - s_j)).
  static at::Tensor cosent(const at::Tensor& s, const at::Tensor& labels) {
    at::Tensor diff = s.unsqueeze(1) - s.unsqueeze(0);
    const at::Tensor lower = labels.unsqueeze(1).lt(labels.unsqueeze(0));
    diff = diff - (1 - lower.to(diff.scalar_type())) * 1e12;
    return at::logsumexp(at::cat({at::zeros({1}, diff.options()), diff.reshape({-1})}), 0);
  }

  ClassificationReport retrieval_report(const at::Tensor& anchors, const at::Tensor& positives) const {
    const at::Tensor sims = cos_sim(anchors, positives);
    const at::Tensor own = sims.diagonal().unsqueeze(1);
    const at::Tensor rank = sims.gt(own).sum(1).to(at::kDouble);  // candidates scored above the true positive
    ClassificationReport r;
    r.task = "sentence-embedding";
    r.total = anchors.size(0);
    const auto n = static_cast<int64_t>(anchors.size(0));
    const at::Tensor target = at::arange(n, at::kLong);
    r.loss = at::cross_entropy_loss(sims * config_.scale, target).item<double>();
    const double at1 = rank.lt(1).to(at::kDouble).mean().item<double>();
    const double at10 = rank.lt(10).to(at::kDouble).mean().item<double>();
    const double mrr = (rank.lt(10).to(at::kDouble) / (rank + 1)).mean().item<double>();
    r.accuracy = at1;
    r.scores = {{"recall@1", at1}, {"recall@10", at10}, {"mrr@10", mrr}};
    return r;
  }

  ClassificationReport scored_report(const at::Tensor& a, const at::Tensor& b, const at::Tensor& truth) const {
    const at::Tensor cos = cos_sim(a, b).diagonal();
    std::vector<double> p(static_cast<size_t>(cos.numel())), t(static_cast<size_t>(truth.numel()));
    const at::Tensor cd = cos.to(at::kDouble).contiguous(), td = truth.to(at::kDouble).contiguous();
    std::copy(cd.data_ptr<double>(), cd.data_ptr<double>() + cd.numel(), p.begin());
    std::copy(td.data_ptr<double>(), td.data_ptr<double>() + td.numel(), t.begin());
    const double loss = loss_ == Loss::kCosine ? at::mse_loss(cos, truth).item<double>()
                                               : cosent(cos * config_.scale, truth).item<double>();
    const ClassificationReport reg = regression_report(p, t, loss);
    ClassificationReport r;
    r.task = "sentence-embedding";
    r.total = static_cast<int64_t>(p.size());
    r.loss = loss;
    r.scores = {{"pearson", reg.score("pearson").value_or(0.0)}, {"spearman", reg.score("spearman").value_or(0.0)}};
    r.accuracy = r.scores[1].second;
    return r;
  }

  EmbeddingConfig config_;
  Loss loss_;
  int64_t model_dimension_;  // the embeddings' size
  Comm* comm_ = nullptr;  // the data-parallel group (attach)
};

}  // namespace

std::unique_ptr<Objective> make_sentence_embedding_objective(const EmbeddingConfig& config, bool scored,
                                                             int64_t dimension) {
  return std::make_unique<SentenceEmbedding>(config, parse_loss(config.loss, scored), dimension);
}

}  // namespace ft
