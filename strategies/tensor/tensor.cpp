// `tensor`: Megatron-style tensor parallelism (tensor_strategy.h).
#include "ft/plugin/plugin.h"
#include "tensor_strategy.h"

FT_STRATEGY_PLUGIN("tensor", "1.0.0",
                   FT_STRATEGY("tensor", "tensor parallel (Megatron): heads and FFN split across ranks, 2 all-reduces per layer",
                               [] { return new ft::TensorStrategy(); }))
