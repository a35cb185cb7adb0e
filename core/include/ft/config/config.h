// The run configuration: one typed struct per YAML section, loaded from a
// file, overridden from the command line (`--set train.lr=3e-5`) and checked
// before anything expensive starts.
//
// Field names are the YAML keys. Every field's type, default and meaning is
// documented here and in docs/configuration.md (keep both in step). A key the
// YAML does not mention keeps the default written here; note that the
// built-in default *run* (configs/default.yaml, default_config()) sets many
// keys to other values than these struct defaults.
//
// Relative paths in a config are relative to the current working directory,
// not to the config file (the README runs everything from the repo root).
//
// Errors a user can cause throw ft::Error with one line that names the source
// (file name or "--set") and the dotted key.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ft {

/// yaml: `model` — which BERT to fine-tune.
struct ModelConfigRef {
  /// Required. A preset ("tiny" | "mini" | "base", the BENCHMARK.md
  /// workloads), a Hugging Face config.json, or a checkpoint directory
  /// holding config.json.
  std::string config;
  /// Optional initial weights: model.safetensors, pytorch_model.bin or a
  /// checkpoint directory. Empty: random initialisation.
  std::string weights;
  /// Overrides hidden_dropout_prob and attention_probs_dropout_prob of the
  /// model config; in [0, 1). Unset: keep the model config's values.
  std::optional<double> dropout;
  /// Run the encoder on the batch's real tokens only (docs/performance.md):
  /// pad positions cost nothing outside attention. false: compute every
  /// position as the Hugging Face model does (same losses within rounding).
  bool padding_free = true;
  /// Attention kernel: auto, packed, sdpa (LibTorch 2.0+) or eager
  /// (ft/model/token_layout.h, AttentionKernel; docs/performance.md).
  std::string attention = "auto";
  /// transformers' problem_type: single_label_classification,
  /// multi_label_classification or regression. Empty: the checkpoint's
  /// config.json says, else the data does, as transformers infers it (a
  /// list of labels per row: multi-label; numbers with a fraction:
  /// regression; otherwise single-label).
  std::string problem_type;
};

/// data.dev: one dev file, or a mapping name -> file (transformers'
/// eval_dataset as a dict). Every set is evaluated at each evaluation and
/// reported under its name (eval_<name>_<metric>); the first one, or the one
/// train.best_metric names as <name>_<metric>, picks the best checkpoint.
struct DevFiles {
  struct File {
    std::string name;  // "" for the one-file form
    std::string path;
  };
  std::vector<File> files;  // in the order given
  bool empty() const { return files.empty(); }
  /// "data.dev" for the one-file form, else "data.dev.<name>".
  static std::string key(const File& f) { return f.name.empty() ? "data.dev" : "data.dev." + f.name; }
};

