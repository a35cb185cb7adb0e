#include "horovod_options.h"

#include "ft/config/options.h"

namespace ft::horovod {

HorovodOptions HorovodOptions::parse(const std::map<std::string, std::string>& options) {
  const OptionReader r(options, "horovod", {"fusion_mb", "cycle_ms", "compression", "overlap"});
  HorovodOptions out;
  out.fusion_mb =
      r.get_double("fusion_mb", out.fusion_mb, at_least(0), "fusion threshold in MiB, e.g. 64; 0 = no fusion");
  out.cycle_ms = r.get_double("cycle_ms", out.cycle_ms, at_least(0), "cycle time in milliseconds, e.g. 5");
  out.fp16_compression = r.get_choice("compression", "none", {"none", "fp16"}) == "fp16";
  out.overlap = r.get_bool("overlap", out.overlap);
  return out;
}

}  // namespace ft::horovod
