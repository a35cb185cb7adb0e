// report.html in a real browser: headless Chromium (Debian's `chromium`)
// opens a run's page and an overlay of two runs; scripts/check-report.sh
// fails on a console error or on any chart left undrawn. Its own binary, so
// that where Chromium is absent the skip hides no other test's passes.
#include <fmt/format.h>

#include "ft_run.h"
#include "ft_tiny_task.h"

namespace {

namespace fsys = std::filesystem;

// scripts/check-report.sh on `page`: 0 drawn, 77 no Chromium, else failed.
ft_test::RunOutput check_page(const fsys::path& page, const fsys::path& shot) {
  ft_test::RunOutput out;
  const std::string cmd = fmt::format("'{}' '{}' '{}' 2>&1", (ft_test::source_dir() / "scripts/check-report.sh").string(),
                                      page.string(), shot.string());
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.output.append(buf, n);
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

TEST_CASE("report.html and an overlay of two runs draw every chart in headless Chromium, without a console error") {
  ft_test::TempDir tmp("report-browser");
  ft_test::write_tiny_task(tmp.path());
  for (const char* lr : {"5e-3", "2e-2"}) {
    ft_test::run_ok(fmt::format("run --config {0}/run.yaml --set data.dev={0}/train.jsonl --set train.eval_every=4 "
                                "--set train.lr={1} --max-steps 12 --output-dir {0}/lr-{1}",
                                tmp.path().string(), lr));
  }
  ft_test::run_ok(fmt::format("report {0}/lr-5e-3 {0}/lr-2e-2 -o {0}/both.html", tmp.path().string()));
  const auto one = check_page(tmp.path() / "lr-5e-3/report.html", tmp.path() / "one.png");
  if (one.exit_code == 77) {
    ft_test::skip("Chromium is not installed (Debian: chromium): report.html was written but not opened");
    return;
  }
  INFO(one.output);
  CHECK(one.exit_code == 0);
  CHECK(one.output.find("charts drawn") != std::string::npos);
  const auto both = check_page(tmp.path() / "both.html", tmp.path() / "both.png");
  INFO(both.output);
  CHECK(both.exit_code == 0);
}
