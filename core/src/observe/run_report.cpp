#include "ft/observe/run_report.h"

#include <chrono>
#include <ctime>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft_report_template_html.h"

namespace ft {
namespace {

constexpr const char* kDataToken = "/*FT_REPORT_DATA*/null";

nlohmann::json read_records(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) fail("{}: cannot read the metrics (is it a run's metrics JSON Lines file?)", file.string());
  nlohmann::json records = nlohmann::json::array();
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("event")) records.push_back(std::move(j));
  }
  return records;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

std::string render_run_report(const std::vector<ReportRun>& runs, const std::string& title) {
  nlohmann::json data{{"title", title}, {"generated", utc_now()}, {"runs", nlohmann::json::array()}};
  for (const auto& run : runs) data["runs"].push_back({{"name", run.name}, {"records", read_records(run.metrics)}});
  // Inside <script>, "</" could close the element early (a label or a config value holding "</script>").
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string escaped;
  escaped.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    escaped += json[i];
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') escaped += '\\';
  }
  std::string page = kFtReportTemplateHtml;
  const auto at = page.find(kDataToken);
  if (at == std::string::npos) fail("the report template has no data slot (a build problem)");
  page.replace(at, std::string(kDataToken).size(), escaped);
  return page;
}

void write_run_report(const std::filesystem::path& out, const std::vector<ReportRun>& runs, const std::string& title) {
  fs::write_file_atomic(out, render_run_report(runs, title));
}

}  // namespace ft
