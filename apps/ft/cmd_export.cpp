// `ft export [--merge-lora] CHECKPOINT_DIR OUT_DIR`: a checkpoint to a plain
// HF model directory (config.json, model.safetensors, vocab.txt), without
// training state. A LoRA checkpoint needs --merge-lora, which folds each
// adapter into its base weight (W + alpha/r B A); exporting it without
// folding would silently drop the adapters, so that is an error.
// `ft export --onnx CHECKPOINT_DIR OUT.onnx`: the model as one ONNX graph
// (ft/model/onnx_export.h); a LoRA adapter is always folded in on the way, since a
// graph has no other place for it.
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/model/lora.h"
#include "ft/io/manifest.h"
#include "ft/model/model.h"
#include "ft/model/onnx_export.h"
#include "ft/io/safetensors.h"
#include "ft/tasks/sentence_transformers.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;

// The checkpoint's weights as a plain model's: adapters that cannot be
// folded refused, LoRA folded when `merge`. `note` says what was folded.
TensorList plain_weights(LoadedCheckpoint& c, const fsys::path& dir, bool merge, std::string& note) {
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
  if (c.lora) {
    if (!merge) {
      fail("ft export: {} holds a LoRA adapter (adapter_config.json); pass --merge-lora to fold it into plain HF weights",
           dir.string());
    }
    int64_t adapters = 0;
    for (const auto& [name, t] : c.model) adapters += is_lora_param(name) ? 1 : 0;
    weights = merge_lora(c.model, *c.lora);
    note = fmt::format(", merged {} LoRA adapters (r={}, alpha={})", adapters / 2, c.lora->rank, c.lora->alpha);
  } else {
    if (merge) {
      fail("ft export --merge-lora: {} has no adapter_config.json (not a LoRA checkpoint); drop --merge-lora to copy "
           "its model files",
           dir.string());
    }
    weights = std::move(c.model);
  }
  return weights;
}

int export_checkpoint(const fsys::path& dir, const fsys::path& out, bool merge) {
  if (fsys::exists(out) && fsys::exists(dir) && fsys::equivalent(dir, out)) {
    fail("ft export: OUT_DIR {} is the checkpoint itself; choose another directory", out.string());
  }
  LoadedCheckpoint c = load_checkpoint(dir, /*with_training_state=*/false);
  std::string merged_note;
  const TensorList weights = plain_weights(c, dir, merge, merged_note);
  // Check the result is a loadable EncoderModel before
  // anything lands on disk.
  EncoderModel(c.config).load_weights(weights, "export of " + dir.string());
  if (c.check == CheckpointCheck::kUnverified) note_unverified(dir.string());

  fs::AtomicDir target(out);
  fs::write_file_atomic(target.path() / "config.json", c.config.to_json() + "\n");
  // An embedding model stays a sentence-transformers directory: its pooling,
  // Dense and Normalize modules beside the encoder.
  const bool sentence = c.config.head == BertHead::kSentenceEmbedding;
  safetensors::save((target.path() / "model.safetensors").string(),
                    sentence ? write_sentence_modules(target.path(), c.config, weights) : weights, {{"format", "pt"}});
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

int export_onnx(const fsys::path& dir, const fsys::path& out, const std::string& task, bool fp16) {
  if (out.extension() != ".onnx") fail("ft export --onnx: OUT {} should end in .onnx (one file, not a directory)", out.string());
  if (!task.empty() && task != "feature-extraction") {
    fail("ft export --onnx --task {}: the head comes with the checkpoint; --task takes only feature-extraction (the "
         "encoder's last_hidden_state)",
         task);
  }
  // Before loading: a head ft does not build is the cause, whatever else the files say.
  if (fsys::exists(dir / "config.json")) refuse_unbuilt_head(dir.string(), BertConfig::from_json_file((dir / "config.json").string()));
  LoadedCheckpoint c = load_checkpoint(dir, /*with_training_state=*/false);
  std::string merged_note;
  const TensorList weights = plain_weights(c, dir, /*merge=*/c.lora.has_value(), merged_note);
  OnnxExportOptions options;
  options.hidden_states =
      !task.empty() || (c.config.head == BertHead::kSequenceClassification && is_base_model(dir));
  options.producer_version = FT_VERSION;
  options.fp16 = fp16;
  EncoderModel model(c.config);
  EncoderModel::LoadOptions load;
  load.head_optional = options.hidden_states;
  model.load_weights(weights, dir.string() + "/model.safetensors", load);
  if (c.check == CheckpointCheck::kUnverified) note_unverified(dir.string());
  model.eval();
  const OnnxExportSummary s = write_onnx(model, out, options);
  std::cout << fmt::format("exported {} -> {}: {} nodes, {} initializers, {:.1f} MB{}, opset 17; inputs {}; output {}{}\n",
                           dir.string(), out.string(), s.nodes, s.initializers, static_cast<double>(s.bytes) / 1e6,
                           fp16 ? " (float16)" : "",
                           fmt::join(s.inputs, ", "), s.outputs.at(0), merged_note);
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, int& exit_code) {
  struct Flags {
    std::string dir, out;
    bool merge_lora = false, onnx = false, fp16 = false;
    std::string task;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "export", "write a checkpoint as a plain HF model directory (no training state), or with --onnx as an ONNX graph");
  cmd->add_flag("--merge-lora", flags->merge_lora, "fold the LoRA adapter into the base weights (W + alpha/r B A)");
  cmd->add_flag("--onnx", flags->onnx, "write OUT as one .onnx file (opset 17, dynamic batch and sequence axes)");
  cmd->add_flag("--fp16", flags->fp16, "with --onnx: float16 weights and activations (half the file; for GPU serving)");
  cmd->add_option("--task", flags->task, "with --onnx: feature-extraction exports the encoder's last_hidden_state");
  cmd->add_option("checkpoint", flags->dir, "checkpoint directory")->required();
  cmd->add_option("out", flags->out, "output directory (written atomically), or the .onnx file with --onnx")->required();
  cmd->callback([flags, &exit_code] {
    if (!flags->onnx && (!flags->task.empty() || flags->fp16)) fail("ft export --task / --fp16: only with --onnx");
    if (flags->onnx && flags->merge_lora) fail("ft export --onnx: drop --merge-lora; the ONNX export always folds LoRA in");
    exit_code = flags->onnx ? export_onnx(flags->dir, flags->out, flags->task, flags->fp16)
                            : export_checkpoint(flags->dir, flags->out, flags->merge_lora);
  });
}

}  // namespace ft::app
