// The file names of PEFT's layout, which LoRA and prompt/prefix tuning
// checkpoints share (one definition: unity batches put both users in one
// translation unit).
#pragma once

namespace ft::peft {

inline constexpr char kWeightsFile[] = "adapter_model.safetensors";
inline constexpr char kConfigFile[] = "adapter_config.json";

}  // namespace ft::peft
