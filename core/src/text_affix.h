// Prefix and suffix tests on parameter and file names (C++17 has no
// std::string::starts_with): one definition for every unit of core, which
// also keeps them from colliding when units are compiled together (unity).
#pragma once

#include <string>
#include <string_view>

namespace ft {

inline bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace ft
