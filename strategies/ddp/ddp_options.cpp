#include "ddp_options.h"

#include "ft/config/options.h"

namespace ft::ddp {

DdpOptions DdpOptions::parse(const std::map<std::string, std::string>& options) {
  // One parser serves both registered names, so errors name both.
  const OptionReader r(options, "ddp/ddp_amp", {"bucket_mb", "compression", "sparse_embedding"});
  DdpOptions out;
  out.bucket_bytes = r.get_bucket_bytes("bucket_mb", out.bucket_bytes);
  const std::string c = r.get_choice("compression", "none", {"none", "fp16", "bf16"});
  out.compression = c == "fp16" ? Compression::FP16 : c == "bf16" ? Compression::BF16 : Compression::None;
  out.sparse_embedding = r.get_bool("sparse_embedding", out.sparse_embedding);
  return out;
}

}  // namespace ft::ddp