/// yaml: `data` — where the examples come from and how they become batches.
struct DataConfig {
  /// Required. Training data: a JSON list, JSON Lines, CSV, TSV or a
  /// pre-tokenized safetensors file (input_ids, attention_mask,
  /// token_type_ids, labels).
  std::string train;
  /// Optional dev file(s), see DevFiles. Empty: dev_fraction of train is split off.
  DevFiles dev;
  /// auto | json | jsonl | csv | tsv | safetensors. auto: by the file
  /// extension (see resolve_data_format).
  std::string format = "auto";
  /// Field (JSON object key or CSV/TSV header) holding the text. For a JSON
  /// list of [text, label] arrays, rows are positional and these are unused.
  std::string text_field = "text";
  /// Optional second text of a sentence pair; empty: single sentences.
  std::string pair_field = "";
  /// Field holding the label (a name from `labels` or an integer id).
  std::string label_field = "label";
  /// Token classification: the word list and the tag list of each JSON
  /// line (HF datasets' names); CoNLL files take the first and last column.
  std::string tokens_field = "tokens";
  std::string tags_field = "ner_tags";
  /// Token classification: every sub-token of a word gets a label (its
  /// later ones I-X for a B-X word), not only the first (run_ner.py's
  /// label_all_tokens).
  bool label_all_tokens = false;
  /// Token classification: iob2 (O, B-X, I-X: entities, scored with
  /// seqeval) or any (every tag a label of its own, POS tags).
  std::string tag_scheme = "iob2";
  /// Sentence embedding: the text columns of a row, in order (anchor,
  /// positive, then any negatives; or sentence1, sentence2). Empty: the
  /// names sentence-transformers uses, as the file has them (anchor,
  /// positive, negative*; else sentence1, sentence2); a scored pair's score
  /// is `score`, else label_field.
  std::vector<std::string> columns;
  /// Multi-label: labels held in one string, cut at this delimiter ("a|b");
  /// setting it makes the run multi-label. Empty: lists in JSON rows.
  std::string label_delimiter;
  /// Regression: labels are divided by this (5 turns a 0-5 score into
  /// 0-1); the model then predicts the scaled score. Must be > 0.
  double label_scale = 1.0;
  /// Label names; their order gives the ids. Empty: inferred from the data
  /// (sorted, so runs agree on ids).
  std::vector<std::string> labels;
  /// Read only the first N rows of the file (as the seeds do); 0 = all.
  int64_t max_rows = 0;
  /// Which max_rows rows: "first" (the file's first N, as the seeds) or
  /// "random" (N drawn with split_seed; for files sorted by label).
  std::string take = "first";
  /// Share of the rows held out for evaluation when `dev` is empty; in
  /// [0, 1). 0 with no dev file: no evaluation.
  double dev_fraction = 0.08;
  /// Seed of the shuffle before the train/dev split (the same on all ranks).
  int64_t split_seed = 123;
  /// Shuffle the rows before splitting (false: the dev rows are the last).
  bool shuffle_before_split = true;
  /// Remove all spaces from the text before tokenising (the Weibo data is
  /// space-segmented Chinese).
  bool strip_spaces = false;
  /// error | skip: what a malformed row or unknown label does.
  std::string bad_rows = "error";
  /// WordPiece vocab.txt. Empty: the model checkpoint directory's vocab.txt;
  /// text data with neither is an error suggesting `ft vocab build`.
  std::string vocab;
  /// auto | true | false. auto: lowercase when the vocab has no uppercase
  /// pieces (bert-base-uncased) — decided by the tokenizer.
  std::string lowercase = "auto";
  /// Tokens per example including [CLS] and [SEP]; longer text is truncated.
  int64_t max_seq_len = 128;
  /// longest (pad each batch to its longest row) | max_length (always pad to
  /// max_seq_len, as the seeds).
  std::string padding = "longest";
  /// fast | slow: how a text pair too long for max_seq_len is cut
  /// (ft::PairTruncation): `fast` as AutoTokenizer and transformers v5,
  /// `slow` as transformers' Python BertTokenizer.
  std::string pair_truncation = "fast";
  /// Hugging Face Trainer's group_by_length: each epoch's shuffled rows are
  /// cut into mega-batches of 50 global batches, each sorted by length
  /// (longest first), so a batch holds rows of similar length; the batches
  /// are then served in shuffled order, except that the one holding the
  /// longest row comes first (an out-of-memory error shows at once).
  bool group_by_length = false;
};

/// train.class_weights: `auto` (n_rows / (n_classes * rows of the class),
/// scikit-learn's "balanced"), a list with one weight per label in label
/// order, or a mapping label name -> weight (unnamed labels weigh 1).
struct ClassWeights {
  bool automatic = false;
  std::vector<double> values;
  std::map<std::string, double> by_name;
  bool empty() const { return !automatic && values.empty() && by_name.empty(); }
};

