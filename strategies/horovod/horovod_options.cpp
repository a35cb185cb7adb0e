#include "ft/error.h"

#include "horovod_options.h"

#include <cmath>
#include <cstdlib>

namespace ft::horovod {
namespace {

double parse_non_negative(const std::string& key, const std::string& text, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0) {
    fail("strategy.options.{}: '{}' is not a number >= 0 ({})", key, text, what);
  }
  return v;
}

}  // namespace

HorovodOptions HorovodOptions::parse(const std::map<std::string, std::string>& options) {
  HorovodOptions out;
  for (const auto& [key, value] : options) {
    if (key == "fusion_mb") {
      out.fusion_mb = parse_non_negative(key, value, "fusion threshold in MiB, e.g. 64; 0 = no fusion");
    } else if (key == "cycle_ms") {
      out.cycle_ms = parse_non_negative(key, value, "cycle time in milliseconds, e.g. 5");
    } else if (key == "compression") {
      if (value != "none" && value != "fp16") {
        fail("strategy.options.compression: '{}' is not one of none, fp16", value);
      }
      out.fp16_compression = value == "fp16";
    } else if (key == "overlap") {
      if (value != "true" && value != "false") fail("strategy.options.overlap: '{}' is not true or false", value);
      out.overlap = value == "true";
    } else {
      fail("strategy.options.{}: unknown option for horovod (known: fusion_mb, cycle_ms, compression, overlap)", key);
    }
  }
  return out;
}

}  // namespace ft::horovod
