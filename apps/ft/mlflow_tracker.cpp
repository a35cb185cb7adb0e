#include "mlflow_tracker.h"

#include <chrono>
#include <cstdlib>
#include <optional>

#include <curl/curl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "ft/base/error.h"

namespace ft::app {
namespace {

using nlohmann::json;
using WallClock = std::chrono::system_clock;

// MLflow's log-batch limits: 1000 metrics and 100 params per request.
constexpr size_t kMetricsPerBatch = 1000;
constexpr size_t kParamsPerBatch = 100;
// Beyond this many waiting tasks the oldest metrics are dropped (a server far slower than training).
constexpr size_t kQueueLimit = 4096;
constexpr int kAttempts = 3;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(WallClock::now().time_since_epoch()).count();
}

// "section.key" = value for every scalar and list of the effective config.
void flatten(const YAML::Node& node, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) flatten(kv.second, prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar(), out);
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  std::string value = node.IsScalar() ? node.Scalar() : node.IsNull() ? "" : e.c_str();
  if (value.size() > 500) value = value.substr(0, 497) + "...";  // servers before 2.x keep 500 characters
  out.emplace_back(prefix, value);
}

size_t collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

struct Response {
  long status = 0;
  std::string body, error;
};

// One HTTP call with short timeouts: the sender must notice a dead server in seconds.
Response http(const std::string& method, const std::string& url, const std::string& body, const char* content_type) {
  Response r;
  CURL* curl = curl_easy_init();
  if (!curl) return {0, "", "curl_easy_init failed"};
  curl_slist* headers = curl_slist_append(nullptr, fmt::format("Content-Type: {}", content_type).c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (method != "GET") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // a sender thread: no SIGALRM for DNS timeouts
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  const CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) r.error = curl_easy_strerror(rc);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return r;
}

std::string escape(const std::string& s) {
  char* e = curl_easy_escape(nullptr, s.c_str(), static_cast<int>(s.size()));
  std::string out = e ? e : s;
  curl_free(e);
  return out;
}

}  // namespace

// One unit of the sender's work.
struct MlflowTracker::Task {
  enum Kind { kStart, kMetrics, kArtefact, kEnd } kind = kMetrics;
  json metrics = json::array();  // kMetrics
  std::string name, bytes;       // kArtefact
  bool ok = true;                // kEnd
};

MlflowTracker::MlflowTracker(const RunConfig& config, EventLog& events) : events_(events) {
  const char* uri = std::getenv("MLFLOW_TRACKING_URI");
  if (uri == nullptr || *uri == '\0') {
    fail("runtime.report_to: mlflow needs MLFLOW_TRACKING_URI, the tracking server (e.g. http://127.0.0.1:5000); "
         "ft does not write a local mlruns store");
  }
  uri_ = uri;
  while (!uri_.empty() && uri_.back() == '/') uri_.pop_back();
  if (uri_.rfind("http://", 0) != 0 && uri_.rfind("https://", 0) != 0) {
    fail("MLFLOW_TRACKING_URI={}: ft talks to a tracking server over http(s); give its URL", uri_);
  }
  const char* experiment = std::getenv("MLFLOW_EXPERIMENT_NAME");
  experiment_ = experiment != nullptr && *experiment != '\0' ? experiment : "Default";
  run_name_ = config.runtime.run_name;
  if (run_name_.empty() && !config.train.output_dir.empty()) {
    run_name_ = std::filesystem::path(config.train.output_dir).lexically_normal().filename().string();
  }
  flatten(YAML::Load(to_yaml(config)), "", params_);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  queue_.push_back(std::make_unique<Task>(Task{Task::kStart}));
  sender_ = std::thread([this] { run_sender(); });
}

MlflowTracker::~MlflowTracker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    dead_ = true;  // whatever is left is not sent: the run is over
  }
  wake_.notify_all();
  if (sender_.joinable()) sender_.join();
  curl_global_cleanup();
}

