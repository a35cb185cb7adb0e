// The files PEFT saves an adapter in, whichever its method (LoRA, prompt or
// prefix tuning): the names both writers and readers here agree on.
#pragma once

namespace ft {

inline constexpr char kPeftWeightsFile[] = "adapter_model.safetensors";
inline constexpr char kPeftConfigFile[] = "adapter_config.json";

}  // namespace ft
