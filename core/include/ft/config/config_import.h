// Reading the configs users already have: a DeepSpeed ds_config.json, an
// accelerate config (default_config.yaml) and Hugging Face TrainingArguments
// saved as JSON. Each becomes a list of ft keys with values, one layer of the
// run config:
//
//   ft's struct defaults, or the embedded default run when no --config
//     < imported files (--accelerate-config, --training-args, --deepspeed)
//     < the --config YAML file
//     < --set and the dedicated flags (--strategy, --precision, ...)
//
// A key the file leaves out keeps ft's value, except for TrainingArguments:
// that is one object whose every field has a default, so a key it leaves out
// gets Hugging Face's default (learning_rate 5e-5, weight_decay 0, ...), as
// the Trainer would run it. "auto" values are left to the other layers.
//
// A foreign key ft cannot honour gives one warning line naming the key and
// what ft does instead when it only changes speed, memory or bookkeeping;
// when it would change what is trained (another optimizer, a warm-up from a
// non-zero LR, ...) loading fails with one line naming the file and key.
// docs/importing-configs.md lists every key.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ft {

/// One ft key set by an imported file.
struct ImportedValue {
  std::string key;    ///< "train.lr", "strategy.options.sharding_strategy"
  std::string value;  ///< as `--set` would take it
  std::string from;   ///< the foreign key it came from: "optimizer.params.lr"
  std::string source; ///< the file that set it
};

/// Launcher settings an accelerate config carries; command-line flags win.
struct ImportedLaunch {
  std::optional<int> nproc, nnodes, node_rank, master_port;
  std::optional<std::string> master_addr;
};

/// What one file contributed.
struct ImportedConfig {
  std::string source;  ///< the file, as named on the command line
  std::vector<ImportedValue> values;
  std::vector<std::string> warnings;  ///< one line each: "<file>: <key>: ..."
  ImportedLaunch launch;
};

/// Reads the files in the order added. A file may name another (accelerate's
/// deepspeed_config_file, TrainingArguments' deepspeed): that one is read
/// too, as its own layer. Two files that set one ft key to different values
/// are an error naming both (the HF Trainer refuses such mismatches too).
class ConfigImports {
 public:
  /// `world_size`: processes in the job, for DeepSpeed's
  /// train_batch_size = micro batch * accumulation * world check.
  explicit ConfigImports(int world_size = 1) : world_size_(world_size) {}

  void add_deepspeed(const std::string& path);
  void add_accelerate(const std::string& path);
  void add_training_args(const std::string& path);
  /// A layer read elsewhere (a DeepSpeed config inline in TrainingArguments).
  void add_imported(ImportedConfig file) { files_.push_back(std::move(file)); }

  /// The world size used by later files: an accelerate config's
  /// num_processes sets it unless the command line did.
  void set_world_size(int world_size) { world_size_ = world_size; }
  int world_size() const { return world_size_; }

  const std::vector<ImportedConfig>& files() const { return files_; }
  bool empty() const { return files_.empty(); }
  std::vector<std::string> warnings() const;
  /// The launcher settings of all files (later files win).
  ImportedLaunch launch() const;
  /// Every value of every file, checked for conflicts between files.
  std::vector<ImportedValue> values() const;
  /// "a.json + b.yaml", for the config's source name.
  std::string sources() const;

 private:
  int world_size_;
  std::vector<ImportedConfig> files_;
};

struct RunConfig;

/// Every TrainingArguments field a --training-args file may hold (mapped,
/// refused or ignored by ft), for the command line, which refuses by name
/// those that have no `ft run` flag of their own.
std::vector<std::string> training_args_fields();

/// Why ft cannot do what a TrainingArguments field asks ("label smoothing is
/// not in ft"); empty for a field ft maps or may ignore.
std::string training_args_missing_feature(const std::string& field);

/// config_from_yaml_string with the imported files as a layer: below `yaml`
/// when it is the user's --config file, above it when `yaml_is_default` (the
/// embedded default run). Errors name the file and foreign key that set a
/// bad value ("ds.json: optimizer.params.lr: ...").
RunConfig config_from_layers(const std::string& yaml, const std::string& source_name, bool yaml_is_default,
                             const ConfigImports& imports, const std::vector<std::string>& overrides);

/// Where a command's run config comes from: the YAML (or the embedded
/// default), foreign configs imported below it and --set overrides above it.
/// Every command that reads a run config (run, eval, predict, features,
/// vocab, config) fills one from its flags.
struct ConfigSources {
  std::string config_path;             ///< empty: the embedded configs/default.yaml
  std::vector<std::string> overrides;  ///< key=value, in order
  std::string deepspeed, accelerate_config, training_args;  ///< imported files, empty: none
  int world_size = 0;  ///< for DeepSpeed's batch check; 0: $WORLD_SIZE, else 1
};

/// Reads the imported files; their warning lines go to stderr unless `quiet`.
ConfigImports read_imports(const ConfigSources& sources, bool quiet);
/// The run config of `sources`, with `imports` read from them.
RunConfig load_run_config(const ConfigSources& sources, const ConfigImports& imports);
/// The same, reading the imports (quiet on ranks other than 0, so a job
/// warns once).
RunConfig load_run_config(const ConfigSources& sources, bool quiet);

}  // namespace ft
