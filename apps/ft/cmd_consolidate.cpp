// `ft consolidate DIR [--out DIR]`: a sharded checkpoint (DIR/sharded/, as
// written by the zero*/fsdp strategies) to one HF-loadable model.safetensors
// plus the full, strategy-independent optimizer state (DeepSpeed's
// zero_to_fp32, without a Python interpreter).
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ft/checkpoint/consolidate.h"

namespace ft::app {

void add_consolidate_command(CLI::App& app, int& exit_code) {
  struct Flags {
    std::string dir, out;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("consolidate", "turn a sharded checkpoint (DIR/sharded/) into full model + optimizer files");
  cmd->add_option("dir", flags->dir, "checkpoint directory holding sharded/")->required();
  cmd->add_option("--out", flags->out, "output checkpoint directory (default: DIR itself)");
  cmd->callback([flags, &exit_code] {
    const std::filesystem::path out = flags->out.empty() ? flags->dir : flags->out;
    auto c = consolidate_checkpoint(flags->dir, out);
    int64_t params = 0;
    for (const auto& [name, t] : c.model) params += t.numel();
    std::cout << fmt::format("consolidated {} shard(s) saved by {}: {} tensors ({} parameters), optimizer step {} -> {}\n",
                             c.meta.world_size, c.meta.strategy, c.model.size(), params, c.optimizer.step,
                             (out / "model.safetensors").string());
    exit_code = 0;
  });
}

}  // namespace ft::app
