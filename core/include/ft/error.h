// ft::Error: the one exception type that reaches users.
//
// Its message is a single line that names the culprit (file, key, row, rank)
// and what to do about it. `ft` prints it as "ft: error: <message>" and exits
// non-zero; anything else that escapes is a bug.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace ft {

// Default visibility: plugins are built with hidden symbols, and an exception
// type must have one identity across the .so boundary to be caught by type.
class __attribute__((visibility("default"))) Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// fail("{}: unknown key '{}'", file, key) throws ft::Error with the formatted line.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ft
