#include "sweep_space.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"

namespace ft::app {
namespace {

std::string scalar(const YAML::Node& n, const std::string& where, const std::string& key) {
  if (!n.IsScalar()) fail("{}: {}: expected a single value", where, key);
  return n.Scalar();
}

double number(const YAML::Node& n, const std::string& where, const std::string& key) {
  const std::string s = scalar(n, where, key);
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  fail("{}: {}: expected a number, got '{}'", where, key, s);
}

ParamSpace read_space(const std::string& src, const std::string& key, const YAML::Node& n) {
  ParamSpace p;
  p.key = key;
  const std::string where = "params." + key;
  if (n.IsSequence()) {  // shorthand: a list is its values
    for (const auto& v : n) p.values.push_back(scalar(v, src, where));
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string k = kv.first.Scalar();
      if (k == "values") {
        if (!kv.second.IsSequence()) fail("{}: {}.values: expected a list", src, where);
        for (const auto& v : kv.second) p.values.push_back(scalar(v, src, where + ".values"));
      } else if (k == "distribution") {
        p.distribution = scalar(kv.second, src, where + ".distribution");
      } else if (k == "min") {
        p.min = number(kv.second, src, where + ".min");
      } else if (k == "max") {
        p.max = number(kv.second, src, where + ".max");
      } else {
        fail("{}: {}: unknown key '{}' (values, or distribution with min and max)", src, where, k);
      }
    }
  } else {
    fail("{}: {}: expected a list of values or a mapping (values: [...] or distribution: ..., min:, max:)", src, where);
  }
  if (p.values.empty() == p.distribution.empty()) {
    fail("{}: {}: give either values or a distribution (uniform, log_uniform, int_uniform)", src, where);
  }
  if (!p.distribution.empty()) {
    if (p.distribution != "uniform" && p.distribution != "log_uniform" && p.distribution != "int_uniform") {
      fail("{}: {}.distribution: unknown '{}' (uniform, log_uniform, int_uniform)", src, where, p.distribution);
    }
    if (!(p.max > p.min)) fail("{}: {}: max ({}) must be above min ({})", src, where, p.max, p.min);
    if (p.distribution == "log_uniform" && !(p.min > 0)) fail("{}: {}: log_uniform needs min > 0", src, where);
  }
  return p;
}

void read_scheduler(SweepSpec& s, const YAML::Node& n) {
  if (!n.IsMap()) fail("{}: scheduler: expected a mapping (type: asha, min_steps: N, reduction_factor: 3)", s.source);
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    if (k == "type") {
      const std::string t = scalar(kv.second, s.source, "scheduler.type");
      if (t != "asha" && t != "sha") fail("{}: scheduler.type: unknown '{}' (asha, sha)", s.source, t);
      s.scheduler = t;
    } else if (k == "min_steps") {
      s.min_steps = static_cast<int64_t>(number(kv.second, s.source, "scheduler.min_steps"));
    } else if (k == "reduction_factor") {
      s.reduction_factor = static_cast<int64_t>(number(kv.second, s.source, "scheduler.reduction_factor"));
    } else {
      fail("{}: scheduler: unknown key '{}' (type, min_steps, reduction_factor)", s.source, k);
    }
  }
  if (s.min_steps < 1) fail("{}: scheduler.min_steps: the first rung needs >= 1 step", s.source);
  if (s.reduction_factor < 2) fail("{}: scheduler.reduction_factor: must be >= 2", s.source);
}

// A number as --set writes it back exactly (shortest round trip).
std::string format_number(double v, bool integer) {
  return integer ? fmt::format("{}", static_cast<int64_t>(std::llround(v))) : fmt::format("{}", v);
}

}  // namespace

