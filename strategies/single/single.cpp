// `single`: one process, one device, no communication. The baseline row of
// the timing table and the reference every other strategy must match.
#include "ft/parallel/abilities.h"
#include "ft/comm/comm.h"
#include "ft/base/error.h"
#include "ft/config/options.h"
#include "ft/plugin/plugin.h"
#include "ft/parallel/replicated_strategy.h"

namespace {

class SingleStrategy final : public ft::ReplicatedStrategy, public ft::MemoryModel, public ft::OneProcess {
 public:
  std::string ranks_option() const override { return ""; }
  // Weights, gradients and AdamW's two moments, all fp32.
  std::string memory_formula(const std::map<std::string, std::string>&) const override { return "16Ψ"; }
  int64_t theory_bytes(const ft::TheoryInputs& in) const override { return 16 * in.model.params; }

 protected:
  void on_setup() override {
    // No options: a key set for another strategy is a mistake worth naming.
    const ft::OptionReader no_options(ctx_->options, "single", {});
    // Without gradient sync, N ranks would silently train N different models.
    if (ctx_->comm->world_size() > 1) {
      ft::fail("strategy 'single' runs one process but the job has {} ranks; use --strategy ddp (or another distributed strategy) with --nproc",
               ctx_->comm->world_size());
    }
  }
};

}  // namespace

FT_STRATEGY_PLUGIN("single", "1.0.0",
                   FT_STRATEGY("single", "one process, one device, no communication",
                               [] { return new SingleStrategy(); }))
