// OptionReader: the one reader of `strategy.options.*` (StrategyContext::
// options), so every strategy accepts the same spellings and fails with the
// same one-line errors.
//
//   ft::OptionReader r(ctx.options, "ddp/ddp_amp", {"bucket_mb", "compression"});
//   const double mb = r.get_double("bucket_mb", 25.0, ft::above(0), "bucket size in MiB, e.g. 25");
//   const std::string c = r.get_choice("compression", "none", {"none", "fp16", "bf16"});
//
// Unknown keys are refused by the constructor, not by a later call: a
// strategy cannot forget the check, and a typo is reported before any value
// is looked at. A strategy that forwards options it does not know (`auto`
// hands them to the strategy it picks) passes Unknown::kKeep and takes them
// from unknown().
//
// Errors are ft::Error with one line naming `strategy.options.<key>`:
//   strategy.options.foo: unknown option for ddp (known: bucket_mb, compression)
//   strategy.options.prefetch: 'maybe' is not a boolean (true/false, yes/no, on/off, 1/0)
//   strategy.options.replicas: '0' is not an integer from 1 to 1024 (model replicas, e.g. 2)
//   strategy.options.bucket_mb: '-1' is not a number > 0 (bucket size in MiB, e.g. 25)
//   strategy.options.compression: 'zip' is not one of none, fp16, bf16
//
// Reading a key that was not declared in `known` is a bug in the strategy,
// not a user error: it throws std::logic_error.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

/// Lower bound of a real-valued option: ft::above(0) means > 0,
/// ft::at_least(0) means >= 0.
struct Min {
  double value = -std::numeric_limits<double>::infinity();
  bool exclusive = false;
};
constexpr Min above(double v) { return {v, true}; }
constexpr Min at_least(double v) { return {v, false}; }

/// Inclusive bounds of an integer option; `{1}` means >= 1.
struct IntRange {
  int min = std::numeric_limits<int>::min();
  int max = std::numeric_limits<int>::max();
};

class OptionReader {
 public:
  /// What the constructor does with a key that is not in `known`.
  enum class Unknown {
    kReject,  ///< throw ft::Error naming the key, the strategy and the known keys
    kKeep,    ///< keep it for unknown() (a strategy that forwards options)
  };

  /// `strategy` is the name errors use ("ddp", "zero2", "ddp/ddp_amp");
  /// `known` is listed in this order in the unknown-key error.
  OptionReader(std::map<std::string, std::string> options, std::string strategy, std::vector<std::string> known,
               Unknown unknown = Unknown::kReject);

  /// Whether the run config set `key`.
  bool has(const std::string& key) const;

  /// The one boolean rule (parse_bool); `fallback` when unset.
  bool get_bool(const std::string& key, bool fallback) const;

  /// A whole number (decimal, no sign '+', no spaces) within `range`.
  /// `hint` (e.g. "model replicas, e.g. 2") is added to the error.
  int get_int(const std::string& key, int fallback, IntRange range, std::string_view hint = {}) const;

  /// A finite decimal number above `min`.
  double get_double(const std::string& key, double fallback, Min min, std::string_view hint = {}) const;

  /// A gradient bucket size given in MiB (ddp's and zero's `bucket_mb`),
  /// in bytes: a number > 0 that holds at least one fp32 element.
  int64_t get_bucket_bytes(const std::string& key, int64_t fallback_bytes) const;

  /// One of `allowed`, matched without regard to case; returns the spelling
  /// in `allowed` (the canonical one), or `fallback` when unset.
  std::string get_choice(const std::string& key, std::string fallback, const std::vector<std::string>& allowed) const;

  /// The raw text, or `fallback` when unset. An empty value is kept.
  std::string get_string(const std::string& key, std::string fallback) const;

  /// Keys not in `known` with their values (empty under Unknown::kReject).
  const std::map<std::string, std::string>& unknown() const { return unknown_; }

  /// Throws "strategy.options.<key>: '<value>' is not <expected>" for value
  /// checks a getter cannot express (lists, mixed forms), so they read
  /// like every other option error.
  [[noreturn]] void fail_value(const std::string& key, std::string_view value, std::string_view expected) const;

  /// true/false, yes/no, on/off, 1/0 in any case; nullopt for anything else.
  static std::optional<bool> parse_bool(std::string_view text);

  /// The entry of `allowed` equal to `text` ignoring case, or nullopt.
  static std::optional<std::string> match_choice(std::string_view text, const std::vector<std::string>& allowed);

  /// How errors spell the boolean rule: "a boolean (true/false, yes/no, on/off, 1/0)".
  static const char* boolean_rule();

 private:
  const std::string* find(const std::string& key) const;

  std::map<std::string, std::string> options_;
  std::map<std::string, std::string> unknown_;
  std::string strategy_;
  std::vector<std::string> known_;
};

}  // namespace ft
