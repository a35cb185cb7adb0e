// `ft export [--merge-lora] CHECKPOINT_DIR OUT_DIR`: a checkpoint to a plain
// HF model directory (config.json, model.safetensors, vocab.txt), without
// training state. A LoRA checkpoint needs --merge-lora, which folds each
// adapter into its base weight (W + alpha/r B A); exporting it without
// folding would silently drop the adapters, so that is an error.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ft/checkpoint.h"
#include "ft/error.h"
#include "ft/fs.h"
#include "ft/lora.h"
#include "ft/manifest.h"
#include "ft/safetensors.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;

int export_checkpoint(const fsys::path& dir, const fsys::path& out, bool merge) {
  if (fsys::exists(out) && fsys::exists(dir) && fsys::equivalent(dir, out)) {
    fail("ft export: OUT_DIR {} is the checkpoint itself; choose another directory", out.string());
  }
  LoadedCheckpoint c = load_checkpoint(dir, /*with_training_state=*/false);
  if (c.adapter) {
    fail("ft export: {} holds bottleneck adapters (bottleneck_adapter_config.json); they cannot be folded into the base "
         "weights (the bottleneck is non-linear), so use the checkpoint itself with ft eval / ft predict",
         dir.string());
  }
  if (c.prompt_learning) {
    fail("ft export: {} holds a {} adapter (adapter_config.json); its virtual tokens are inputs to the attention, not "
         "weights of the base model, so nothing can fold them in; use the checkpoint itself with ft eval / ft predict, "
         "or load it with PEFT (PeftModel.from_pretrained)",
         dir.string(), c.prompt_learning->peft_type());
  }
  TensorList weights;
  std::string merged_note;
  if (c.lora) {
    if (!merge) {
      fail("ft export: {} holds a LoRA adapter (adapter_config.json); pass --merge-lora to fold it into plain HF weights",
           dir.string());
    }
    int64_t adapters = 0;
    for (const auto& [name, t] : c.model) adapters += is_lora_param(name) ? 1 : 0;
    weights = merge_lora(c.model, *c.lora);
    merged_note = fmt::format(", merged {} LoRA adapters (r={}, alpha={})", adapters / 2, c.lora->rank, c.lora->alpha);
  } else {
    if (merge) {
      fail("ft export --merge-lora: {} has no adapter_config.json (not a LoRA checkpoint); drop --merge-lora to copy "
           "its model files",
           dir.string());
    }
    weights = std::move(c.model);
  }
  // Check the result is a loadable EncoderModel before
  // anything lands on disk.
  EncoderModel(c.config).load_weights(weights, "export of " + dir.string());
  if (c.check == CheckpointCheck::kUnverified) note_unverified(dir.string());

  fs::AtomicDir target(out);
  fs::write_file_atomic(target.path() / "config.json", c.config.to_json() + "\n");
  safetensors::save((target.path() / "model.safetensors").string(), weights, {{"format", "pt"}});
  for (const char* file : {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    if (fsys::exists(dir / file)) fs::write_file_atomic(target.path() / file, fs::read_file(dir / file));
  }
  write_manifest(target.path());
  target.commit();
  int64_t params = 0;
  for (const auto& [name, t] : weights) params += t.numel();
  std::cout << fmt::format("exported {} -> {}: {} tensors ({} parameters){}\n", dir.string(), out.string(),
                           weights.size(), params, merged_note);
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, int& exit_code) {
  struct Flags {
    std::string dir, out;
    bool merge_lora = false;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("export", "write a checkpoint as a plain HF model directory (no training state)");
  cmd->add_flag("--merge-lora", flags->merge_lora, "fold the LoRA adapter into the base weights (W + alpha/r B A)");
  cmd->add_option("checkpoint", flags->dir, "checkpoint directory")->required();
  cmd->add_option("out", flags->out, "output directory (written atomically)")->required();
  cmd->callback([flags, &exit_code] { exit_code = export_checkpoint(flags->dir, flags->out, flags->merge_lora); });
}

}  // namespace ft::app
