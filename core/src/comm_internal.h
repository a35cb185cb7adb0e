// Private to comm*.cpp: the c10d objects behind ft::Comm and ft::Work.
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "ft/comm.h"
#include "ft/compat.h"

namespace ft {

/// Set once, by the first collective that fails; read by every later call.
struct CommHealth {
  mutable std::mutex mutex;
  std::string failure;  // empty while healthy
  int rank = 0;

  std::string get() const {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }
  void set(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure.empty()) failure = why;
  }
};

/// The store and groups of a world-size > 1 Comm. `gloo` carries CPU tensors,
/// `nccl` CUDA tensors; either may be null depending on CommOptions::backend.
struct CommGroups {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::Backend> gloo;
  c10::intrusive_ptr<compat::Backend> nccl;
};

/// What a Work handle waits for, then the local post-processing (casts back
/// from the wire dtype, Avg division, summing received chunks).
struct Work::State {
  std::string what;  // collective name for messages
  std::shared_ptr<CommHealth> health;
  std::chrono::milliseconds timeout{0};
  std::vector<c10::intrusive_ptr<compat::Work>> works;
  std::function<void()> finish;
  bool done = false;
  std::exception_ptr error;
};

/// First line of a (c10d, often multi-line) exception message.
std::string first_line(const std::string& text);

}  // namespace ft
