// accelerate's config file (`accelerate config` writes
// ~/.cache/huggingface/accelerate/default_config.yaml) -> ft keys and
// launcher settings (docs/importing-configs.md).
#include <filesystem>
#include <set>

#include "import_builder.h"

namespace ft::config_import {
namespace {

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// fsdp_config; the keys are spelled with or without the fsdp_ prefix
// (TrainingArguments' fsdp_config drops it), so both are accepted.
void import_fsdp_config(Builder& b, const Field& cfg) {
  b.object(cfg);
  for (const auto& [raw, v] : cfg.json.items()) {
    const std::string k = raw.rfind("fsdp_", 0) == 0 ? raw.substr(5) : raw;
    const std::string key = cfg.key + "." + raw;
    const Field f{v, key};
    if (k == "sharding_strategy") {
      // Older accelerate writes FSDP's enum values: 1 = FULL_SHARD, ...
      static const char* by_number[] = {"", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
      std::string mode = v.is_number() ? (b.integer(f) >= 1 && b.integer(f) <= 5 ? by_number[b.integer(f)] : "") : upper(b.text(f));
      // torch spells the enum member _HYBRID_SHARD_ZERO2; accelerate drops the underscore.
      if (mode == "HYBRID_SHARD_ZERO2") mode = "_HYBRID_SHARD_ZERO2";
      if (mode != "FULL_SHARD" && mode != "SHARD_GRAD_OP" && mode != "NO_SHARD" && mode != "HYBRID_SHARD" &&
          mode != "_HYBRID_SHARD_ZERO2") {
        b.error(key, "expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2, got {}", v.dump());
      }
      b.set("strategy.options.sharding_strategy", mode, key);
    } else if (k == "backward_prefetch" || k == "backward_prefetch_policy") {
      const std::string p = upper(b.text(f));
      if (p == "BACKWARD_PRE") b.set("strategy.options.backward_prefetch", "BACKWARD_PRE", key);
      else if (p == "NO_PREFETCH" || p == "NONE") b.set("strategy.options.backward_prefetch", "NONE", key);
      else if (p == "BACKWARD_POST") b.warn(key, "ft prefetches before each unit's backward (BACKWARD_PRE) or not at all; BACKWARD_PRE used");
      else b.error(key, "expected BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH, got {}", v.dump());
    } else if (k == "forward_prefetch") {
      b.set("strategy.options.forward_prefetch", b.boolean(f), key);
    } else if (k == "activation_checkpointing") {
      b.set("train.activation_checkpointing", b.boolean(f), key);
    } else if (k == "state_dict_type") {
      const std::string t = upper(b.text(f));
      if (t == "SHARDED_STATE_DICT" || t == "LOCAL_STATE_DICT") b.set("train.save_sharded", true, key);
      else if (t != "FULL_STATE_DICT") b.error(key, "expected FULL_STATE_DICT or SHARDED_STATE_DICT, got {}", v.dump());
    } else if (k == "offload_params") {
      if (b.boolean(f)) b.warn(key, "ft keeps parameters where training runs (host memory when runtime.device=cpu); ignored");
    } else if (k == "auto_wrap_policy") {
      if (upper(b.text(f)) != "TRANSFORMER_BASED_WRAP") b.warn(key, "ft wraps each encoder layer (plus embeddings and head) as a unit; ignored");
    } else if (k == "transformer_layer_cls_to_wrap") {
      const std::string cls = v.is_array() && v.size() == 1 ? b.text({v[0], key}) : v.is_string() ? b.text(f) : "";
      if (cls != "BertLayer") b.warn(key, "ft wraps each encoder layer (BertLayer) as a unit; ignored");
    } else if (k == "min_num_params") {
      if (b.number(f) != 0) b.warn(key, "ft wraps each encoder layer as a unit, not by size; ignored");
    } else if (k == "sync_module_states" || k == "use_orig_params" || k == "cpu_ram_efficient_loading" ||
               k == "version" || k == "reshard_after_forward" || k == "limit_all_gathers" || k == "xla" ||
               k == "xla_fsdp_grad_ckpt" || k == "xla_fsdp_v2" || k == "activation_cpu_offload") {
      // Bookkeeping or equivalents of what ft always does.
      if (k == "activation_cpu_offload" && b.boolean(f)) b.warn(key, "ft keeps activations on the training device; ignored");
    } else {
      b.warn(key, "not a key ft maps; ignored");
    }
  }
}

namespace {

// accelerate's inline deepspeed_config (or the file it names).
void import_inline_deepspeed(Builder& b, const Field& cfg, ConfigImports& imports) {
  b.object(cfg);
  if (cfg.has("deepspeed_config_file") && !cfg.json.at("deepspeed_config_file").is_null()) {
    const std::string path = b.text(cfg.at("deepspeed_config_file"));
    if (!path.empty() && path != "none") {
      imports.add_deepspeed(path);
      return;
    }
  }
  int64_t stage = 2;  // accelerate config's default
  for (const auto& [k, v] : cfg.json.items()) {
    const std::string key = cfg.key + "." + k;
    const Field f{v, key};
    if (is_auto(v)) continue;
    if (k == "zero_stage") {
      stage = b.integer(f);
      if (stage < 0 || stage > 3) b.error(key, "expected 0, 1, 2 or 3, got {}", stage);
    } else if (k == "gradient_accumulation_steps") {
      b.set("train.grad_accum", b.integer(f), key);
    } else if (k == "gradient_clipping") {
      b.set("train.max_grad_norm", b.number(f), key);
    } else if (k == "offload_optimizer_device" || k == "offload_param_device") {
      const std::string d = b.text(f);
      if (d != "none") b.warn(key, "ft keeps this state where training runs; no " + d + " offload");
    } else if (k == "zero3_save_16bit_model") {
      if (b.boolean(f)) b.warn(key, "ft always saves the full model, in fp32; ignored");
    } else if (k != "zero3_init_flag" && k != "deepspeed_multinode_launcher" && k != "deepspeed_config_file" &&
               k != "offload_optimizer_nvme_path" && k != "offload_param_nvme_path" && k != "deepspeed_hostfile") {
      b.warn(key, "not a key ft maps; ignored");
    }
  }
  static const char* names[] = {"ddp", "zero1", "zero2", "zero3"};
  b.set("strategy.name", names[stage], cfg.key + ".zero_stage");
}

void import_launch(Builder& b, const Field& root, ConfigImports& imports) {
  auto get = [&](const char* name) -> std::optional<int64_t> {
    if (!root.has(name) || root.json.at(name).is_null()) return std::nullopt;
    return b.integer(root.at(name));
  };
  const auto procs = get("num_processes");
  const auto machines = get("num_machines");
  const int64_t n_machines = machines.value_or(1);
  if (n_machines < 1) b.error("num_machines", "must be >= 1, got {}", n_machines);
  if (machines) b.launch().nnodes = static_cast<int>(n_machines);
  if (procs) {
    // accelerate counts processes in the whole job; ft's --nproc is per host.
    if (*procs < 1 || *procs % n_machines != 0) {
      b.error("num_processes", "{} processes do not split evenly over {} machine(s)", *procs, n_machines);
    }
    b.launch().nproc = static_cast<int>(*procs / n_machines);
    imports.set_world_size(static_cast<int>(*procs));
  }
  if (auto r = get("machine_rank")) b.launch().node_rank = static_cast<int>(*r);
  if (auto p = get("main_process_port")) b.launch().master_port = static_cast<int>(*p);
  if (root.has("main_process_ip") && !root.json.at("main_process_ip").is_null()) {
    b.launch().master_addr = b.text(root.at("main_process_ip"));
  }
}

}  // namespace

void import_accelerate_tree(Builder& b, const Json& root_json, ConfigImports& imports) {
  if (!root_json.is_object()) b.error("(top level)", "expected a mapping of accelerate settings");
  const Field root{root_json, ""};
  import_launch(b, root, imports);
  const std::string type = root.has("distributed_type") ? upper(b.text(root.at("distributed_type"))) : "NO";
  if (type == "NO") {
    b.set("strategy.name", "single", "distributed_type");
  } else if (type == "MULTI_CPU" || type == "MULTI_GPU" || type == "MULTI_NPU" || type == "MULTI_XPU" || type == "MULTI_MLU") {
    b.set("strategy.name", "ddp", "distributed_type");
  } else if (type == "FSDP") {
    b.set("strategy.name", "fsdp", "distributed_type");
    if (root.has("fsdp_config")) import_fsdp_config(b, root.at("fsdp_config"));
  } else if (type == "DEEPSPEED") {
    if (root.has("deepspeed_config")) import_inline_deepspeed(b, root.at("deepspeed_config"), imports);
    else b.set("strategy.name", "zero2", "distributed_type");
  } else {
    b.error("distributed_type", "'{}' is not in ft (it maps NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED)", type);
  }
  if (root.has("mixed_precision") && !root_json.at("mixed_precision").is_null()) {
    const std::string mp = b.text(root.at("mixed_precision"));
    if (mp == "no") b.set("strategy.precision", "fp32", "mixed_precision");
    else if (mp == "fp16" || mp == "bf16") b.set("strategy.precision", mp, "mixed_precision");
    else b.error("mixed_precision", "'{}' is not in ft (it has no, fp16, bf16)", mp);
  }
  if (root.has("use_cpu") && b.boolean(root.at("use_cpu"))) b.set("runtime.device", "cpu", "use_cpu");
  if (root.has("compute_environment")) {
    const std::string env = upper(b.text(root.at("compute_environment")));
    if (env != "LOCAL_MACHINE") b.error("compute_environment", "'{}' is not in ft; it launches on the machines it runs on", env);
  }
  if (root.has("gpu_ids") && !root_json.at("gpu_ids").is_null()) {
    const std::string ids = root_json.at("gpu_ids").is_string() ? root_json.at("gpu_ids").get<std::string>() : root_json.at("gpu_ids").dump();
    if (ids != "all") b.warn("gpu_ids", "ft gives local rank r GPU r; choose GPUs with CUDA_VISIBLE_DEVICES=" + ids);
  }
  static const std::set<std::string> handled = {
      "distributed_type", "mixed_precision", "num_processes", "num_machines", "machine_rank", "main_process_ip",
      "main_process_port", "fsdp_config", "deepspeed_config", "use_cpu", "compute_environment", "gpu_ids",
      // accelerate's own bookkeeping, or settings with no counterpart to honour.
      "debug", "downcast_bf16", "main_training_function", "rdzv_backend", "same_network", "tpu_env",
      "tpu_use_cluster", "tpu_use_sudo", "tpu_name", "tpu_zone", "enable_cpu_affinity", "ipex_config",
      "mpirun_config", "commands", "command_file", "dynamo_config", "megatron_lm_config", "fp8_config",
      "parallelism_config"};
  for (const auto& [k, v] : root_json.items()) {
    if (handled.count(k)) continue;
    b.warn(k, "not an accelerate key ft maps; ignored");
  }
  if (root.has("dynamo_config") && root_json.at("dynamo_config").is_object() &&
      root_json.at("dynamo_config").contains("dynamo_backend") &&
      upper(root_json.at("dynamo_config").at("dynamo_backend").get<std::string>()) != "NO") {
    b.warn("dynamo_config.dynamo_backend", "ft runs LibTorch's eager kernels; no torch.compile");
  }
}

}  // namespace ft::config_import