/// yaml: `train` — the loop, the optimizer and the schedule.
struct TrainConfig {
  /// Passes over the training data (ignored when max_steps > 0).
  int64_t epochs = 1;
  /// Optimizer steps to run; > 0 overrides epochs.
  int64_t max_steps = 0;
  /// Examples per data-parallel rank per micro-batch (global batch =
  /// batch_size * data-parallel ranks * grad_accum; every rank is one under
  /// the data-parallel strategies, a pipeline or tensor-parallel group is
  /// one under pipeline and tensor, docs/model-parallel.md).
  int64_t batch_size = 32;
  /// Examples per rank per evaluation batch; 0 = batch_size. Evaluation
  /// needs no activations for backward, so it can take larger batches.
  int64_t eval_batch_size = 0;
  /// Micro-batches per optimizer step.
  int64_t grad_accum = 1;
  /// adamw | sgd.
  std::string optimizer = "adamw";
  /// Peak learning rate (> 0).
  double lr = 2e-5;
  /// Decoupled weight decay (AdamW) or L2 (SGD).
  double weight_decay = 0.01;
  /// AdamW betas and epsilon.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// SGD momentum.
  double momentum = 0.0;
  /// Also decay biases and LayerNorm weights (false: the BERT convention).
  bool decay_bias_and_norm = false;
  /// linear (warm-up, then linear decay to 0) | cosine (warm-up, then half a
  /// cosine wave down to 0, as HF's get_cosine_schedule_with_warmup) |
  /// constant (warm-up, then flat).
  std::string scheduler = "linear";
  /// linear | log: the warm-up's shape. linear: lr * step / warmup; log:
  /// lr * ln(step + 1) / ln(warmup), DeepSpeed's WarmupLR default.
  std::string warmup_type = "linear";
  /// Warm-up as a share of all steps, in [0, 1]; used when warmup_steps = 0.
  double warmup_ratio = 0.0;
  /// Warm-up steps; > 0 wins over warmup_ratio.
  int64_t warmup_steps = 0;
  /// Clip the global gradient L2 norm to this; 0 = no clipping.
  double max_grad_norm = 1.0;
  /// Seed of initialisation, dropout and the per-epoch shuffle.
  int64_t seed = 42;
  /// Reshuffle the training rows every epoch.
  bool shuffle = true;
  /// Drop the last incomplete global batch.
  bool drop_last = false;
  /// Log a step record every N optimizer steps (>= 1).
  int64_t log_every = 10;
  /// Evaluate every N optimizer steps; 0 = only at the end of each epoch.
  int64_t eval_every = 0;
  /// Checkpoint every N optimizer steps; 0 = only at the end. Needs output_dir.
  int64_t save_every = 0;
  /// Also checkpoint at the end of every epoch but the last (which is the
  /// final checkpoint): HF's save_strategy="epoch". Needs output_dir.
  bool save_each_epoch = false;
  /// Keep at most N step checkpoints (the best one is kept besides); 0 = all.
  int64_t save_total_limit = 2;
  /// Sharding strategies also write each rank's shard into <checkpoint>/sharded/
  /// (no gather; `ft consolidate` turns it into model.safetensors).
  bool save_sharded = false;
  /// The dev metric that picks the best checkpoint and drives early
  /// stopping (yaml also `metric_for_best_model`, HF's name): loss, or one
  /// of the evaluation's metrics (single-label: accuracy, macro_f1,
  /// weighted_f1, mcc, roc_auc, pr_auc; multi-label: micro_f1, macro_f1,
  /// subset_accuracy, roc_auc, pr_auc; regression: mse, mae, pearson,
  /// spearman). With several named dev sets, <name>_<metric> reads it on
  /// that set (best_metric_ref); a plain metric is read on the first.
  std::string best_metric = "accuracy";
  /// Whether a higher best_metric is better; unset: as transformers infers
  /// it (lower for loss, mse and mae, higher otherwise).
  std::optional<bool> greater_is_better;
  /// Stop after this many evaluations in a row without an improvement of
  /// more than early_stopping_threshold (EarlyStoppingCallback's
  /// arguments); 0 = never stop early.
  int64_t early_stopping_patience = 0;
  double early_stopping_threshold = 0.0;
  /// Write the best evaluation's weights (not the last) to <output_dir>/final.
  bool load_best_model_at_end = false;
  /// Single-label cross-entropy: per-class weights (PyTorch's
  /// CrossEntropyLoss weight). Empty: none.
  ClassWeights class_weights;
  /// Single-label: the target mixes (1 - f) of the one-hot label with f
  /// spread evenly over all classes (TrainingArguments' name).
  double label_smoothing_factor = 0.0;
  /// Single-label: focal loss (1 - p_t)^gamma * CE for gamma > 0; 0 = plain
  /// cross-entropy.
  double focal_loss_gamma = 0.0;
  /// Regression loss: mse (transformers' choice) or huber (delta 1).
  std::string regression_loss = "mse";
  /// Multi-label: a class is predicted when its sigmoid reaches this.
  double multi_label_threshold = 0.5;
  /// Checkpoint directory; empty = no checkpoints.
  std::string output_dir;
  /// Checkpoint directory to resume from (weights, optimizer, step, RNG).
  /// "auto": the newest complete checkpoint in output_dir, else a fresh
  /// start (what a relaunched job wants).
  std::string resume_from;
  /// Frozen parameters: HF-name glob patterns (`*`, `?`), e.g.
  /// "bert.embeddings.*". Frozen parameters get no gradient, no optimizer
  /// state and are never communicated as trainable state.
  std::vector<std::string> freeze;
  /// -1 = off; N >= 0 freezes the embeddings and encoder layers 0..N-1.
  int64_t freeze_layers = -1;
  /// Layer-wise LR decay: the head trains at lr, layer L at lr*d, layer L-1
  /// at lr*d^2, ..., the embeddings at lr*d^(L+1). 1 = off.
  double layer_lr_decay = 1.0;
  /// LR of the head (pooler + classifier); 0 = same as lr.
  double head_lr = 0.0;
  /// Recompute each encoder layer's activations in backward instead of
  /// keeping them (less memory, about one more forward of compute).
  bool activation_checkpointing = false;
};

