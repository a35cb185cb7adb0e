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

// Default visibility and an out-of-line destructor: plugins are built with
// hidden symbols, and an Error thrown in a plugin may be destroyed after the
// plugin is unloaded (the strategy dies during stack unwinding). With the
// destructor defined in ft_core, the vtable and the destructor the runtime
// calls live in ft_core, never in the plugin.
class __attribute__((visibility("default"))) Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  ~Error() override;
};

// fail("{}: unknown key '{}'", file, key) throws ft::Error with the formatted line.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ft
