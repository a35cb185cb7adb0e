// ft::OptionReader (ft/config/options.h). Compiled into ft_core so that every
// option error is thrown from the library that owns ft::Error, whichever
// plugin asked.
#include "ft/config/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ft/base/error.h"

namespace ft {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string with_hint(std::string expected, std::string_view hint) {
  if (!hint.empty()) expected += fmt::format(" ({})", hint);
  return expected;
}

std::string describe(IntRange r) {
  constexpr int kLow = std::numeric_limits<int>::min(), kHigh = std::numeric_limits<int>::max();
  if (r.max == kHigh) return r.min == kLow ? "an integer" : fmt::format("an integer >= {}", r.min);
  if (r.min == kLow) return fmt::format("an integer <= {}", r.max);
  return fmt::format("an integer from {} to {}", r.min, r.max);
}

// from_chars, not strtol/strtod: no leading spaces or '+', and no locale
// deciding what the decimal point is.
template <typename T>
std::optional<T> parse_number(const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

}  // namespace

OptionReader::OptionReader(std::map<std::string, std::string> options, std::string strategy,
                           std::vector<std::string> known, Unknown unknown)
    : options_(std::move(options)), strategy_(std::move(strategy)), known_(std::move(known)) {
  for (auto it = options_.begin(); it != options_.end();) {
    if (std::find(known_.begin(), known_.end(), it->first) != known_.end()) {
      ++it;
      continue;
    }
    if (unknown == Unknown::kReject) {
      fail("strategy.options.{}: unknown option for {} (known: {})", it->first, strategy_,
           known_.empty() ? std::string("none") : fmt::format("{}", fmt::join(known_, ", ")));
    }
    unknown_.insert(*it);
    it = options_.erase(it);
  }
}

const std::string* OptionReader::find(const std::string& key) const {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
    throw std::logic_error(fmt::format("OptionReader: {} reads strategy.options.{} without declaring it known",
                                       strategy_, key));
  }
  auto it = options_.find(key);
  return it == options_.end() ? nullptr : &it->second;
}

bool OptionReader::has(const std::string& key) const { return find(key) != nullptr; }

void OptionReader::fail_value(const std::string& key, std::string_view value, std::string_view expected) const {
  fail("strategy.options.{}: '{}' is not {}", key, value, expected);
}

const char* OptionReader::boolean_rule() { return "a boolean (true/false, yes/no, on/off, 1/0)"; }

std::optional<bool> OptionReader::parse_bool(std::string_view text) {
  for (const char* t : {"true", "yes", "on", "1"}) {
    if (iequals(text, t)) return true;
  }
  for (const char* f : {"false", "no", "off", "0"}) {
    if (iequals(text, f)) return false;
  }
  return std::nullopt;
}

std::optional<std::string> OptionReader::match_choice(std::string_view text, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed) {
    if (iequals(text, a)) return a;
  }
  return std::nullopt;
}

bool OptionReader::get_bool(const std::string& key, bool fallback) const {
  const std::string* v = find(key);
  if (!v) return fallback;
  if (auto b = parse_bool(*v)) return *b;
  fail_value(key, *v, boolean_rule());
}

int OptionReader::get_int(const std::string& key, int fallback, IntRange range, std::string_view hint) const {
  const std::string* v = find(key);
  if (!v) return fallback;
  const auto x = parse_number<long long>(*v);
  if (!x || *x < range.min || *x > range.max) fail_value(key, *v, with_hint(describe(range), hint));
  return static_cast<int>(*x);
}

double OptionReader::get_double(const std::string& key, double fallback, Min min, std::string_view hint) const {
  const std::string* v = find(key);
  if (!v) return fallback;
  const auto x = parse_number<double>(*v);
  const bool ok = x && std::isfinite(*x) && (min.exclusive ? *x > min.value : *x >= min.value);
  if (!ok) {
    const std::string expected = std::isfinite(min.value)
                                     ? fmt::format("a number {} {}", min.exclusive ? ">" : ">=", min.value)
                                     : std::string("a number");
    fail_value(key, *v, with_hint(expected, hint));
  }
  return *x;
}

int64_t OptionReader::get_bucket_bytes(const std::string& key, int64_t fallback_bytes) const {
  constexpr double kMiB = 1024.0 * 1024.0;
  const double mb = get_double(key, static_cast<double>(fallback_bytes) / kMiB, above(0), "bucket size in MiB, e.g. 25");
  // A tiny positive size in MiB can still hold no element at all.
  if (mb * kMiB < 4.0) fail("strategy.options.{}: {} MiB is smaller than one fp32 element", key, get_string(key, ""));
  return static_cast<int64_t>(mb * kMiB);
}

std::string OptionReader::get_choice(const std::string& key, std::string fallback,
                                     const std::vector<std::string>& allowed) const {
  const std::string* v = find(key);
  if (!v) return fallback;
  if (auto c = match_choice(*v, allowed)) return *c;
  fail_value(key, *v, fmt::format("one of {}", fmt::join(allowed, ", ")));
}

std::string OptionReader::get_string(const std::string& key, std::string fallback) const {
  const std::string* v = find(key);
  return v ? *v : fallback;
}

}  // namespace ft