/// yaml: `lora` — low-rank adapters (LoRA) on the encoder's linear layers.
struct LoraConfig {
  /// Adapter rank; 0 = LoRA off.
  int64_t rank = 0;
  /// Scale numerator: the update is (alpha / rank) * B A x.
  double alpha = 16.0;
  /// Dropout on the adapter's input, in [0, 1).
  double dropout = 0.0;
  /// Linear modules to adapt, matched by name suffix as PEFT does
  /// ("query", "value", "attention.output.dense", "dense", ...). Empty: the
  /// family's default, as PEFT's (query and value; DistilBERT q_lin, v_lin;
  /// DeBERTa query_proj, value_proj; ModernBERT Wqkv).
  std::vector<std::string> targets;
  /// Also train the classifier (PEFT's modules_to_save for sequence
  /// classification); everything else but the adapters stays frozen.
  bool train_head = true;
  /// Adapter directory (adapter_model.safetensors) to start from; empty =
  /// fresh adapters (A random, B zero).
  std::string adapter;
};

/// yaml: `adapter` — Houlsby bottleneck adapters (ft/model/adapter.h): after the
/// attention output projection and after the FFN output projection of each
/// chosen layer, h + up(act(down(h))), d -> size -> d. The base model is
/// frozen; the adapters and the head (pooler + classifier) train.
struct AdapterConfig {
  /// Bottleneck width m; 0 = adapters off.
  int64_t size = 0;
  /// Encoder layers that get adapters, by index ("0", "11"); empty = all.
  std::vector<std::string> layers;
  /// gelu | relu: the bottleneck's non-linearity.
  std::string non_linearity = "gelu";
  /// Directory holding bottleneck_adapter.safetensors to start from (a
  /// checkpoint of an adapter run); empty = fresh adapters.
  std::string path;
};

