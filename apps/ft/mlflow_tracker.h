// MLflow tracking for `ft run` (runtime.report_to: [mlflow]), on rank 0:
// the run's params, its metrics per step and its final artefacts go to an
// MLflow tracking server through the REST API, found as transformers'
// MLflowCallback finds it (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME).
//
// Training never waits on the server: records go into a bounded queue that
// one thread sends. A server that is down or too slow gets a few retries,
// then one warning, and tracking stops while training goes on.
#pragma once

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ft/config/config.h"
#include "ft/observe/events.h"

namespace ft::app {

class MlflowTracker {
 public:
  // Starts the sender; fails (one line) when MLFLOW_TRACKING_URI is unset
  // or not http(s).
  MlflowTracker(const RunConfig& config, EventLog& events);
  ~MlflowTracker();
  MlflowTracker(const MlflowTracker&) = delete;
  MlflowTracker& operator=(const MlflowTracker&) = delete;

  // EventLog's listener: one metrics record (a JSON object).
  void record(const std::string& json_line);
  // Uploads `artefacts` (file name, bytes), marks the run FINISHED or
  // FAILED and waits for the queue to drain, at most `wait_s` seconds.
  void finish(bool ok, const std::vector<std::pair<std::string, std::string>>& artefacts, double wait_s = 30);

 private:
  struct Task;
  void run_sender();
  bool send(const Task& task);
  void give_up(const std::string& why);

  EventLog& events_;
  std::string uri_, experiment_, run_name_;
  std::vector<std::pair<std::string, std::string>> params_;
  std::string experiment_id_, run_id_, artefact_path_;
  bool artefacts_skipped_ = false;
  std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::deque<std::unique_ptr<Task>> queue_;
  size_t dropped_ = 0;
  bool busy_ = false, stopping_ = false, dead_ = false;
  std::thread sender_;
};

}  // namespace ft::app