void MlflowTracker::record(const std::string& json_line) {
  const json j = json::parse(json_line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  const std::string event = j.value("event", "");
  const int64_t ts = now_ms();
  auto task = std::make_unique<Task>();
  auto metric = [&](const std::string& key, const json& value, int64_t step) {
    if (value.is_number()) task->metrics.push_back({{"key", key}, {"value", value}, {"timestamp", ts}, {"step", step}});
  };
  if (event == "step") {
    const int64_t step = j.value("step", int64_t{0});
    metric("loss", j.value("loss", json()), step);
    metric("learning_rate", j.value("lr", json()), step);
    metric("grad_norm", j.value("grad_norm", json()), step);
    metric("samples_per_s", j.value("samples_per_s", json()), step);
  } else if (event == "eval") {
    const int64_t step = j.value("step", int64_t{0});
    const std::string prefix = j.contains("dev") ? "eval_" + j.at("dev").get<std::string>() + "_" : "eval_";
    for (const auto& [key, value] : j.items()) {
      if (key != "step" && key != "epoch" && key != "samples" && key != "masked_tokens") metric(prefix + key, value, step);
    }
  } else if (event == "summary") {
    const int64_t step = j.value("steps", int64_t{0});
    metric("train_samples_per_second", j.value("samples_per_s", json()), step);
    metric("train_runtime", j.value("train_seconds", json()), step);
  }
  if (task->metrics.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dead_) return;
    if (queue_.size() >= kQueueLimit) {  // the oldest metrics go first; the run's start and end never
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if ((*it)->kind == Task::kMetrics) {
          queue_.erase(it);
          ++dropped_;
          break;
        }
      }
    }
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void MlflowTracker::finish(bool ok, const std::vector<std::pair<std::string, std::string>>& artefacts, double wait_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (dead_) return;
  for (const auto& [name, bytes] : artefacts) {
    auto task = std::make_unique<Task>(Task{Task::kArtefact});
    task->name = name;
    task->bytes = bytes;
    queue_.push_back(std::move(task));
  }
  auto end = std::make_unique<Task>(Task{Task::kEnd});
  end->ok = ok;
  queue_.push_back(std::move(end));
  wake_.notify_one();
  const bool done = drained_.wait_for(lock, std::chrono::duration<double>(wait_s),
                                      [&] { return dead_ || (queue_.empty() && !busy_); });
  if (!done) {
    dead_ = true;
    lock.unlock();
    events_.warn(fmt::format("mlflow: {} did not take the run's last records within {:.0f} s; they are not sent", uri_,
                             wait_s));
  }
}

void MlflowTracker::give_up(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dead_) return;
    dead_ = true;
    queue_.clear();
  }
  drained_.notify_all();
  events_.warn(fmt::format("mlflow: {} ({}); tracking stops here, training goes on", why, uri_));
}

void MlflowTracker::run_sender() {
  for (;;) {
    std::unique_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || dead_ || !queue_.empty(); });
      if (dead_ || (stopping_ && queue_.empty())) break;
      task = std::move(queue_.front());
      queue_.pop_front();
      // Metrics waiting behind this one go in the same request.
      while (task->kind == Task::kMetrics && !queue_.empty() && queue_.front()->kind == Task::kMetrics &&
             task->metrics.size() + queue_.front()->metrics.size() <= kMetricsPerBatch) {
        for (auto& m : queue_.front()->metrics) task->metrics.push_back(std::move(m));
        queue_.pop_front();
      }
      busy_ = true;
    }
    const bool sent = send(*task);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
    }
    drained_.notify_all();
    if (!sent) break;
  }
  drained_.notify_all();
}