/// yaml: `prompt` — prompt tuning (PEFT's PROMPT_TUNING, ft/model/prompt_learning.h):
/// `length` trained virtual-token embeddings read before every sequence. The
/// base model and its pooler are frozen; the prompt and, with train_head, the
/// classifier train.
struct PromptConfig {
  /// Virtual tokens P (PEFT's num_virtual_tokens); 0 = prompt tuning off.
  int64_t length = 0;
  /// random | vocab | text: normal(0, initializer_range) rows, the word
  /// embeddings of P vocabulary ids drawn with train.seed (PEFT's
  /// SAMPLE_VOCAB), or those of init_text's tokens (PEFT's TEXT).
  std::string init = "random";
  /// The text whose tokens ([CLS] text [SEP], repeated or cut to P) start
  /// the prompt when init is text.
  std::string init_text;
  /// Also train the classifier (PEFT's modules_to_save for sequence
  /// classification).
  bool train_head = true;
  /// Directory holding a PROMPT_TUNING adapter (adapter_config.json +
  /// adapter_model.safetensors: a checkpoint of a prompt run or PEFT's
  /// files) to start from; empty = a fresh prompt.
  std::string path;
};

/// yaml: `prefix` — prefix tuning (PEFT's PREFIX_TUNING, P-tuning v2,
/// ft/model/prompt_learning.h): `length` trained keys and values prepended in
/// every encoder layer's attention. The base model and its pooler are
/// frozen; the prefixes and, with train_head, the classifier train.
struct PrefixConfig {
  /// Prefix length P (PEFT's num_virtual_tokens); 0 = prefix tuning off.
  int64_t length = 0;
  /// PEFT's prefix_projection (an MLP producing the prefixes): not
  /// supported; true is refused.
  bool projection = false;
  /// Also train the classifier (PEFT's modules_to_save).
  bool train_head = true;
  /// Directory holding a PREFIX_TUNING adapter to start from; empty = fresh
  /// prefixes.
  std::string path;
};

/// yaml: `pretrain` — masked-language-model pretraining (`ft pretrain`,
/// ft/tasks/mlm.h). The data section is the one a later fine-tuning run uses:
/// pretraining leaves out that run's dev rows and evaluates the MLM on them.
struct PretrainConfig {
  /// Share of the real tokens chosen for prediction; of those 80 % become
  /// [MASK], 10 % a random token, 10 % stay.
  double mlm_probability = 0.15;
  /// Choose whole words ("##" pieces join the piece before them).
  bool whole_word_masking = false;
  /// Concatenate the texts ([CLS] text [SEP] ...) and cut the stream into
  /// max_seq_len blocks, so no text is truncated and no position is padding.
  bool packing = false;
  /// Rows of data.train to pretrain on, first N; 0 = all (data.max_rows only
  /// picks the rows whose dev split is left out).
  int64_t max_rows = 0;
};

/// yaml: `embedding` — the sentence-embedding task (`task:
/// sentence-embedding`): its loss, named as sentence-transformers names it,
/// and the pooling of a model directory that does not say.
struct EmbeddingConfig {
  /// auto | MultipleNegativesRankingLoss | CachedMultipleNegativesRankingLoss
  /// | CoSENTLoss | CosineSimilarityLoss. auto: CoSENTLoss for scored pairs,
  /// else MultipleNegativesRankingLoss.
  std::string loss = "auto";
  /// Similarity scale (MNRL's and CoSENT's `scale`; 20 in both).
  double scale = 20.0;
  /// MNRL: also rank the anchors for each positive (sentence-transformers'
  /// MultipleNegativesSymmetricRankingLoss), the two losses averaged.
  bool symmetric = false;
  /// Negatives from every data-parallel rank's batch (the embeddings are
  /// all-gathered with their gradient); false: this rank's rows only.
  bool gather_across_devices = true;
  /// CachedMultipleNegativesRankingLoss: rows per forward (GradCache's
  /// mini_batch_size); memory follows this, not the batch.
  int64_t mini_batch_size = 32;
  /// auto | cls | mean | max | mean_sqrt_len_tokens: the pooling of a model
  /// without sentence-transformers files (auto: mean, as
  /// sentence-transformers builds one); a directory that has them keeps its own.
  std::string pooling = "auto";
  /// auto | true | false: a Normalize module (auto: the directory's, else none).
  std::string normalize = "auto";
};

