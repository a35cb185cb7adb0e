// Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.cpp).
//
// A target catches ft::Error (the documented answer to bad input) and lets
// everything else escape: another exception type, a sanitizer report or a
// broken invariant (bug() aborts) is what libFuzzer and the replay test
// report as a failure.
#pragma once

#include <pthread.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <type_traits>
#include <string_view>
#include <vector>

namespace ft_fuzz {

[[noreturn]] inline void bug(const std::string& what) {
  std::fprintf(stderr, "fuzz: invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void check(bool ok, const char* what) {
  if (!ok) bug(what);
}

// Called with each ft::Error a target catches: FT_FUZZ_VERBOSE=1 prints it,
// to check that a seed reaches the code it was written for.
inline void rejected(const std::exception& e) {
  static const bool verbose = std::getenv("FT_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "fuzz: rejected: %s\n", e.what());
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits on 0xFF, a byte that never occurs in UTF-8, so each part of an input
// can still hold any valid text; at most max_parts parts (the last keeps the rest).
inline std::vector<std::string_view> split_parts(std::string_view s, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = s.find('\xFF');
    if (at == std::string_view::npos) break;
    parts.push_back(s.substr(0, at));
    s.remove_prefix(at + 1);
  }
  parts.push_back(s);
  return parts;
}

// Stack sizes for run_input. Real files are far larger than fuzz inputs
// (-max_len), so recursion that grows with the input (e.g. nlohmann's dump()
// of "[[[[...]]]]") would need megabytes of input to overflow the usual 8 MB
// stack; a small stack shows the same bug with a few KB.
constexpr size_t kSmallStack = 512 * 1024;
constexpr size_t kDefaultStack = 8 * 1024 * 1024;

// CPU seconds one input may take. libFuzzer's -timeout counts wall time,
// which a loaded machine stretches far past the CPU time (the fuzzers run at
// nice 15 on shared cores), so hangs are judged here and -timeout is only the
// backstop for inputs that never return.
constexpr double kCpuBudgetSeconds = 5.0;

inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs f() on a thread with `stack_bytes` of stack, fails the input if it
// used more than kCpuBudgetSeconds, and rethrows here whatever escaped f.
template <typename F>
void run_input(size_t stack_bytes, F&& f) {
  struct Job {
    std::remove_reference_t<F>* f;
    std::exception_ptr error;
    double cpu_seconds = 0;
  } job{&f, nullptr};
  auto body = [](void* arg) -> void* {
    auto* j = static_cast<Job*>(arg);
    const double start = thread_cpu_seconds();
    try {
      (*j->f)();
    } catch (...) {
      j->error = std::current_exception();
    }
    j->cpu_seconds = thread_cpu_seconds() - start;
    return nullptr;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  if (pthread_create(&thread, &attr, body, &job) != 0) bug("cannot start the input's thread");
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  if (job.error) std::rethrow_exception(job.error);
  if (job.cpu_seconds > kCpuBudgetSeconds)
    bug("the input took " + std::to_string(job.cpu_seconds) + " s of CPU (budget " +
        std::to_string(kCpuBudgetSeconds) + " s)");
}

}  // namespace ft_fuzz
