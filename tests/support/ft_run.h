// Running the real `ft` binary from tests and reading its metrics.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft_test.h"

namespace ft_test {

struct RunOutput {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

// Runs `ft <args>` from `cwd`, by default the source dir (configs use paths
// relative to it); `env` ("NAME=value ...") is set for that process only.
inline RunOutput run_ft(const std::string& args, const std::string& env = "",
                        const std::filesystem::path& cwd = source_dir()) {
  const std::string cmd =
      "cd '" + cwd.string() + "' && " + (env.empty() ? "" : "env " + env + " ") + "'" + ft_exe().string() + "' " + args + " 2>&1";
  RunOutput out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// All JSON Lines of a metrics file whose "event" equals `event`.
inline std::vector<nlohmann::json> read_events(const std::filesystem::path& file, const std::string& event) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    // A file still being written may end in a partial line: skip it.
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    if (j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

// The data of each strategy event `name` (StrategyContext::events, e.g.
// "ddp.overlap") in a metrics file, in the order they were written.
inline std::vector<nlohmann::json> strategy_events(const std::filesystem::path& metrics, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& j : read_events(metrics, "strategy")) {
    if (j.value("name", "") == name) out.push_back(j.at("data"));
  }
  return out;
}

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::vector<double> step_losses(const std::filesystem::path& metrics) {
  std::vector<double> out;
  for (const auto& j : read_events(metrics, "step")) out.push_back(j.at("loss").get<double>());
  return out;
}

inline std::vector<double> reference_losses() {
  std::ifstream in(shared_dir() / "fixtures/parity-tiny/ref_losses.json");
  return nlohmann::json::parse(in).at("losses").get<std::vector<double>>();
}

// run_ft that must succeed (the command and its output shown otherwise);
// returns the output.
inline std::string run_ok(const std::string& args) {
  auto out = run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  return out.output;
}

// The one "summary" record of a metrics file.
inline nlohmann::json summary_of(const std::filesystem::path& metrics) {
  auto s = read_events(metrics, "summary");
  REQUIRE(s.size() == 1);
  return s[0];
}

// Every step loss of `metrics` within `tol` of `ref` (the same run on
// another strategy); `name` labels a failure.
inline void check_same_losses(const std::vector<double>& ref, const std::filesystem::path& metrics,
                              const std::string& name, double tol) {
  const auto got = step_losses(metrics);
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(name << " step " << i + 1 << ": " << got[i] << " vs " << ref[i]);
    CHECK(std::abs(got[i] - ref[i]) < tol);
  }
}

// `ft run` on parity-tiny with `flags` resumes the checkpoint `saved`
// (taken at step 4) and runs to step 8, writing `metrics` (replaced): its
// four steps must match reference steps 5-8 within 1e-4.
inline void check_resumed_steps(const std::filesystem::path& saved, const std::string& flags,
                                const std::filesystem::path& metrics) {
  std::filesystem::remove(metrics);
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --threads 1 --metrics-out {} {} --resume {} --max-steps 8",
      metrics.string(), flags, saved.string());
  const auto ref = reference_losses();
  auto out = run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);
  const auto got = step_losses(metrics);
  REQUIRE(got.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO("step " << i + 5);
    CHECK(std::abs(got[i] - ref[i + 4]) < 1e-4);
  }
}

}  // namespace ft_test
