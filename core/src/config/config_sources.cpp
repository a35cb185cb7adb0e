// A command's run config from its sources (ft/config/config_import.h):
// the YAML or the embedded default, the imported foreign configs, --set.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "ft/config/config.h"
#include "ft/config/config_import.h"

namespace ft {

ConfigImports read_imports(const ConfigSources& sources, bool quiet) {
  int world = sources.world_size;
  if (world <= 0) {
    const char* w = std::getenv("WORLD_SIZE");
    world = w != nullptr ? std::max(1, std::atoi(w)) : 1;
  }
  ConfigImports imports(world);
  // accelerate first: its num_processes sets the world size the others check against.
  if (!sources.accelerate_config.empty()) {
    imports.add_accelerate(sources.accelerate_config);
    if (sources.world_size > 0) imports.set_world_size(sources.world_size);
  }
  if (!sources.deepspeed.empty()) imports.add_deepspeed(sources.deepspeed);
  if (!sources.training_args.empty()) imports.add_training_args(sources.training_args);
  if (!quiet) {
    for (const auto& w : imports.warnings()) std::fprintf(stderr, "ft: warning: %s\n", w.c_str());
  }
  return imports;
}

RunConfig load_run_config(const ConfigSources& sources, const ConfigImports& imports) {
  if (sources.config_path.empty()) {
    return config_from_layers(default_config_yaml(), "configs/default.yaml (embedded)", true, imports,
                              sources.overrides);
  }
  return config_from_layers(read_config_file(sources.config_path), sources.config_path, false, imports,
                            sources.overrides);
}

RunConfig load_run_config(const ConfigSources& sources, bool quiet) {
  return load_run_config(sources, read_imports(sources, quiet));
}

}  // namespace ft
