// `single`: one process, one device, no communication. The baseline row of
// the timing table and the reference every other strategy must match.
#include "ft/plugin.h"
#include "ft/replicated_strategy.h"

namespace {

class SingleStrategy final : public ft::ReplicatedStrategy {};

}  // namespace

FT_STRATEGY_PLUGIN("single", "1.0.0",
                   FT_STRATEGY("single", "one process, one device, no communication",
                               [] { return new SingleStrategy(); }))