// One task, with retries; false once the server is given up on.
bool MlflowTracker::send(const Task& task) {
  // nullopt: given up on; with `missing_ok`, a 404 is an empty object instead.
  auto call = [&](const std::string& method, const std::string& path, const std::string& body,
                  const char* type = "application/json", bool missing_ok = false) -> std::optional<json> {
    std::string last;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500 * attempt));
      const Response r = http(method, uri_ + path, body, type);
      if (r.error.empty() && r.status >= 200 && r.status < 300) {
        return json::parse(r.body.empty() ? "{}" : r.body, nullptr, false);
      }
      if (missing_ok && r.error.empty() && r.status == 404) return json::object();
      last = !r.error.empty() ? r.error : fmt::format("HTTP {} on {}: {}", r.status, path, r.body.substr(0, 200));
      if (r.status >= 400 && r.status < 500 && r.status != 429) break;  // a refusal: retrying changes nothing
    }
    give_up(last);
    return std::nullopt;
  };
  switch (task.kind) {
    case Task::kStart: {
      // A missing experiment is a 404 (RESOURCE_DOES_NOT_EXIST): then it is created.
      auto found = call("GET", "/api/2.0/mlflow/experiments/get-by-name?experiment_name=" + escape(experiment_), "",
                        "application/json", true);
      if (!found) return false;
      if (found->contains("experiment")) {
        experiment_id_ = found->at("experiment").value("experiment_id", "");
      } else {
        auto created = call("POST", "/api/2.0/mlflow/experiments/create", json{{"name", experiment_}}.dump());
        if (!created) return false;
        experiment_id_ = created->value("experiment_id", "");
      }
      json run{{"experiment_id", experiment_id_}, {"start_time", now_ms()}};
      if (!run_name_.empty()) {
        run["run_name"] = run_name_;
        run["tags"] = json::array({{{"key", "mlflow.runName"}, {"value", run_name_}}});
      }
      auto made = call("POST", "/api/2.0/mlflow/runs/create", run.dump());
      if (!made) return false;
      const json& info = made->at("run").at("info");
      run_id_ = info.value("run_id", "");
      // Uploads go where the run's listing looks: its artifact_uri on the server's proxy.
      const std::string artefacts = info.value("artifact_uri", "");
      const std::string proxy = "mlflow-artifacts:";
      if (artefacts.rfind(proxy, 0) == 0) artefact_path_ = "/api/2.0/mlflow-artifacts/artifacts" + artefacts.substr(proxy.size());
      for (size_t i = 0; i < params_.size(); i += kParamsPerBatch) {
        json params = json::array();
        for (size_t k = i; k < std::min(params_.size(), i + kParamsPerBatch); ++k) {
          params.push_back({{"key", params_[k].first}, {"value", params_[k].second}});
        }
        if (!call("POST", "/api/2.0/mlflow/runs/log-batch", json{{"run_id", run_id_}, {"params", params}}.dump())) return false;
      }
      return true;
    }
    case Task::kMetrics:
      return call("POST", "/api/2.0/mlflow/runs/log-batch", json{{"run_id", run_id_}, {"metrics", task.metrics}}.dump())
          .has_value();
    case Task::kArtefact: {
      if (artefact_path_.empty()) {  // a store the client writes itself (s3://, a path): not ours to reach
        if (!artefacts_skipped_) events_.warn(fmt::format("mlflow: the server does not proxy artifacts; {} not uploaded", task.name));
        artefacts_skipped_ = true;
        return true;
      }
      return call("PUT", artefact_path_ + "/" + escape(task.name), task.bytes, "application/octet-stream").has_value();
    }
    case Task::kEnd: {
      if (dropped_ > 0) {
        events_.warn(fmt::format("mlflow: {} metric record(s) were dropped: the server took them slower than training "
                                 "made them",
                                 dropped_));
      }
      json end{{"run_id", run_id_}, {"status", task.ok ? "FINISHED" : "FAILED"}, {"end_time", now_ms()}};
      return call("POST", "/api/2.0/mlflow/runs/update", end.dump()).has_value();
    }
  }
  return true;
}

}  // namespace ft::app
