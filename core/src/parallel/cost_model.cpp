// The memory / α-β cost model's arithmetic (formulas in ft/parallel/cost_model.h);
// which strategy holds and moves what is each plugin's MemoryModel.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ft/parallel/cost_model.h"
#include "ft/base/error.h"
#include "ft/model/model.h"
#include "ft/base/types.h"

namespace ft {
namespace {

constexpr double kNearTie = 1.05;  // within 5 %: prefer the simpler, earlier candidate

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / std::max<int64_t>(1, b); }

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

// Korthikanti et al. (2022): 34·s·b·h + 5·a·s²·b bytes per layer with 16-bit
// activations, of which 24·s·b·h and the a·s²·b terms split over a
// tensor-parallel group of t (10·s·b·h + 24·s·b·h/t + 5·a·s²·b/t); fp32
// doubles it.
int64_t activation_bytes(const PlanInputs& in, int64_t rows, int tensor_group) {
  const double s = static_cast<double>(in.seq_len);
  const double b = static_cast<double>(rows);
  const double h = static_cast<double>(in.model.hidden);
  const double a = static_cast<double>(in.model.heads);
  const double t = std::max(1, tensor_group);
  const double per_layer = 10.0 * s * b * h + (24.0 * s * b * h + 5.0 * a * s * s * b) / t;
  const double bytes = per_layer * static_cast<double>(in.model.layers) * (in.mixed_precision ? 1.0 : 2.0);
  return static_cast<int64_t>(bytes);
}

// 6 per matmul weight per token, plus attention scores and context
// (12·L·s²·h per row).
double step_flops(const PlanInputs& in, int64_t rows) {
  const double tokens = static_cast<double>(rows) * static_cast<double>(in.seq_len);
  const double matmul_params = static_cast<double>(std::max<int64_t>(0, in.model.params - in.model.embedding_params));
  const double attention = 12.0 * static_cast<double>(in.model.layers) * static_cast<double>(in.seq_len) *
                           static_cast<double>(in.model.hidden) * tokens;
  return 6.0 * matmul_params * tokens + attention;
}

CandidateEstimate begin_estimate(const std::string& name, const std::string& formula, const PlanInputs& in) {
  CandidateEstimate e;
  e.name = name;
  e.formula = formula;
  e.activation_bytes = activation_bytes(in, in.batch_rows);
  e.compute_s = step_flops(in, in.batch_rows) / std::max(1.0, in.flops_per_s);
  return e;
}

void finish_estimate(CandidateEstimate& e, const PlanInputs& in) {
  e.total_bytes = e.state_bytes + e.extra_bytes + e.activation_bytes;
  e.fits = in.memory_limit_bytes <= 0 || e.total_bytes <= in.memory_limit_bytes;
  e.step_s = e.compute_s + e.comm_s;
}

ModelShape model_shape(const EncoderModel& model, const ParamPlan& plan, int world_size) {
  ModelShape s;
  const BertConfig& cfg = model.config();
  s.hidden = cfg.hidden_size;
  s.layers = cfg.num_hidden_layers;
  s.heads = cfg.num_attention_heads;
  s.num_units = model.num_units();
  const std::string words_name = cfg.family().word_embeddings();
  // A classifier's table can be split by rows: no head reads it.
  const bool table_free = model.units_read_by(model.num_units() - 1).empty();
  bool all_train = true;
  int64_t rough_sliceable = 0;
  int index = 0;
  for (const auto& unit : model.unit_parameters()) {
    const bool layer = index > 0 && index < s.num_units - 1;
    ++index;
    int64_t n = 0;
    for (const auto& [name, p] : unit) {
      auto it = plan.find(name);
      if (it != plan.end() && !it->second.trainable) {
        all_train = false;
        continue;
      }
      n += p.numel();
      const bool words = name == words_name;
      if (words) s.embedding_params += p.numel();
      if (words && table_free) s.sharded_words = {p.size(0), p.size(1)};
      if (layer || words) rough_sliceable += p.numel();
    }
    s.params += n;
    s.largest_unit_params = std::max(s.largest_unit_params, n);
    s.unit_params.push_back(n);
  }
  // Full fine-tuning: the cuts the backbone declares; otherwise the trainable
  // layers and table, a bound.
  s.sliceable_params = all_train && world_size > 0 ? tensor_sliced_params(cfg, world_size) : rough_sliceable;
  return s;
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

ShardedStateBytes sharded_state_bytes(int stage, const std::vector<int64_t>& unit_params, int world_size,
                                      int grad_buckets, int limit_all_gathers, WordTableShape words) {
  ShardedStateBytes b;
  const bool z1 = stage == 1, z2 = stage == 2, z3 = stage == 3;
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

std::string zero_formula(int stage) {
  switch (stage) {
    case 0: return "16Ψ";
    case 1: return "8Ψ+8Ψ/N";
    case 2: return "4Ψ+12Ψ/N+B";
    case 3: return "16Ψ/N+G+B";
    default: fail("zero_formula: stage {} is not 0..3", stage);
  }
}

Plan plan_strategy(std::vector<CandidateEstimate> estimates, const PlanInputs& in) {
  Plan plan;
  plan.table = std::move(estimates);
  if (plan.table.empty()) fail("auto: no candidate to choose from");
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
