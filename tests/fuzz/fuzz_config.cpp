// Fuzz target: the config reader (ft/config/config.h config_from_yaml_string) on
// arbitrary YAML plus --set overrides.
//
// Input parts split on 0xFF: YAML text, then up to 7 override strings. An
// accepted config must round-trip: to_yaml -> config_from_yaml_string ->
// to_yaml gives the same text (the contract of to_yaml).
#include <string>
#include <vector>

#include "ft/config/config.h"
#include "ft/base/error.h"
#include "fuzz_util.h"

namespace {

int one_input(const uint8_t* data, size_t size) {
  const auto parts = ft_fuzz::split_parts(ft_fuzz::as_view(data, size), 8);
  const std::string yaml(parts[0]);
  std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  ft::RunConfig config;
  try {
    config = ft::config_from_yaml_string(yaml, "fuzz.yaml", overrides);
  } catch (const ft::Error& e) {
    ft_fuzz::rejected(e);
    return 0;
  }
  const std::string written = ft::to_yaml(config);
  ft::RunConfig again;
  try {
    again = ft::config_from_yaml_string(written, "written.yaml", {});
  } catch (const ft::Error& e) {
    ft_fuzz::bug(std::string("to_yaml output does not load back: ") + e.what() + "\n" + written);
  }
  const std::string rewritten = ft::to_yaml(again);
  if (rewritten != written)
    ft_fuzz::bug("to_yaml does not round-trip:\n" + written + "---\n" + rewritten);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ft_fuzz::run_input(ft_fuzz::kDefaultStack, [&] { one_input(data, size); });
  return 0;
}
