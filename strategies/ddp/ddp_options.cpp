#include "ddp_options.h"

#include "ft/error.h"

#include <cmath>
#include <cstdlib>

namespace ft::ddp {

namespace {

double parse_positive_mb(const std::string& text) {
  const std::string key = "strategy.options.bucket_mb";
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v <= 0) {
    fail("{}: '{}' is not a number > 0 (bucket size in MiB, e.g. 25)", key, text);
  }
  if (v * 1024.0 * 1024.0 < 4.0) fail("{}: {} MiB is smaller than one fp32 element", key, text);
  return v;
}

Compression parse_compression(const std::string& text) {
  if (text == "none") return Compression::None;
  if (text == "fp16") return Compression::FP16;
  if (text == "bf16") return Compression::BF16;
  fail("strategy.options.compression: '{}' is not one of none, fp16, bf16", text);
}

}  // namespace

DdpOptions DdpOptions::parse(const std::map<std::string, std::string>& options) {
  DdpOptions out;
  for (const auto& [key, value] : options) {
    if (key == "bucket_mb") {
      out.bucket_mb = parse_positive_mb(value);
    } else if (key == "compression") {
      out.compression = parse_compression(value);
    } else {
      fail("strategy.options.{}: unknown option for ddp/ddp_amp (known: bucket_mb, compression)", key);
    }
  }
  return out;
}

}  // namespace ft::ddp
