// Writers of the `ft bench` table: markdown, CSV, JSON and an SVG chart.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_report.h"
#include "ft/base/error.h"

namespace ft {
namespace {

using nlohmann::json;

bool finite(double v) { return std::isfinite(v); }

std::string num(double v, int decimals) { return finite(v) ? fmt::format("{:.{}f}", v, decimals) : ""; }

std::string cell(double v, int decimals) { return finite(v) ? fmt::format("{:.{}f}", v, decimals) : "—"; }

double to_mb(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

template <typename T, typename F>
std::string join(const std::vector<T>& v, const std::string& sep, F&& f) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + f(v[i]);
  return out;
}

double max_rss(const BenchRow& r) {
  double m = std::numeric_limits<double>::quiet_NaN();
  for (double v : r.peak_rss_mb) m = finite(m) ? std::max(m, v) : v;
  return m;
}

int64_t theory_bytes(const BenchRow& r) { return r.trainable_params > 0 ? r.theory_bytes : -1; }

// Markdown cells must not contain '|' or newlines.
std::string md_escape(std::string s) {
  for (auto& c : s) {
    if (c == '|') c = '/';
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

json nullable(double v) { return finite(v) ? json(v) : json(nullptr); }

double get_double(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

std::vector<std::string> trainer_preset_overrides(const std::string& output_dir) {
  return {"data.padding=longest",     "strategy.precision=auto",     "train.eval_every=0",
          "train.save_every=0",       "train.save_total_limit=3",    "train.best_metric=macro_f1",
          "train.output_dir=" + output_dir};
}

void fill_row_from_summary(BenchRow& row, const std::string& line) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("event", "") != "summary") {
    fail("bench row {}: the metrics line is not a summary event: {}", row.id, line.substr(0, 80));
  }
  row.precision = j.value("precision", "");
  row.world_size = j.value("world_size", 0);
  row.threads_per_rank = j.value("threads_per_rank", 0);
  row.steps = j.value("steps", int64_t{0});
  row.samples = j.value("samples", int64_t{0});
  row.train_seconds = get_double(j, "train_seconds");
  row.samples_per_s = get_double(j, "samples_per_s");
  row.final_loss = get_double(j, "final_loss");
  row.dev_accuracy = get_double(j, "eval_accuracy");
  row.dev_macro_f1 = get_double(j, "eval_macro_f1");
  row.peak_rss_mb = j.value("peak_rss_mb", std::vector<double>{});
  row.model_state_bytes = j.value("model_state_bytes", std::vector<int64_t>{});
  row.trainable_params = j.value("trainable_params", int64_t{0});
  row.negatives_per_anchor = j.value("negatives_per_anchor", int64_t{-1});
}

double speedup_vs_single(const BenchReport& report, const BenchRow& row) {
  for (const auto& r : report.rows) {
    if (r.id == "single" && r.ok && finite(r.train_seconds) && finite(row.train_seconds) && row.train_seconds > 0) {
      return r.train_seconds / row.train_seconds;
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::string bench_markdown(const BenchReport& rep) {
  const int per_rank = std::max(1, rep.cores / std::max(1, rep.nproc));
  std::string out = fmt::format(
      "Workload `{}` (`{}`), {}, global batch {} (per rank {} with {} ranks), measured over {}. "
      "Equal CPU per row on {} cores: `single` and `dp` use {} intra-op threads in one process "
      "(`dp`: {} replicas); N ranks use {}/N = {} thread(s) each. "
      "Model state counts fp32 AdamW bytes: 4 B param + 4 B grad + 8 B Adam = 16Ψ per replica "
      "(theory in brackets; Ψ = trainable parameters).{}\n\n",
      rep.workload, rep.config, rep.machine.empty() ? "this machine" : rep.machine, rep.global_batch,
      rep.global_batch / std::max(1, rep.nproc), rep.nproc,
      rep.steps > 0 ? fmt::format("{} steps per row", rep.steps) : std::string("one epoch per row"), rep.cores,
      rep.cores, rep.nproc, rep.cores, per_rank, rep.command.empty() ? "" : fmt::format("\nCommand: `{}`", rep.command));
  // Ranking losses (the sentence-embedding task) add their negatives per anchor.
  const bool negatives = std::any_of(rep.rows.begin(), rep.rows.end(), [](const BenchRow& r) { return r.negatives_per_anchor >= 0; });
  out +=
      "| row | strategy | world | precision | train s | samples/s | speed-up | peak RSS/rank MB | model state/rank MB "
      "[theory] | final loss | dev acc | dev F1 | seeds' min |" + std::string(negatives ? " negatives/anchor |" : "") + "\n";
  out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + std::string(negatives ? "---|" : "") + "\n";
  auto negatives_cell = [negatives](const BenchRow& r) {
    if (!negatives) return std::string();
    return r.negatives_per_anchor >= 0 ? fmt::format(" {} |", r.negatives_per_anchor) : std::string(" — |");
  };
  for (const auto& r : rep.rows) {
    const std::string seeds =
        finite(r.seed_minutes) ? fmt::format("{:.4f} ({})", r.seed_minutes, r.seed_row) : (r.seed_row.empty() ? "—" : r.seed_row);
    std::string label = md_escape(r.label);
    if (!r.note.empty()) label += " — " + md_escape(r.note);
    if (!r.ok) {
      out += fmt::format("| {} | {} | — | — | FAILED: {} | | | | | | | | {} |{}\n", label, r.strategy,
                         md_escape(r.error), seeds, negatives_cell(r));
      continue;
    }
    const std::string rss = join(r.peak_rss_mb, " / ", [](double v) { return fmt::format("{:.0f}", v); });
    std::string state = join(r.model_state_bytes, " / ", [](int64_t v) { return fmt::format("{:.2f}", to_mb(v)); });
    const int64_t theory = theory_bytes(r);
    const std::string formula = r.theory_formula;
    if (theory >= 0) state += fmt::format(" [{} = {:.2f}]", formula, to_mb(theory));
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{}\n", label, r.strategy,
                       r.world_size, r.precision, cell(r.train_seconds, 2), cell(r.samples_per_s, 1),
                       finite(speedup_vs_single(rep, r)) ? fmt::format("{:.2f}x", speedup_vs_single(rep, r)) : "—",
                       rss, state, cell(r.final_loss, 4), cell(r.dev_accuracy, 4), cell(r.dev_macro_f1, 4), seeds,
                       negatives_cell(r));
  }
  out +=
      "\nColumns: *train s* is the training loop alone (start-up and data loading left out); *speed-up* is "
      "samples/s over the `single` row's; *peak RSS/rank* is each rank's resident memory peak; *model state/rank* is "
      "parameters + gradients + optimizer state per rank, with the textbook formula in brackets; *final loss* is the "
      "last logged loss; *dev acc* / *dev F1* are the last evaluation (— without a dev split); *seeds' min* is the "
      "minutes the seed PyTorch scripts took for the matching row on their GPU machine (BENCHMARK.md): an order to "
      "compare with, not a time on this machine." +
      std::string(negatives ? " *negatives/anchor* is each anchor's in-batch negatives (the global micro-batch's other "
                              "positives and every negative column's rows; the rank's own with gathering off)." : "") +
      "\n";
  return out;
}

std::string bench_csv_header() {
  return "row,strategy,world_size,precision,threads_per_rank,steps,samples,train_seconds,samples_per_s,"
         "speedup_vs_single,peak_rss_mb_per_rank,model_state_bytes_per_rank,theory_formula,theory_bytes_per_rank,"
         "trainable_params,final_loss,dev_accuracy,dev_macro_f1,seed_minutes,status,error";
}

std::string bench_csv(const BenchReport& rep) {
  std::string out = bench_csv_header() + "\n";
  for (const auto& r : rep.rows) {
    const int64_t theory = theory_bytes(r);
    const std::string formula = r.theory_formula;
    std::vector<std::string> f{
        csv_escape(r.id),
        csv_escape(r.strategy),
        r.ok ? std::to_string(r.world_size) : "",
        csv_escape(r.precision),
        r.ok ? std::to_string(r.threads_per_rank) : "",
        r.ok ? std::to_string(r.steps) : "",
        r.ok ? std::to_string(r.samples) : "",
        num(r.train_seconds, 4),
        num(r.samples_per_s, 3),
        num(speedup_vs_single(rep, r), 4),
        join(r.peak_rss_mb, ";", [](double v) { return fmt::format("{:.1f}", v); }),
        join(r.model_state_bytes, ";", [](int64_t v) { return std::to_string(v); }),
        r.ok ? csv_escape(formula) : "",
        r.ok && theory >= 0 ? std::to_string(theory) : "",
        r.ok ? std::to_string(r.trainable_params) : "",
        num(r.final_loss, 6),
        num(r.dev_accuracy, 6),
        num(r.dev_macro_f1, 6),
        num(r.seed_minutes, 4),
        r.ok ? "ok" : "failed",
        csv_escape(r.error)};
    out += join(f, ",", [](const std::string& s) { return s; }) + "\n";
  }
  return out;
}

std::string bench_json(const BenchReport& rep) {
  json rows = json::array();
  for (const auto& r : rep.rows) {
    const int64_t theory = theory_bytes(r);
    json j{{"row", r.id},
           {"label", r.label},
           {"strategy", r.strategy},
           {"ok", r.ok},
           {"command", r.command},
           {"wall_seconds", r.wall_seconds},
           {"seed_row", r.seed_row},
           {"seed_minutes", nullable(r.seed_minutes)}};
    if (!r.ok) j["error"] = r.error;
    if (!r.note.empty()) j["note"] = r.note;
    if (r.ok) {
      j["world_size"] = r.world_size;
      j["precision"] = r.precision;
      j["threads_per_rank"] = r.threads_per_rank;
      j["steps"] = r.steps;
      j["samples"] = r.samples;
      j["train_seconds"] = nullable(r.train_seconds);
      j["samples_per_s"] = nullable(r.samples_per_s);
      j["speedup_vs_single"] = nullable(speedup_vs_single(rep, r));
      j["peak_rss_mb"] = r.peak_rss_mb;
      if (r.negatives_per_anchor >= 0) j["negatives_per_anchor"] = r.negatives_per_anchor;
      j["model_state_bytes"] = r.model_state_bytes;
      j["trainable_params"] = r.trainable_params;
      j["theory_formula"] = r.theory_formula;
      j["theory_bytes"] = theory >= 0 ? json(theory) : json(nullptr);
      j["final_loss"] = nullable(r.final_loss);
      j["dev_accuracy"] = nullable(r.dev_accuracy);
      j["dev_macro_f1"] = nullable(r.dev_macro_f1);
    }
    rows.push_back(std::move(j));
  }
  json top{{"workload", rep.workload}, {"config", rep.config},   {"nproc", rep.nproc},
           {"cores", rep.cores},       {"global_batch", rep.global_batch}, {"steps", rep.steps},
           {"command", rep.command},   {"machine", rep.machine}, {"rows", rows}};
  return top.dump(2) + "\n";
}

std::string bench_svg(const BenchReport& rep) {
  // Two horizontal bar panels side by side; one line per row. The label
  // column is as wide as the longest label ("pipeline (1f1b, 4
  // micro-batches)"): about 7 px per character of 12 px sans-serif.
  size_t longest = 0;
  for (const auto& r : rep.rows) longest = std::max(longest, r.label.size());
  const int label_w = std::max(120, 16 + 7 * static_cast<int>(longest));
  const int panel_w = 300, gap = 70, row_h = 22, top = 56;
  const int n = static_cast<int>(rep.rows.size());
  const int width = label_w + 2 * panel_w + gap + 80;
  const int height = top + n * row_h + 40;
  double max_s = 0, max_mb = 0;
  for (const auto& r : rep.rows) {
    if (!r.ok) continue;
    if (finite(r.train_seconds)) max_s = std::max(max_s, r.train_seconds);
    if (finite(max_rss(r))) max_mb = std::max(max_mb, max_rss(r));
  }
  max_s = max_s > 0 ? max_s : 1;
  max_mb = max_mb > 0 ? max_mb : 1;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height, width, height);
  out += fmt::format("<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">ft bench: {} ({})</text>\n",
                     xml_escape(rep.workload),
                     rep.steps > 0 ? fmt::format("{} steps per row", rep.steps) : std::string("one epoch per row"));
  const int x1 = label_w, x2 = label_w + panel_w + gap;
  out += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">train seconds (lower is better)</text>\n", x1, top - 10);
  out += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">peak RSS per rank, MB (max over ranks)</text>\n", x2,
                     top - 10);
  for (int i = 0; i < n; ++i) {
    const auto& r = rep.rows[static_cast<size_t>(i)];
    const int y = top + i * row_h;
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", label_w - 8, y + 14,
                       xml_escape(r.label));
    if (!r.ok) {
      out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#b00\">failed</text>\n", x1 + 4, y + 14);
      continue;
    }
    const double ws = finite(r.train_seconds) ? panel_w * r.train_seconds / max_s : 0;
    const double wm = finite(max_rss(r)) ? panel_w * max_rss(r) / max_mb : 0;
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#4a7ab7\"/>\n", x1, y + 3, ws,
                       row_h - 6);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\">{}</text>\n", x1 + ws + 4, y + 14, cell(r.train_seconds, 1));
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#d9822b\"/>\n", x2, y + 3, wm,
                       row_h - 6);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\">{}</text>\n", x2 + wm + 4, y + 14, cell(max_rss(r), 0));
  }
  out += fmt::format("<text x=\"10\" y=\"{}\" fill=\"#555\">{} ranks; single/dp: {} threads, ranks: {}/N threads each</text>\n",
                     height - 12, rep.nproc, rep.cores, rep.cores);
  out += "</svg>\n";
  return out;
}

}  // namespace ft
