// `pipeline`: GPipe / 1F1B pipeline parallelism (pipeline_strategy.h).
#include "ft/plugin/plugin.h"
#include "pipeline_strategy.h"

FT_STRATEGY_PLUGIN("pipeline", "1.0.0",
                   FT_STRATEGY("pipeline", "pipeline parallel: contiguous unit stages, gpipe or 1f1b micro-batch schedule",
                               [] { return new ft::PipelineStrategy(); }))