SweepSpec read_sweep_spec(const std::string& path) {
  SweepSpec s;
  s.source = path;
  s.text = fs::read_file(path);
  YAML::Node root;
  try {
    root = YAML::Load(s.text);
  } catch (const YAML::Exception& e) {
    fail("{}: not valid YAML ({})", path, e.what());
  }
  if (!root.IsMap()) fail("{}: expected a mapping with params, method, ... (docs/training-loop.md)", path);
  for (const auto& kv : root) {
    const std::string k = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (k == "base") s.base = scalar(v, path, k);
    else if (k == "output_dir") s.output_dir = scalar(v, path, k);
    else if (k == "method") s.method = scalar(v, path, k);
    else if (k == "trials") s.trials = static_cast<int64_t>(number(v, path, k));
    else if (k == "seed") s.seed = static_cast<uint64_t>(number(v, path, k));
    else if (k == "parallel") s.parallel = static_cast<int>(number(v, path, k));
    else if (k == "metric") s.metric = scalar(v, path, k);
    else if (k == "greater_is_better") s.greater_is_better = scalar(v, path, k) == "true";
    else if (k == "scheduler") read_scheduler(s, v);
    else if (k == "overrides") {
      if (!v.IsSequence()) fail("{}: overrides: expected a list of key=value", path);
      for (const auto& o : v) s.overrides.push_back(scalar(o, path, "overrides"));
    } else if (k == "params") {
      if (!v.IsMap() || v.size() == 0) fail("{}: params: expected a mapping of config key -> search space", path);
      for (const auto& p : v) s.params.push_back(read_space(path, p.first.Scalar(), p.second));
    } else {
      fail("{}: unknown key '{}' (base, output_dir, method, trials, seed, parallel, metric, greater_is_better, "
           "scheduler, overrides, params)",
           path, k);
    }
  }
  if (s.params.empty()) fail("{}: params: required (the config keys to search over)", path);
  if (s.method != "grid" && s.method != "random") fail("{}: method: unknown '{}' (grid, random)", path, s.method);
  if (s.parallel < 1) fail("{}: parallel: must be >= 1", path);
  if (s.method == "random" && s.trials < 1) fail("{}: trials: random search needs trials >= 1", path);
  if (s.method == "grid") {
    for (const auto& p : s.params) {
      if (!p.distribution.empty()) {
        fail("{}: params.{}: a grid takes values, not a distribution (use method: random)", path, p.key);
      }
    }
  }
  return s;
}

std::vector<std::map<std::string, std::string>> sweep_trials(const SweepSpec& spec) {
  std::vector<std::map<std::string, std::string>> out;
  if (spec.method == "grid") {
    out.emplace_back();
    for (const auto& p : spec.params) {  // the product, the first key varying slowest
      std::vector<std::map<std::string, std::string>> next;
      for (const auto& partial : out) {
        for (const auto& v : p.values) {
          auto t = partial;
          t[p.key] = v;
          next.push_back(std::move(t));
        }
      }
      out = std::move(next);
    }
    if (spec.trials > 0 && static_cast<size_t>(spec.trials) < out.size()) out.resize(static_cast<size_t>(spec.trials));
    return out;
  }
  std::mt19937_64 rng(spec.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t i = 0; i < spec.trials; ++i) {
    std::map<std::string, std::string> t;
    for (const auto& p : spec.params) {
      const double u = unit(rng);
      if (!p.values.empty()) {
        t[p.key] = p.values[std::min(p.values.size() - 1, static_cast<size_t>(u * static_cast<double>(p.values.size())))];
      } else if (p.distribution == "log_uniform") {
        t[p.key] = format_number(std::exp(std::log(p.min) + u * (std::log(p.max) - std::log(p.min))), false);
      } else if (p.distribution == "int_uniform") {
        t[p.key] = format_number(std::floor(p.min + u * (p.max - p.min + 1)), true);
      } else {
        t[p.key] = format_number(p.min + u * (p.max - p.min), false);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

bool sweep_greater_is_better(const SweepSpec& spec, const std::string& metric) {
  if (spec.greater_is_better) return *spec.greater_is_better;
  return !(metric == "loss" || metric == "mse" || metric == "mae");
}

int AshaPruner::rung_of(int64_t step) const {
  if (min_steps_ <= 0 || step < min_steps_) return -1;
  int64_t at = min_steps_;
  for (int k = 0; at <= step; ++k, at *= eta_) {
    if (at == step) return k;
  }
  return -1;
}

int64_t AshaPruner::step_of(int rung) const {
  int64_t at = min_steps_;
  for (int k = 0; k < rung; ++k) at *= eta_;
  return at;
}

bool AshaPruner::keep(int rung, double value) {
  auto& seen = values_[rung];
  seen.push_back(value);
  std::vector<double> sorted = seen;
  std::sort(sorted.begin(), sorted.end(), [&](double a, double b) { return greater_ ? a > b : a < b; });
  const size_t top = survivors(seen.size());
  const double cut = sorted[top - 1];
  return greater_ ? value >= cut : value <= cut;
}

}  // namespace ft::app
