#include "ddp_options.h"

#include "ft/error.h"
#include "ft/options.h"

namespace ft::ddp {

DdpOptions DdpOptions::parse(const std::map<std::string, std::string>& options) {
  // One parser serves both registered names, so errors name both.
  const OptionReader r(options, "ddp/ddp_amp", {"bucket_mb", "compression", "sparse_embedding"});
  DdpOptions out;
  out.bucket_mb = r.get_double("bucket_mb", out.bucket_mb, above(0), "bucket size in MiB, e.g. 25");
  // Sizes are in MiB, so a tiny positive value can still hold no element at all.
  if (out.bucket_mb * 1024.0 * 1024.0 < 4.0) {
    fail("strategy.options.bucket_mb: {} MiB is smaller than one fp32 element", r.get_string("bucket_mb", ""));
  }
  const std::string c = r.get_choice("compression", "none", {"none", "fp16", "bf16"});
  out.compression = c == "fp16" ? Compression::FP16 : c == "bf16" ? Compression::BF16 : Compression::None;
  out.sparse_embedding = r.get_bool("sparse_embedding", out.sparse_embedding);
  return out;
}

}  // namespace ft::ddp