/// The strategy run when the user names none: one process; with several
/// processes (--nproc), DDP, as torchrun and accelerate run it.
inline constexpr const char* kDefaultStrategy = "single";
inline constexpr const char* kDefaultMultiProcessStrategy = "ddp";

/// yaml: `strategy` — how training is distributed (a plugin).
struct StrategyConfig {
  /// Registered strategy name (`ft strategies` lists them).
  std::string name = kDefaultStrategy;
  /// auto | fp32 | bf16 | fp16. auto: the strategy's preference.
  std::string precision = "auto";
  /// fp16 loss scaling (ft::LossScalerOptions). 0: dynamic; > 0: this fixed
  /// scale, never changed.
  double loss_scale = 0;
  /// Dynamic scaling starts here ...
  double loss_scale_init = 65536;
  /// ... doubles after this many steps without overflow ...
  int64_t loss_scale_window = 2000;
  /// ... and halves on an overflow once this many overflows have been
  /// absorbed since the last growth (1: every overflow halves it, as
  /// torch's GradScaler; DeepSpeed's hysteresis) ...
  int64_t loss_scale_hysteresis = 1;
  /// ... never below this (0: no floor).
  double loss_scale_min = 0;
  /// strategy.options.<key>: free-form strings, parsed and validated by the
  /// plugin (which names the key in its errors).
  std::map<std::string, std::string> options;
};

/// yaml: `runtime` — the process environment.
struct RuntimeConfig {
  /// cpu | cuda.
  std::string device = "cpu";
  /// Intra-op threads per rank; 0 = cores / local ranks.
  int64_t threads = 0;
  /// When several ranks share a host, pin each to its own share of the
  /// allowed CPUs (so ranks never trade cores). `--no-pin` turns it off.
  bool pin_threads = true;
  /// Seconds a rendezvous or collective may wait before the job fails (> 0).
  double timeout_s = 30;
  /// Seconds a Ctrl-C or SIGTERM that lands during a checkpoint save waits
  /// for that save to finish before the job stops anyway (> 0).
  double save_grace_s = 120;
  /// JSON Lines metrics file written by rank 0; empty = none.
  std::string metrics_out;
  /// Show a progress bar when stdout is a terminal.
  bool progress = true;
  /// "A:B": record a Chrome/Perfetto trace of optimizer steps A..B
  /// (1-based, inclusive) per rank; empty = off.
  std::string profile_steps;
  /// Where the per-rank traces go (rank<r>.trace.json).
  std::string profile_dir = "profile";
  /// TensorBoard event files (written by rank 0) go here; empty = none.
  std::string tensorboard_dir;
  /// Experiment trackers that get the run's params and metrics
  /// (TrainingArguments' name): mlflow (MLFLOW_TRACKING_URI,
  /// MLFLOW_EXPERIMENT_NAME, as transformers' MLflowCallback reads them);
  /// tensorboard (runtime.tensorboard_dir, else <output_dir>/runs); none.
  std::vector<std::string> report_to;
  /// The run's name in a tracker; empty: the output directory's name.
  std::string run_name;
};

