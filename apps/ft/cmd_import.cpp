// `ft import onnx MODEL.onnx --out DIR [--tokenizer tokenizer.json]`: a BERT
// encoder exported to ONNX, written back as a Hugging Face model directory
// (config.json, model.safetensors, the tokenizer's files) that ft fine-tunes
// from and transformers' AutoModel loads (ft/model/onnx_import.h maps the graph).
#include <cctype>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/io/manifest.h"
#include "ft/model/onnx_import.h"
#include "ft/tasks/run_inputs.h"
#include "ft/io/safetensors.h"

namespace ft::app {
namespace {

namespace fsys = std::filesystem;
using nlohmann::json;

// An export's tokenizer: --tokenizer, else tokenizer.json beside the model
// or one level up (HF repositories keep onnx/model.onnx).
fsys::path find_tokenizer(const fsys::path& model, const std::string& given) {
  if (!given.empty()) {
    if (!fsys::is_regular_file(given)) fail("--tokenizer {}: no such file", given);
    return given;
  }
  for (const fsys::path& dir : {model.parent_path(), model.parent_path().parent_path()}) {
    if (fsys::is_regular_file(dir / "tokenizer.json")) return dir / "tokenizer.json";
  }
  fail("{}: no tokenizer.json beside it; pass --tokenizer FILE (the export's tokenizer.json)", model.string());
}

// tokenizer.json's WordPiece vocabulary as vocab.txt, and the
// tokenizer_config.json transformers' BertTokenizer reads; the [PAD] id is
// config.json's pad_token_id.
struct TokenizerFiles {
  std::string vocab_txt, config_json;
  int64_t pad_id = 0;
};

TokenizerFiles tokenizer_files(const fsys::path& file, int64_t vocab_size, int64_t max_length) {
  const json j = json::parse(fs::read_file(file), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not valid JSON", file.string());
  const json model = j.value("model", json::object());
  if (model.value("type", "") != "WordPiece" || !model.contains("vocab") || !model.at("vocab").is_object()) {
    fail("{}: model.type is '{}', not WordPiece; a BERT export's tokenizer is WordPiece", file.string(),
         model.value("type", ""));
  }
  const json& vocab = model.at("vocab");
  std::vector<std::string> by_id(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    const int64_t i = id.is_number_integer() ? id.get<int64_t>() : -1;
    if (i < 0 || i >= static_cast<int64_t>(by_id.size()) || !by_id[i].empty()) {
      fail("{}: model.vocab gives '{}' the id {}; ids must run 0..{} once each", file.string(), token, id.dump(),
           by_id.size() - 1);
    }
    by_id[i] = token;
  }
  if (static_cast<int64_t>(by_id.size()) > vocab_size) {
    fail("{}: {} WordPiece tokens, but the model's embeddings have {} rows; pass the export's own tokenizer",
         file.string(), by_id.size(), vocab_size);
  }
  TokenizerFiles out;
  for (const auto& t : by_id) out.vocab_txt += t + "\n";
  const json norm = j.value("normalizer", json::object());
  json config = {{"tokenizer_class", "BertTokenizer"},
                 {"do_lower_case", norm.is_object() && norm.value("lowercase", false)},
                 {"model_max_length", max_length}};
  if (norm.is_object() && norm.contains("strip_accents") && !norm.at("strip_accents").is_null())
    config["strip_accents"] = norm.at("strip_accents");
  if (norm.is_object()) config["tokenize_chinese_chars"] = norm.value("handle_chinese_chars", true);
  for (const char* role : {"cls", "sep", "pad", "unk", "mask"}) {
    std::string token = fmt::format("[{}]", role);
    for (auto& ch : token) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (vocab.contains(token)) config[std::string(role) + "_token"] = token;
  }
  if (vocab.contains("[PAD]")) out.pad_id = vocab.at("[PAD]").get<int64_t>();
  out.config_json = config.dump(2) + "\n";
  return out;
}

int import_onnx(const fsys::path& model, const fsys::path& out, const std::string& tokenizer_flag) {
  if (fsys::exists(out)) fail("--out {}: exists already; choose a new directory", out.string());
  const fsys::path tokenizer = find_tokenizer(model, tokenizer_flag);
  OnnxEncoder enc = read_onnx_encoder(model.string());
  const TokenizerFiles tok = tokenizer_files(tokenizer, enc.config.vocab_size, enc.config.max_position_embeddings);
  enc.config.pad_token_id = tok.pad_id;
  // A loadable encoder before anything lands on disk.
  EncoderModel::LoadOptions options;
  options.head_optional = true;
  EncoderModel(enc.config).load_weights(enc.weights, model.string(), options);

  json config = json::parse(enc.config.to_json());
  // A base model: no head, no labels (transformers' BertModel config).
  config["architectures"] = {enc.config.family().class_prefix + "Model"};
  for (const char* key : {"num_labels", "id2label", "label2id", "problem_type", "classifier_dropout"}) config.erase(key);
  fs::AtomicDir target(out);
  fs::write_file_atomic(target.path() / "config.json", config.dump(2) + "\n");
  safetensors::save((target.path() / "model.safetensors").string(), enc.weights, {{"format", "pt"}});
  fs::write_file_atomic(target.path() / "tokenizer.json", fs::read_file(tokenizer));
  fs::write_file_atomic(target.path() / "vocab.txt", tok.vocab_txt);
  fs::write_file_atomic(target.path() / "tokenizer_config.json", tok.config_json);
  if (!load_model_dir_tokenizer(target.path().string())) fail("{}: its tokenizer did not load", tokenizer.string());
  write_manifest(target.path());
  target.commit();
  int64_t params = 0;
  for (const auto& [name, t] : enc.weights) params += t.numel();
  const BertConfig& c = enc.config;
  std::cout << fmt::format("imported {} -> {}: BERT, {} layers, hidden {}, {} heads, intermediate {}, vocabulary {}, "
                           "{} tensors ({} parameters)\n",
                           model.string(), out.string(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                           c.intermediate_size, c.vocab_size, enc.weights.size(), params);
  for (const auto& note : enc.notes) std::cout << "  " << note << "\n";
  return 0;
}

}  // namespace

void add_import_command(CLI::App& app, int& exit_code) {
  struct Flags {
    std::string model, out, tokenizer;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("import", "write a model from another format as a Hugging Face model directory");
  cmd->require_subcommand(1);
  auto* onnx = cmd->add_subcommand("onnx", "a BERT encoder exported to ONNX (AutoModel / feature-extraction)");
  onnx->add_option("model", flags->model, "the .onnx file")->required();
  onnx->add_option("--out", flags->out, "output directory (written atomically; must not exist)")->required();
  onnx->add_option("--tokenizer", flags->tokenizer, "the export's tokenizer.json (default: beside the model)");
  onnx->callback([flags, &exit_code] { exit_code = import_onnx(flags->model, flags->out, flags->tokenizer); });
}

}  // namespace ft::app
