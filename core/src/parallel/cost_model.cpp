// The memory / α-β cost model behind the `auto` strategy and the theory
// column of `ft bench` (formulas in ft/cost_model.h).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ft/cost_model.h"
#include "ft/error.h"
#include "ft/model.h"

namespace ft {
namespace {

constexpr double kNearTie = 1.05;  // within 5 %: prefer the simpler, earlier candidate

bool known_candidate(const std::string& name) {
  return name == "ddp" || name == "ddp_amp" || name == "zero1" || name == "zero2" || name == "zero3" ||
         name == "fsdp" || name == "pipeline" || name == "tensor";
}

bool sharded_params(const std::string& name) { return name == "zero3" || name == "fsdp"; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / std::max<int64_t>(1, b); }

// Saved activations per rank for backward, from Korthikanti et al. (2022):
// 34·s·b·h + 5·a·s²·b bytes per layer with 16-bit activations, of which
// 24·s·b·h and the a·s²·b terms split over a tensor-parallel group of t
// (10·s·b·h + 24·s·b·h/t + 5·a·s²·b/t); fp32 doubles it. `rows` is b.
int64_t activation_bytes(const PlanInputs& in, int64_t rows, int t = 1) {
  const double s = static_cast<double>(in.seq_len);
  const double b = static_cast<double>(rows);
  const double h = static_cast<double>(in.model.hidden);
  const double a = static_cast<double>(in.model.heads);
  const double per_layer = 10.0 * s * b * h + (24.0 * s * b * h + 5.0 * a * s * s * b) / t;
  const double bytes = per_layer * static_cast<double>(in.model.layers) * (in.mixed_precision ? 1.0 : 2.0);
  return static_cast<int64_t>(bytes);
}

// Forward + backward FLOPs of one micro-batch of `rows`: 6 per matmul weight
// per token, plus attention scores and context (12·L·s²·h per row).
double step_flops(const PlanInputs& in, int64_t rows) {
  const double tokens = static_cast<double>(rows) * static_cast<double>(in.seq_len);
  const double matmul_params = static_cast<double>(std::max<int64_t>(0, in.model.params - in.model.embedding_params));
  const double attention = 12.0 * static_cast<double>(in.model.layers) * static_cast<double>(in.seq_len) *
                           static_cast<double>(in.model.hidden) * tokens;
  return 6.0 * matmul_params * tokens + attention;
}

// pipeline and tensor over all N ranks, on the data-parallel candidates'
// global batch (PlanInputs::candidates); fills state, extra, activation,
// compute and communication.
void model_parallel_estimate(CandidateEstimate& e, const PlanInputs& in) {
  const int n = std::max(1, in.world_size);
  const int64_t psi = in.model.params;
  // One activation (or its gradient) of a micro-batch, fp32 on the wire.
  const auto activation = [&](int64_t rows) { return 4 * rows * in.seq_len * in.model.hidden; };
  if (e.name == "pipeline") {
    // N stages, N micro-batches of batch_rows: a stage holds no less than its
    // biggest unit; under 1F1B the first stage keeps N micro-batches of its
    // L/N layers in flight, one micro-batch's worth of the whole model.
    e.state_bytes = std::max(16 * psi / n, 16 * in.model.largest_unit_params);
    e.extra_bytes = in.mixed_precision ? e.state_bytes / 8 : 0;
    // Each stage computes N micro-batches of 1/N of the model, idle for a
    // bubble of (p-1)/(m+p-1) with p = m = N.
    e.compute_s *= static_cast<double>(2 * n - 1) / n;
    // Per micro-batch, an activation forward and its gradient backward
    // cross each stage boundary.
    e.collectives = 2LL * n;
    e.comm_bytes = e.collectives * activation(in.batch_rows);
    e.comm_s = static_cast<double>(e.collectives) *
               (in.link.alpha_s + static_cast<double>(activation(in.batch_rows)) * in.link.beta_s_per_byte);
    return;
  }
  // tensor: one group of N reading N x batch_rows rows per micro-batch.
  const int64_t rows = in.batch_rows * n, sliced = std::min(psi, in.model.sliceable_params);
  e.state_bytes = sliced > 0 ? theory_state_bytes("tensor", psi, n, 1, sliced) : 16 * psi;
  e.extra_bytes = in.mixed_precision ? e.state_bytes / 8 : 0;
  e.activation_bytes = activation_bytes(in, rows, n);
  e.compute_s = step_flops(in, rows) / n / std::max(1.0, in.flops_per_s);
  // Per layer two all-reduces forward (attention and FFN outputs) and two
  // backward (their inputs' gradients), plus the vocab-parallel embeddings'.
  e.collectives = n > 1 ? 4 * in.model.layers + 1 : 0;
  e.comm_bytes = static_cast<int64_t>(static_cast<double>(e.collectives) * 2.0 * (n - 1) / n * activation(rows));
  e.comm_s = static_cast<double>(e.collectives) * ring_allreduce_seconds(in.link, n, activation(rows));
}

CandidateEstimate estimate(const std::string& name, const PlanInputs& in) {
  const int n = std::max(1, in.world_size);
  const int64_t psi = in.model.params;
  const int64_t grad_bytes = 4 * psi;  // ft communicates fp32 gradients
  CandidateEstimate e;
  e.name = name;
  e.formula = theory_formula(name);
  e.state_bytes = theory_state_bytes(name, psi, n);
  if (name == "zero2" || sharded_params(name)) {
    // The bucket pool of unit gradients in flight and (zero3/fsdp) the
    // gathered units, from the units when known.
    const std::vector<int64_t> units =
        in.model.unit_params.empty() ? std::vector<int64_t>{in.model.largest_unit_params} : in.model.unit_params;
    const WordTableShape words = in.model.unit_params.empty() ? WordTableShape{} : in.model.sharded_words;
    const ShardedStateBytes b = sharded_state_bytes(name, units, n, 2, 1, words);
    e.extra_bytes = b.buckets + b.gathered;
  }
  if (in.mixed_precision) e.extra_bytes += sharded_params(name) ? 2 * psi / n : 2 * psi;
  e.activation_bytes = activation_bytes(in, in.batch_rows);
  e.compute_s = step_flops(in, in.batch_rows) / std::max(1.0, in.flops_per_s);
  if (name == "pipeline" || name == "tensor") {
    model_parallel_estimate(e, in);
  } else if (n > 1) {
    const double share = static_cast<double>(n - 1) / n;
    const int64_t buckets = ceil_div(grad_bytes, in.bucket_bytes);
    const int64_t units = std::max<int64_t>(1, in.model.num_units);
    if (name == "ddp" || name == "ddp_amp") {
      e.collectives = buckets;
      e.comm_bytes = static_cast<int64_t>(2.0 * share * grad_bytes);
      e.comm_s = ring_allreduce_seconds(in.link, n, grad_bytes, buckets);
    } else if (name == "zero1") {
      // All-reduce the grads, then all-gather the updated parameters.
      e.collectives = buckets + 1;
      e.comm_bytes = static_cast<int64_t>(3.0 * share * grad_bytes);
      e.comm_s = ring_allreduce_seconds(in.link, n, grad_bytes, buckets) +
                 ring_allgather_seconds(in.link, n, grad_bytes, 1);
    } else if (name == "zero2") {
      // Reduce-scatter the grads, all-gather the updated parameters.
      e.collectives = buckets + 1;
      e.comm_bytes = static_cast<int64_t>(2.0 * share * grad_bytes);
      e.comm_s = ring_allgather_seconds(in.link, n, grad_bytes, buckets) +
                 ring_allgather_seconds(in.link, n, grad_bytes, 1);
    } else {
      // zero3 / fsdp: all-gather per unit in forward and again in backward,
      // reduce-scatter per unit.
      e.collectives = 3 * units;
      e.comm_bytes = static_cast<int64_t>(3.0 * share * grad_bytes);
      e.comm_s = 3.0 * ring_allgather_seconds(in.link, n, grad_bytes, units);
    }
  }
  e.total_bytes = e.state_bytes + e.extra_bytes + e.activation_bytes;
  e.fits = in.memory_limit_bytes <= 0 || e.total_bytes <= in.memory_limit_bytes;
  // No overlap credit: on CPU the ranks' communication competes with their
  // compute for the same cores, so hiding it behind backward is not free.
  e.step_s = e.compute_s + e.comm_s;
  return e;
}

std::string mb(int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

}  // namespace

LinkModel fit_link_model(int world_size, int64_t small_bytes, double small_seconds, int64_t large_bytes,
                         double large_seconds) {
  if (large_bytes <= small_bytes) {
    fail("fit_link_model: the large probe ({} B) must be bigger than the small one ({} B)", large_bytes, small_bytes);
  }
  LinkModel link;
  if (world_size <= 1) return link;
  const double n = world_size;
  // Per-call time t(bytes) = a + b·bytes with a = 2(N-1)α and b = 2(N-1)/N·β.
  const double b = (large_seconds - small_seconds) / static_cast<double>(large_bytes - small_bytes);
  const double a = small_seconds - b * static_cast<double>(small_bytes);
  link.alpha_s = std::max(0.0, a / (2.0 * (n - 1.0)));
  link.beta_s_per_byte = std::max(0.0, b * n / (2.0 * (n - 1.0)));
  return link;
}

double ring_allreduce_seconds(const LinkModel& link, int world_size, int64_t bytes, int64_t calls) {
  if (world_size <= 1) return 0.0;
  const double n = world_size;
  return 2.0 * (n - 1.0) * static_cast<double>(calls) * link.alpha_s +
         2.0 * (n - 1.0) / n * static_cast<double>(bytes) * link.beta_s_per_byte;
}

double ring_allgather_seconds(const LinkModel& link, int world_size, int64_t bytes, int64_t calls) {
  if (world_size <= 1) return 0.0;
  const double n = world_size;
  return (n - 1.0) * static_cast<double>(calls) * link.alpha_s +
         (n - 1.0) / n * static_cast<double>(bytes) * link.beta_s_per_byte;
}

int64_t tensor_sliced_params(int64_t hidden, int64_t intermediate, int64_t layers, int64_t vocab, int64_t embedding_width,
                             bool vocab_parallel) {
  const int64_t h = hidden, i = intermediate;
  const int64_t per_layer = 3 * (h * h + h) + (h * i + i) + h * h + i * h;
  return layers * per_layer + (vocab_parallel ? vocab * embedding_width : 0);
}

int64_t tensor_sliced_params(const BertConfig& c, int ranks) {
  // A column-parallel Linear's bias is cut with its rows; a row-parallel
  // one's stays whole.
  int64_t per_layer = 0;
  for (const ParallelLinear& l : tensor_parallel_linears(c)) {
    per_layer += l.in * l.out + (l.bias && l.cut.dim == 0 ? l.out : 0);
  }
  const bool vocab_parallel = c.vocab_size % ranks == 0;
  return c.num_hidden_layers * per_layer + (vocab_parallel ? c.vocab_size * c.embedding_width() : 0);
}

double zero_state_bytes(int stage, double params, int world_size, const StateAccounting& a) {
  const double n = std::max(1, world_size);
  const double p = params;
  switch (stage) {
    case 0: return (a.param + a.grad + a.optimizer) * p;
    case 1: return (a.param + a.grad) * p + a.optimizer * p / n;
    case 2: return a.param * p + (a.grad + a.optimizer) * p / n;
    case 3: return (a.param + a.grad + a.optimizer) * p / n;
    default: fail("zero_state_bytes: stage {} is not 0..3", stage);
  }
}

std::string zero_table1_report() {
  const double psi = 7.5e9;
  const int nd = 64;
  const StateAccounting a = StateAccounting::mixed_precision(12.0);
  std::string out = fmt::format(
      "ZeRO Table 1 through ft's cost model (Rajbhandari et al. 2020): Ψ = 7.5 B, K = 12 (mixed-precision Adam: "
      "2 + 2 + K bytes), N_d = {}\n  {:<10} {:>10} {:>10}\n",
      nd, "stage", "ft (GB)", "paper (GB)");
  const char* names[] = {"baseline", "P_os", "P_os+g", "P_os+g+p"};
  const double paper[] = {120.0, 31.4, 16.6, 1.88};
  for (int stage = 0; stage <= 3; ++stage) {
    out += fmt::format("  {:<10} {:>10.3f} {:>10}\n", names[stage], zero_state_bytes(stage, psi, nd, a) / 1e9,
                       fmt::format("{:g}", paper[stage]));
  }
  return out;
}

int64_t grad_pool_capacity(const std::vector<int64_t>& unit_numels, int max_buckets) {
  if (unit_numels.empty()) return 1;
  std::vector<int64_t> sorted = unit_numels;
  std::sort(sorted.rbegin(), sorted.rend());
  int64_t others = 0;
  for (size_t i = 1; i < sorted.size() && i <= static_cast<size_t>(std::max(1, max_buckets)); ++i) others += sorted[i];
  return std::max(sorted.front(), others);
}

ShardedStateBytes sharded_state_bytes(const std::string& strategy, const std::vector<int64_t>& unit_params,
                                      int world_size, int grad_buckets, int limit_all_gathers, WordTableShape words) {
  ShardedStateBytes b;
  const bool z1 = strategy == "zero1", z2 = strategy == "zero2", z3 = sharded_params(strategy);
  if (!z1 && !z2 && !z3) return b;
  const int64_t n = std::max(1, world_size);
  std::vector<int64_t> units = unit_params;
  int64_t full = 0, psi = 0;
  if (!z1 && words.rows > 0 && words.width > 0 && !units.empty()) {
    // Its own flat param, whole rows per rank; outside B and G.
    units.front() -= words.rows * words.width;
    full += std::max<int64_t>(1, ceil_div(words.rows, n)) * n * words.width;
    psi += words.rows * words.width;
  }
  std::vector<int64_t> padded;  // FlatLayout: a positive multiple of N
  for (int64_t u : units) {
    padded.push_back(std::max<int64_t>(1, ceil_div(u, n)) * n);
    full += padded.back();
    psi += u;
  }
  b.params = z3 ? 4 * full / n : 4 * full;
  b.grads = z1 ? 4 * psi : 4 * full / n;
  b.optimizer = 8 * full / n;
  if (z1) return b;
  // Launch order is last unit first; the pool only depends on the sizes.
  b.buckets = 4 * grad_pool_capacity(padded, grad_buckets);
  if (z3) {
    // The unit in use and the next `limit_all_gathers` prefetched ones.
    const size_t window = static_cast<size_t>(std::max(0, limit_all_gathers)) + 1;
    for (size_t i = 0; i < padded.size(); ++i) {
      int64_t sum = 0;
      for (size_t k = i; k < std::min(padded.size(), i + window); ++k) sum += padded[k];
      b.gathered = std::max(b.gathered, 4 * sum);
    }
  }
  return b;
}

int64_t theory_state_bytes(const std::string& strategy, int64_t params, int world_size, int replicas,
                           int64_t sliced) {
  const int64_t n = std::max(1, world_size);
  const int64_t p = params;
  const StateAccounting fp32 = StateAccounting::fp32();
  if (strategy == "single" || strategy == "ddp" || strategy == "ddp_amp" || strategy == "horovod") return 16 * p;
  if (strategy == "dp") return 16 * p + 8 * p * (std::max(1, replicas) - 1);
  const int stage = strategy == "zero1" ? 1 : strategy == "zero2" ? 2 : sharded_params(strategy) ? 3 : 0;
  if (stage > 0) return std::llround(zero_state_bytes(stage, static_cast<double>(p), world_size, fp32));
  // Stages of equal size (the ideal split; ft bench lists every stage).
  if (strategy == "pipeline") return 16 * p / n;
  if (strategy == "tensor" && sliced > 0) return 16 * (p - std::min(p, sliced)) + 16 * std::min(p, sliced) / n;
  return -1;
}

std::string theory_formula(const std::string& strategy) {
  if (strategy == "single" || strategy == "ddp" || strategy == "ddp_amp" || strategy == "horovod") return "16Ψ";
  if (strategy == "dp") return "16Ψ+8Ψ(R-1)";
  if (strategy == "zero1") return "8Ψ+8Ψ/N";
  if (strategy == "zero2") return "4Ψ+12Ψ/N+B";
  if (strategy == "zero3" || strategy == "fsdp") return "16Ψ/N+G+B";
  if (strategy == "pipeline") return "16Ψ/N";
  if (strategy == "tensor") return "16Ψr+16Ψs/N";
  return "";
}

Plan plan_strategy(const PlanInputs& in) {
  Plan plan;
  for (const auto& name : in.candidates) {
    if (!known_candidate(name)) continue;
    if (in.mixed_precision && name == "ddp") continue;
    if (!in.mixed_precision && name == "ddp_amp") continue;
    if (std::any_of(plan.table.begin(), plan.table.end(), [&](const auto& e) { return e.name == name; })) continue;
    plan.table.push_back(estimate(name, in));
  }
  if (plan.table.empty()) {
    std::string given;
    for (const auto& c : in.candidates) given += (given.empty() ? "" : ", ") + c;
    fail("auto: none of ddp, ddp_amp, zero1, zero2, zero3, fsdp, pipeline, tensor is installed (found: {}); build them or "
         "pick a strategy by name",
         given.empty() ? "nothing" : given);
  }
  int fastest = -1;
  for (size_t i = 0; i < plan.table.size(); ++i) {
    if (!plan.table[i].fits) continue;
    if (fastest < 0 || plan.table[i].step_s < plan.table[static_cast<size_t>(fastest)].step_s) fastest = static_cast<int>(i);
  }
  const std::string limit =
      in.memory_limit_bytes > 0 ? fmt::format("the {} MB per-rank limit", mb(in.memory_limit_bytes)) : "no memory limit";
  if (fastest < 0) {
    size_t smallest = 0;
    for (size_t i = 1; i < plan.table.size(); ++i) {
      if (plan.table[i].total_bytes < plan.table[smallest].total_bytes) smallest = i;
    }
    plan.chosen = static_cast<int>(smallest);
    plan.reason = fmt::format("no candidate fits {}; {} needs the least memory ({} MB per rank)", limit,
                              plan.table[smallest].name, mb(plan.table[smallest].total_bytes));
    return plan;
  }
  // The earliest fitting candidate within the near-tie band of the fastest.
  const double bound = plan.table[static_cast<size_t>(fastest)].step_s * kNearTie;
  for (size_t i = 0; i < plan.table.size(); ++i) {
    if (plan.table[i].fits && plan.table[i].step_s <= bound) {
      plan.chosen = static_cast<int>(i);
      break;
    }
  }
  const auto& c = plan.choice();
  std::vector<std::string> too_big;
  for (const auto& e : plan.table) {
    if (!e.fits) too_big.push_back(e.name);
  }
  std::string excluded;
  if (!too_big.empty()) {
    std::string names;
    for (const auto& n : too_big) names += (names.empty() ? "" : ", ") + n;
    excluded = fmt::format("; {} would not fit", names);
  }
  plan.reason = fmt::format("{} fits {} ({} MB per rank) with the fastest estimated step ({:.1f} ms, comm {:.1f} ms){}",
                            c.name, limit, mb(c.total_bytes), c.step_s * 1e3, c.comm_s * 1e3, excluded);
  if (static_cast<int>(plan.chosen) != fastest) {
    plan.reason += fmt::format("; {} is within 5% and simpler than {}", c.name,
                               plan.table[static_cast<size_t>(fastest)].name);
  }
  return plan;
}

std::string format_plan(const Plan& plan, const PlanInputs& in) {
  std::string out = fmt::format(
      "auto: Ψ = {} params, {} rank(s), {}, per-rank batch {} x {} tokens, link α = {:.1f} us, β = {:.3f} ns/B "
      "({:.2f} GB/s), compute {:.2f} GFLOP/s{}\n",
      in.model.params, in.world_size, in.mixed_precision ? "mixed precision" : "fp32", in.batch_rows, in.seq_len,
      in.link.alpha_s * 1e6, in.link.beta_s_per_byte * 1e9,
      in.link.beta_s_per_byte > 0 ? 1e-9 / in.link.beta_s_per_byte : 0.0, in.flops_per_s * 1e-9,
      in.memory_limit_bytes > 0 ? fmt::format(", memory limit {} MB/rank", mb(in.memory_limit_bytes)) : "");
  out += fmt::format("  {:<8} {:>11} {:>9} {:>8} {:>8} {:>9} {:>5} {:>11} {:>9} {:>9} {:>9}\n", "strategy",
                     "formula", "state MB", "extra MB", "act MB", "total MB", "fits", "comm MB/st", "comm ms",
                     "compute ms", "step ms");
  for (size_t i = 0; i < plan.table.size(); ++i) {
    const auto& e = plan.table[i];
    out += fmt::format("{} {:<8} {:>11} {:>9} {:>8} {:>8} {:>9} {:>5} {:>11} {:>9.1f} {:>9.1f} {:>9.1f}\n",
                       static_cast<int>(i) == plan.chosen ? "*" : " ", e.name, e.formula, mb(e.state_bytes),
                       mb(e.extra_bytes), mb(e.activation_bytes), mb(e.total_bytes), e.fits ? "yes" : "no",
                       mb(e.comm_bytes), e.comm_s * 1e3, e.compute_s * 1e3, e.step_s * 1e3);
  }
  out += fmt::format("auto: picked {}: {}\n", plan.choice().name, plan.reason);
  return out;
}

}  // namespace ft
