#include "ft/checkpoint/checkpoint.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/model/adapter.h"
#include "ft/model/lora.h"
#include "ft/model/prompt_learning.h"
#include "ft/io/safetensors.h"
#include "ft/tasks/sentence_transformers.h"
#include "ft/tokenizer/tokenizer.h"

namespace ft {
namespace fsys = std::filesystem;
using nlohmann::json;

namespace {

std::string state_to_json(const TrainerState& s) {
  json j{{"global_step", s.global_step}, {"epoch", s.epoch},         {"step_in_epoch", s.step_in_epoch},
         {"total_steps", s.total_steps}, {"loss_scaler", s.loss_scaler}, {"best_metric", s.best_metric},
         {"has_best", s.has_best},       {"best_checkpoint", s.best_checkpoint},
         {"best_step", s.best_step},     {"evals_without_improvement", s.evals_without_improvement},
         {"strategy", s.strategy},       {"world_size", s.world_size},
         {"manifest", s.manifest}};
  return j.dump(2);
}

TrainerState state_from_json(const std::string& text, const std::string& source) {
  TrainerState s;
  try {
    json j = json::parse(text);
    s.global_step = j.at("global_step").get<int64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.step_in_epoch = j.at("step_in_epoch").get<int64_t>();
    s.total_steps = j.at("total_steps").get<int64_t>();
    s.loss_scaler = j.at("loss_scaler").get<std::vector<double>>();
    s.best_metric = j.at("best_metric").get<double>();
    s.has_best = j.at("has_best").get<bool>();
    s.best_checkpoint = j.at("best_checkpoint").get<std::string>();
    s.strategy = j.at("strategy").get<std::string>();
    s.world_size = j.at("world_size").get<int>();
    s.manifest = j.value("manifest", false);  // absent before manifests
    s.best_step = j.value("best_step", int64_t{0});  // absent before early stopping
    s.evals_without_improvement = j.value("evals_without_improvement", int64_t{0});
  } catch (const json::exception& e) {
    fail("{}: malformed trainer state ({})", source, e.what());
  }
  return s;
}

}  // namespace

namespace {
const char* const kSpecialTokens[][2] = {
    {"unk_token", "[UNK]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"}, {"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}};
}  // namespace

std::string special_tokens_map_json() {
  json j = json::object();
  for (const auto& [key, token] : kSpecialTokens) j[key] = token;
  return j.dump(2) + "\n";
}

std::string tokenizer_config_json(bool lowercase, int64_t model_max_length, bool split_cjk) {
  json j = json::object();
  j["tokenizer_class"] = "BertTokenizer";
  j["do_lower_case"] = lowercase;
  // ft strips accents exactly when it lower-cases: HF's `null` (follow do_lower_case).
  j["strip_accents"] = nullptr;
  j["tokenize_chinese_chars"] = split_cjk;
  j["model_max_length"] = model_max_length;
  j["clean_up_tokenization_spaces"] = true;
  for (const auto& [key, token] : kSpecialTokens) j[key] = token;
  return j.dump(2) + "\n";
}

namespace {

// A tokenizer.json checkpoint: AutoTokenizer takes the special tokens'
// names from here, and the class to build from tokenizer_class. A
// directory's own class is kept with the keys that class reads (transformers
// 5 rebuilds DeBERTa's normalizer from do_lower_case, RoBERTa's
// post-processor from add_prefix_space and trim_offsets); without one,
// PreTrainedTokenizerFast reads tokenizer.json as it is. model_max_length is
// the run's, the length ft eval and predict cut at: training sets it, and
// where it kept the directory's length the two agree.
std::string fast_tokenizer_config_json(const Tokenizer& tok, int64_t model_max_length) {
  const TokenizerConfigKeys& keys = tok.config_keys();
  json j = json::object();
  j["tokenizer_class"] = keys.tokenizer_class.empty() ? "PreTrainedTokenizerFast" : keys.tokenizer_class;
  j["model_max_length"] = model_max_length;
  auto keep = [&](const char* key, const std::optional<bool>& value) {
    if (value) j[key] = *value;
  };
  keep("add_prefix_space", keys.add_prefix_space);
  keep("trim_offsets", keys.trim_offsets);
  keep("do_lower_case", keys.do_lower_case);
  keep("split_by_punct", keys.split_by_punct);
  const auto& tokens = tok.tokens();
  auto name = [&](const char* key, std::optional<int64_t> id) {
    if (id && *id >= 0 && *id < static_cast<int64_t>(tokens.size())) j[key] = tokens[static_cast<size_t>(*id)];
  };
  name("pad_token", tok.pad_id());
  name("cls_token", tok.cls_id());
  name("bos_token", tok.cls_id());
  name("sep_token", tok.sep_id());
  name("eos_token", tok.sep_id());
  name("unk_token", tok.unk_id());
  name("mask_token", tok.mask_id());
  return j.dump(2) + "\n";
}

}  // namespace

std::optional<int64_t> read_model_max_length(const fsys::path& dir) {
  const fsys::path file = dir / "tokenizer_config.json";
  if (!fsys::exists(file)) return std::nullopt;
  try {
    const json j = json::parse(fs::read_file(file));
    if (!j.contains("model_max_length") || !j["model_max_length"].is_number_integer()) return std::nullopt;
    return j["model_max_length"].get<int64_t>();
  } catch (const json::exception& e) {
    fail("{}: malformed JSON ({})", file.string(), e.what());
  }
}

void save_checkpoint(const fsys::path& dir, const CheckpointData& data) {
  fs::AtomicDir out(dir);
  write_checkpoint_files(out.path(), data);
  write_manifest(out.path());
  out.commit();
}

void write_checkpoint_files(const fsys::path& tmp, const CheckpointData& data) {
  fs::write_file_atomic(tmp / "config.json", data.config.to_json() + "\n");
  TensorList weights;
  if (data.lora) {
    weights = without_lora(data.model);
    // PEFT wraps a sentence-transformers encoder as the bare XModel: its adapter names carry no "bert.".
    const bool bare = data.config.head == BertHead::kSentenceEmbedding;
    save_adapter(tmp, bare ? base_model_names(data.config, data.model) : data.model, *data.lora, data.base_model,
                 data.config.head);
  } else if (data.adapter) {
    weights = without_bottleneck_adapters(data.model);
    save_bottleneck_adapter(tmp, data.model, *data.adapter, data.config.hidden_size);
  } else if (data.prompt_learning) {
    weights = without_prompt_learning(data.model);
    save_prompt_learning(tmp, data.model, *data.prompt_learning, data.config, data.base_model);
  } else {
    weights = data.model;
  }
  // A sentence-transformers directory: the encoder under base-model names, the modules beside it.
  if (data.config.head == BertHead::kSentenceEmbedding) weights = write_sentence_modules(tmp, data.config, weights);
  safetensors::save((tmp / "model.safetensors").string(), weights, {{"format", "pt"}});
  const int64_t max_length = data.model_max_length > 0 ? data.model_max_length : data.config.max_tokens();
  if (const auto* wp = dynamic_cast<const WordPieceTokenizer*>(data.tokenizer)) {
    wp->save((tmp / "vocab.txt").string());
    fs::write_file_atomic(tmp / "tokenizer_config.json",
                          tokenizer_config_json(wp->lowercase(), max_length, wp->options().split_cjk));
    fs::write_file_atomic(tmp / "special_tokens_map.json", special_tokens_map_json());
  } else if (data.tokenizer) {
    fs::write_file_atomic(tmp / "tokenizer.json", data.tokenizer->tokenizer_json());
    fs::write_file_atomic(tmp / "tokenizer_config.json", fast_tokenizer_config_json(*data.tokenizer, max_length));
  }
  if (data.optimizer && data.state) {
    const fsys::path ts = tmp / "training_state";
    fsys::create_directories(ts);
    safetensors::save((ts / "optimizer.safetensors").string(), data.optimizer->tensors,
                      {{"step", std::to_string(data.optimizer->step)}});
    TrainerState state = *data.state;
    state.manifest = true;
    fs::write_file_atomic(ts / "trainer_state.json", state_to_json(state) + "\n");
    TensorList rng;
    for (size_t r = 0; r < data.rng_states.size(); ++r) rng.emplace_back("rank" + std::to_string(r), data.rng_states[r]);
    if (!rng.empty()) safetensors::save((ts / "rng.safetensors").string(), rng);
    if (!data.run_yaml.empty()) fs::write_file_atomic(ts / "run.yaml", data.run_yaml);
  }
}

LoadedCheckpoint load_checkpoint(const fsys::path& dir, bool with_training_state) {
  if (!fsys::is_directory(dir)) fail("checkpoint {}: not a directory", dir.string());
  LoadedCheckpoint c;
  c.check = verify_checkpoint(dir);
  c.config = BertConfig::from_json_file((dir / "config.json").string());
  const fsys::path weights = dir / "model.safetensors";
  if (!fsys::exists(weights)) fail("checkpoint {}: model.safetensors is missing", dir.string());
  c.model = safetensors::load(weights.string());
  if (has_sentence_modules(dir)) {
    read_sentence_modules(dir, c.config);
    for (auto& named : read_sentence_dense(dir, c.config)) c.model.push_back(std::move(named));
  }
  const std::string peft_type = adapter_peft_type(dir);
  if (peft_type == "LORA") {
    c.lora = read_adapter_config(dir);
    c.model = with_adapter(std::move(c.model), read_adapter_weights(dir));
  } else if (peft_type == "PROMPT_TUNING" || peft_type == "PREFIX_TUNING") {
    c.prompt_learning = read_prompt_learning_config(dir);
    c.model = with_adapter(std::move(c.model), read_prompt_learning_weights(dir, c.config));
  } else if (!peft_type.empty()) {
    fail("checkpoint {}: adapter_config.json has peft_type \"{}\"; ft reads LORA, PROMPT_TUNING and PREFIX_TUNING",
         dir.string(), peft_type);
  }
  if (has_bottleneck_adapter(dir)) {
    c.adapter = read_bottleneck_adapter_config(dir);
    c.model = with_adapter(std::move(c.model), read_bottleneck_adapter_weights(dir));
  }
  // A sentence-transformers encoder holds base names; an adapter beside it may carry the
  // prefix (ft wrote LoRA's so before, and writes its bottleneck and prompt files so):
  // one naming, or the loader sees a mix and finds neither.
  if (has_sentence_modules(dir)) c.model = base_model_names(c.config, c.model);
  if (!with_training_state) return c;
  const fsys::path ts = dir / "training_state";
  if (!fsys::exists(ts / "trainer_state.json")) {
    fail("checkpoint {}: no training_state/ (a model-only export); it can initialise a run (model.weights) but not resume one",
         dir.string());
  }
  c.state = state_from_json(fs::read_file(ts / "trainer_state.json"), (ts / "trainer_state.json").string());
  OptimizerState opt;
  const std::string opt_path = (ts / "optimizer.safetensors").string();
  opt.tensors = safetensors::load(opt_path);
  auto meta = safetensors::metadata(opt_path);
  try {
    opt.step = std::stoll(meta.at("step"));
  } catch (const std::exception&) {
    fail("{}: metadata 'step' is missing or not an integer", opt_path);
  }
  c.optimizer = std::move(opt);
  if (fsys::exists(ts / "rng.safetensors")) {
    for (auto& [name, t] : safetensors::load((ts / "rng.safetensors").string())) c.rng_states.push_back(t);
  }
  return c;
}

std::optional<FoundCheckpoint> latest_checkpoint(const fsys::path& output_dir, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fsys::is_directory(output_dir, ec)) return std::nullopt;
  std::vector<FoundCheckpoint> found;
  for (const auto& e : fsys::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    // Hidden names are AtomicDir's unfinished or old directories.
    if (!e.is_directory() || name.empty() || name[0] == '.') continue;
    const fsys::path state_file = e.path() / "training_state" / "trainer_state.json";
    if (!fsys::exists(state_file, ec)) continue;
    try {
      found.push_back({e.path(), state_from_json(fs::read_file(state_file), state_file.string()).global_step});
    } catch (const Error& err) {
      if (skipped) skipped->push_back(err.what());
    }
  }
  // Newest first; at equal steps `final` (written last) before checkpoint-N.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    if (a.global_step != b.global_step) return a.global_step > b.global_step;
    return a.dir.filename() == "final";
  });
  for (const auto& f : found) {
    try {
      verify_checkpoint(f.dir);
      return f;
    } catch (const Error& err) {
      if (skipped) skipped->push_back(err.what());
    }
  }
  return std::nullopt;
}

}  // namespace ft