/// One training run, as read from YAML plus overrides.
struct RunConfig {
  ModelConfigRef model;
  DataConfig data;
  TrainConfig train;
  LoraConfig lora;
  AdapterConfig adapter;
  PromptConfig prompt;
  PrefixConfig prefix;
  PretrainConfig pretrain;
  EmbeddingConfig embedding;
  StrategyConfig strategy;
  RuntimeConfig runtime;
  /// Where this came from, for messages ("configs/x.yaml", "configs/x.yaml
  /// + --set"); not part of the YAML.
  std::string source;
  /// The embedded default's data/... inputs that were found nowhere, one
  /// error line each (config/default_data.h); a command that reads its
  /// inputs calls require_default_data() first. Not part of the YAML.
  std::vector<std::string> missing_default_data;
  /// What is trained, as Hugging Face names the task (the YAML's top-level
  /// `task`, `--task`): "text-classification" (sequence classification of
  /// every problem type, the default), "token-classification" (NER, POS),
  /// "sentence-embedding" (sentence-transformers' models and losses) or
  /// "fill-mask" (the masked LM, which `ft pretrain` trains).
  enum class Task { kClassify, kMaskedLm, kTokenClassify, kSentenceEmbedding } task = Task::kClassify;
};

/// A task's Hugging Face name ("text-classification", ...), and back
/// (nullopt for a name ft does not train).
std::string task_name(RunConfig::Task task);
std::optional<RunConfig::Task> parse_task(const std::string& name);

/// Reads `yaml_path`, applies `overrides` ("train.lr=3e-5",
/// "strategy.options.bucket_mb=25", "data.labels=[a,b]") on the YAML tree,
/// converts with type checks, then validate()s. Throws ft::Error naming the
/// file or "--set" and the key: missing file, YAML syntax error (with line),
/// unknown key (with the closest known key), wrong type, bad value.
RunConfig load_config(const std::string& yaml_path, const std::vector<std::string>& overrides);

/// The text of a --config file; a missing file or a directory is an error
/// naming the path.
std::string read_config_file(const std::string& yaml_path);

/// load_config on YAML text; `source_name` stands for the file in messages.
RunConfig config_from_yaml_string(const std::string& yaml, const std::string& source_name,
                                  const std::vector<std::string>& overrides);

/// The built-in default run (configs/default.yaml, embedded at build time):
/// what `ft run` does without --config.
RunConfig default_config();

/// The text of configs/default.yaml as embedded in the library; pass it to
/// config_from_yaml_string to apply overrides on the default run.
const std::string& default_config_yaml();

/// Throws the first of config.missing_default_data, if any.
void require_default_data(const RunConfig& config);

/// The dotted keys ("train.lr") a run-config YAML text sets, in file order:
/// what a run takes from the embedded default when it names its own data.
std::vector<std::string> yaml_keys(const std::string& yaml, const std::string& source_name);

/// The full effective config as YAML, every key present (saved beside
/// checkpoints). config_from_yaml_string(to_yaml(c), ...) gives back c
/// (except `source`), and to_yaml of that is byte-identical.
std::string to_yaml(const RunConfig& config);

/// Range and cross-field checks (batch_size >= 1, grad_accum >= 1, lr > 0,
/// dev_fraction in [0, 1), enum values, required paths, text data needs a
/// vocab, ...). Throws ft::Error "<source>: <key>: <what is wrong>".
void validate(const RunConfig& config);

/// train.best_metric resolved against data.dev: the name of the dev set it
/// is read on ("" for a single set; a plain metric reads the first set) and
/// the metric. "<name>_<metric>" (or "eval_<name>_<metric>") names one of the
/// named sets, as transformers' metric_for_best_model does with an
/// eval_dataset dict.
struct BestMetricRef {
  std::string dev;
  std::string metric;
};
BestMetricRef best_metric_ref(const RunConfig& config);

/// `format` unless it is "auto", else the format implied by `path`'s
/// extension: .json -> json, .jsonl/.ndjson -> jsonl, .csv -> csv,
/// .tsv/.tab -> tsv, .safetensors -> safetensors. Throws ft::Error naming
/// `key` when the extension says nothing.
std::string resolve_data_format(const std::string& format, const std::string& path,
                                const std::string& key = "data.train");

}  // namespace ft
