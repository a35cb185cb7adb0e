// An encoder and a task head (EncoderModel), with Hugging Face parameter
// names, so weights move between ft and the HF stack without renaming. The
// encoder is one family's backbone (core/src/model/backbones/), the head one
// task's (core/src/model/heads/); this is the pair the Trainer, the methods
// and the strategies see.
//
// The network is a sequence of *units*: 0 = embeddings, 1..L = encoder
// layers, L+1 = head (the task's head in the family's HF form: BERT's
// pooler + dropout + classifier, RoBERTa's classifier.dense + out_proj, ...;
// heads/<task>/ builds each).
// Strategies that must act around a unit (ZeRO-3/FSDP gather and free a
// unit's weights, activation checkpointing recomputes a layer) install a
// UnitRunner instead of re-implementing the forward pass.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include "ft/model/activation_checkpoint.h"
#include "ft/model/encoder_family.h"
#include "ft/base/problem_type.h"
#include "ft/model/token_layout.h"
#include "ft/base/types.h"

namespace ft {

// ft's names of the sentence-embedding head's Dense tensors
// (sentence-transformers keeps them as linear.weight and linear.bias in the
// Dense folder; ft/tasks/sentence_transformers.h maps between the two).
inline constexpr char kSentenceDenseWeight[] = "sentence_dense.linear.weight";
inline constexpr char kSentenceDenseBias[] = "sentence_dense.linear.bias";

// Every Linear of the model: a torch Linear whose output can get extra
// terms, which is how LoRA (ft/model/lora.h, a term of the input) and bottleneck
// adapters (ft/model/adapter.h, a term of the output) attach without changing the
// module tree the HF names come from.
class AdaptableLinearImpl : public torch::nn::LinearImpl {
 public:
  AdaptableLinearImpl(int64_t in, int64_t out, bool bias = true)
      : torch::nn::LinearImpl(torch::nn::LinearOptions(in, out).bias(bias)) {}
  at::Tensor forward(const at::Tensor& x);
  std::function<at::Tensor(const at::Tensor&)> adapter;         // y += adapter(x); empty: none
  std::function<at::Tensor(const at::Tensor&)> output_adapter;  // y += output_adapter(y); empty: none
};
TORCH_MODULE(AdaptableLinear);

// Which head sits on the encoder, named after BERT's classes though every
// family has its own HF form (heads/<task>/): <Family>ForSequenceClassification
// (BERT: pooler + classifier; RoBERTa, ELECTRA: classifier.dense + out_proj;
// DistilBERT: pre_classifier + classifier; DeBERTa: context pooler +
// classifier; ModernBERT: head + classifier), <Family>ForMaskedLM (a
// transform and a decoder tied to the word embeddings) or
// <Family>ForTokenClassification (a classifier on every token; ModernBERT's
// head first). config.json's "architectures" says which; the
// command decides what it builds (ft run fine-tunes a classifier of its
// task from any of them, ft pretrain trains the masked-LM head). A
// sentence-transformers directory (modules.json) is the base model with the
// pooling modules on top: kSentenceEmbedding, one vector per row.
enum class BertHead { kSequenceClassification, kMaskedLM, kTokenClassification, kSentenceEmbedding };

// The fields of an HF BertConfig (or RobertaConfig, ...: model_type picks the
// family, ft/model/encoder_family.h) that ft uses; unknown fields are kept verbatim
// (`extra_json`) so a saved config.json loses nothing.
struct BertConfig {
  std::string model_type = "bert";
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t embedding_size = 0;  // ELECTRA's embedding width; 0: hidden_size
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;
  int64_t num_labels = 2;
  double classifier_dropout = -1.0;   // the head's dropout; < 0: hidden_dropout_prob (config.json's null)
  std::vector<std::string> id2label;  // size num_labels
  // config.json's problem_type; unset: transformers' rule (num_labels 1:
  // regression, else single-label), see problem().
  std::optional<ProblemType> problem_type;
  // ft's "text_pair": the classifier was trained on sentence pairs (ft
  // predict then refuses a single text rather than guess).
  bool text_pair = false;
  // A config.json `architectures` entry whose task head ft does not build
  // (XForQuestionAnswering, ...); empty when ft builds the head it names.
  // Fine-tuning takes such a checkpoint's encoder; inference refuses it.
  std::string unbuilt_head;
  BertHead head = BertHead::kSequenceClassification;
  std::string extra_json = "{}";      // other keys of the source config.json

  // The sentence-transformers modules after the encoder (head
  // kSentenceEmbedding), as the directory's modules.json and their configs
  // describe them (ft/tasks/sentence_transformers.h reads and writes those files;
  // config.json holds none of this).
  struct SentenceModules {
    std::string pooling = "mean";  // cls | mean | max | mean_sqrt_len_tokens (1_Pooling/config.json's modes)
    int64_t dense_out = 0;         // a Dense module after the pooling: its out_features; 0: none
    bool dense_bias = true;
    std::string dense_activation = "torch.nn.modules.activation.Tanh";  // as 2_Dense/config.json names it
    bool normalize = false;        // a Normalize module last: unit-length embeddings
    int64_t max_seq_length = 0;    // sentence_bert_config.json's; 0: not given
    bool do_lower_case = false;
  } sentence;

  // DeBERTa-v2/v3 (model_type deberta-v2): the keys of DebertaV2Config that
  // shape its disentangled attention. They stay in extra_json too, so the
  // config.json written back is the one read.
  struct Disentangled {
    bool relative_attention = false;
    int64_t max_relative_positions = -1;  // < 1: max_position_embeddings
    int64_t position_buckets = -1;        // > 0: distances past half of it share log-spaced buckets
    bool c2p = false, p2c = false;        // pos_att_type: content->position, position->content
    bool norm_rel = false;                // norm_rel_ebd "layer_norm": the table is normalised once
    bool position_biased_input = true;    // absolute position embeddings added to the input
    double pooler_dropout = 0.0;          // ContextPooler's, before its dense
    // max_relative_positions, or the buckets: the table has 2 x span rows.
    int64_t max_relative(int64_t max_positions) const {
      return max_relative_positions < 1 ? max_positions : max_relative_positions;
    }
  } deberta;

  // ModernBERT (model_type modernbert): the keys of ModernBertConfig that
  // BertConfig has no field for. They stay in extra_json too.
  struct Modern {
    double embedding_dropout = 0.0;
    bool norm_bias = false, attention_bias = false, mlp_bias = false;
    bool classifier_bias = false;  // head.dense's; the classifier itself always has one
    bool decoder_bias = true;      // the masked LM's decoder.bias
    int64_t local_attention = 128;  // sliding layers see local_attention / 2 tokens each way
    std::vector<bool> global;       // per layer: full attention (layer_types), else the sliding window
    // Empty `global` (a config not read from config.json): every third layer
    // from layer 0, ModernBertConfig's default.
    bool is_global(int64_t layer) const { return global.empty() ? layer % 3 == 0 : global.at(layer); }
    double global_theta = 160000.0, local_theta = 10000.0;  // RoPE bases of the two kinds of layer
    bool mean_pooling = false;      // classifier_pooling "mean": the attended tokens' mean, else column 0
    double cutoff_factor = 2.0;     // initializer_cutoff_factor: init truncates at +-cutoff std
  } modern;

  // Reads an HF config.json; errors name the file and key.
  static BertConfig from_json_file(const std::string& path);
  static BertConfig from_json_string(const std::string& json, const std::string& source);
  // BENCHMARK.md workloads: "tiny", "mini", "base". Unknown name: ft::Error.
  static BertConfig preset(const std::string& name);
  std::string to_json() const;  // HF-loadable config.json text
  const EncoderFamily& family() const { return encoder_family(model_type, "model config"); }
  // Tokens one sequence can hold: max_position_embeddings, less the rows
  // that RoBERTa's positions skip (0..pad_token_id).
  int64_t max_tokens() const;
  // problem_type, or what transformers assumes without one.
  ProblemType problem() const {
    return problem_type.value_or(num_labels == 1 ? ProblemType::kRegression : ProblemType::kSingleLabel);
  }
  int64_t embedding_width() const { return embedding_size > 0 ? embedding_size : hidden_size; }
  // A sentence embedding's size: the Dense module's output, else the hidden size.
  int64_t sentence_dimension() const { return sentence.dense_out > 0 ? sentence.dense_out : hidden_size; }
  double head_dropout() const { return classifier_dropout >= 0.0 ? classifier_dropout : hidden_dropout_prob; }
  // DeBERTa's attention span: relative distances fall in [-span, span).
  int64_t relative_span() const {
    return deberta.position_buckets > 0 ? deberta.position_buckets : deberta.max_relative(max_position_embeddings);
  }
  // Rows of the relative-position table that travel with the activations
  // between units (EncoderModel::carried_rows); 0: none.
  int64_t carried_rows() const { return deberta.relative_attention ? 2 * relative_span() : 0; }
  // Checks the shapes make sense (heads divide hidden, ...); names the key.
  void validate(const std::string& source) const;
};

// What a head declares about itself for a model of config `c` (its form
// for c's family): config.json's architectures entry, the projection whose
// rows are the labels or the vocabulary, and (sequence classification)
// what `ft features` writes. Names a family lacks stay empty.
struct HeadNames {
  std::string architecture;                // "BertForSequenceClassification", "RobertaForMaskedLM"
  std::string output_weight, output_bias;  // "classifier.weight", "cls.predictions.bias", ...
  std::string tied_bias;                   // masked LM: the decoder's own name for output_bias, which files may hold
  std::string features;                    // "bert.pooler (tanh(dense(h_[CLS])))", ...
};
HeadNames head_names(const BertConfig& c, BertHead head);


// Runs unit `index` as fn(input) in `pass` (kPlain unless activation
// checkpointing runs an encoder layer). The default runs it directly.
class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  virtual at::Tensor run(int index, RunPass pass, const at::Tensor& input,
                         const std::function<at::Tensor(const at::Tensor&)>& fn) = 0;
  /// False when unit `index` runs in another process (a pipeline stage):
  /// the model then never wraps it in activation checkpointing, so run()
  /// sees it once, in the forward's own grad mode.
  virtual bool computes(int index) const {
    (void)index;
    return true;
  }
};

// Megatron tensor parallelism (strategies/tensor): the operators of one
// tensor-parallel group of `size` ranks.
struct TensorParallelOps {
  int rank = 0;
  int size = 1;
  std::function<at::Tensor(const at::Tensor&)> enter;   // f: identity forward, gradient summed over the group
  std::function<at::Tensor(const at::Tensor&)> reduce;  // g: summed over the group forward, identity backward
  // Needed only when the group has more ranks than the model has attention
  // heads: then size / num_attention_heads neighbouring ranks share a head,
  // each holding a contiguous part of its dimensions, and this sums their
  // partial attention scores over those ranks (forward, and the partial
  // score gradients backward).
  std::function<at::Tensor(const at::Tensor&)> head_sum;
  // Needed for a vocab-parallel masked-LM decoder: every rank's columns
  // (its slice of the vocabulary) concatenated along the last dimension
  // forward, this rank's columns of the gradient backward.
  std::function<at::Tensor(const at::Tensor&)> gather_columns;
};

// Why a BERT of config `c` cannot be split over `ranks` tensor-parallel
// ranks (heads or FFN units that do not divide), as one line; empty when it can.
std::string tensor_parallel_refusal(const BertConfig& c, int ranks);

// How a tensor is cut over a tensor-parallel group along `dim`: into
// `blocks` equal blocks (ModernBERT's fused Wqkv holds q, k and v; its Wi the
// input and the gate), each cut into `size` parts; rank r holds part r of
// every block, so its slice is again q, k and v of its own heads.
struct TensorCut {
  int dim = 0;
  int blocks = 1;
};
// One Linear of every encoder layer as tensor parallelism cuts it, declared
// by the backbone beside the layer that builds it (name relative to the
// layer, BERT's spelling where the family renames BERT's layer): cut.dim 0
// is column-parallel (output rows, bias with them), 1 row-parallel (input
// columns, the bias added once after the sum).
struct ParallelLinear {
  std::string name;
  int64_t in = 0, out = 0;
  bool bias = true;
  TensorCut cut;
};
std::vector<ParallelLinear> tensor_parallel_linears(const BertConfig& c);

// Rank `rank`'s part of `full` (a view), and the full tensor from every
// rank's part in rank order.
at::Tensor take_part(const at::Tensor& full, const TensorCut& cut, int rank, int size);
at::Tensor join_parts(const std::vector<at::Tensor>& parts, const TensorCut& cut);

// What shard_tensor_parallel did to the parameters, by HF name.
struct TensorParallelSplit {
  std::map<std::string, TensorCut> sliced;  // -> how it was cut (rank r holds part r)
  // Whole on every rank, but each rank's gradient is only its slice's share
  // of the sum: LoRA's A on a column-parallel Linear (B is sliced by rows),
  // and LoRA's B on a row-parallel one (A is sliced by columns). The strategy
  // sums these gradients over the group before the update.
  std::set<std::string> partial_grads;
};

class EncoderModel : public torch::nn::Module {
 public:
  explicit EncoderModel(const BertConfig& config);
  ~EncoderModel() override;

  // Logits [rows, num_labels] (sequence classification), or [M, vocab] at
  // the batch's positions (masked LM: only the masked tokens reach the
  // vocabulary projection, the largest matmul of a small BERT). Attention-
  // masked positions never influence unmasked ones.
  at::Tensor forward(const Batch& batch);
  // The shape forward(batch) returns, without running it (a pipeline stage
  // that does not compute the head): [rows, num_labels], or [masked
  // tokens, vocab].
  std::vector<int64_t> logits_shape(const Batch& batch) const;
  // One vector per row, what `ft features` writes: the output projection's
  // input without dropout (BERT's pooler output tanh(dense(h_[CLS])), each family's
  // form of it) or the sentence embedding; head_names().features names it.
  // Token-classification and masked-LM heads refuse. Plain execution (no
  // unit runner, no checkpointing): for evaluation under NoGradGuard.
  at::Tensor pooled_output(const Batch& batch);
  // transformers' last_hidden_state [rows, seq, hidden] (ModernBERT's after
  // its final norm): every position, pads included, as the HF model
  // computes it. Plain execution, for inference under NoGradGuard.
  at::Tensor last_hidden_state(const Batch& batch);

  // Padding-free execution (ft/model/token_layout.h), on by default: the encoder
  // runs on the batch's real tokens only. Off: every position is computed,
  // as the Hugging Face model does (same losses within float rounding).
  void set_padding_free(bool on) { padding_free_ = on; }
  bool padding_free() const { return padding_free_; }
  // model.attention (ft/model/token_layout.h): which kernel the layers run.
  void set_attention(AttentionKernel kind) { attention_ = kind; }
  AttentionKernel attention() const { return attention_; }

  // Virtual tokens of prompt learning (ft/model/prompt_learning.h), as Hugging
  // Face's BERT computes them under PEFT; both register parameters in the
  // unit they belong to, so ZeRO-3/FSDP shard them with it.
  // Prompt tuning: `prompt` [P, hidden] becomes
  // bert.embeddings.prompt_embeddings, and every sequence is read as P
  // virtual tokens (mask 1, type 0) followed by its own tokens: the virtual
  // tokens take positions 0..P-1, the real ones P.., and the pooler reads
  // virtual token 0.
  void add_prompt_embeddings(const at::Tensor& prompt);
  // Prefix tuning: keys[i], values[i] [P, hidden] become
  // bert.encoder.layer.i.attention.self.prefix_key / prefix_value, keys and
  // values every query of layer i also attends to (split into heads as the
  // layer's own); the real tokens' positions start at P.
  void add_attention_prefix(const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values);
  int64_t prompt_length() const;  // P, or 0
  int64_t prefix_length() const;  // P, or 0

  const BertConfig& config() const { return config_; }

  // Keeps this rank's slice of every encoder layer (Megatron): query, key,
  // value and intermediate.dense by output rows (its heads, its share of
  // the FFN), attention.output.dense and output.dense by input columns, with
  // their biases added once after ops.reduce. The word embeddings are
  // vocab-parallel (rows split, lookups summed by ops.reduce) when the rows
  // divide evenly; a tied MLM decoder then scores each rank's slice of the
  // vocabulary with those rows and its slice of cls.predictions.bias, and
  // ops.gather_columns joins the logits. Position and type embeddings,
  // LayerNorms and the heads' other weights stay whole. Parameter-efficient
  // additions follow the Linear they sit on: LoRA's B rows on a
  // column-parallel Linear and A's columns on a row-parallel one are sliced
  // (the other matrix stays whole, see partial_grads); bottleneck adapters
  // read the summed output and stay whole; prefix keys and values are cut
  // by heads like the layer's own. The heads must divide by ops.size, or
  // ops.size by the heads (with ops.head_sum set and the head dimension
  // divisible by ops.size / heads).
  TensorParallelSplit shard_tensor_parallel(const TensorParallelOps& ops);

  // Unit structure (see file comment).
  int num_units() const;
  // Rows appended to the [T, hidden] token states that pass between units:
  // DeBERTa's normalised relative-position table, which unit 0 computes once
  // and every layer reads and passes on, so that no unit reads another's
  // weights (pipeline stages, ZeRO-3 and FSDP units stay independent, and
  // the table's gradient flows back through the chain). 0 for other families.
  int64_t carried_rows() const { return config_.carried_rows(); }
  std::shared_ptr<torch::nn::Module> unit(int index) const;
  // HF-style prefix of each unit's parameters, e.g. "bert.encoder.layer.3."
  std::string unit_prefix(int index) const;
  // Unit that owns an HF parameter name (for sharding and layer-wise LR).
  int unit_of(const std::string& param_name) const;
  // Other units whose parameters unit `index` also reads: the masked-LM head
  // reads unit 0's word embeddings (the tied decoder). Strategies that free
  // a unit's weights between uses gather these too around the unit.
  std::vector<int> units_read_by(int index) const;
  // Parameters of each unit with HF names, in model order.
  std::vector<TensorList> unit_parameters() const;
  void set_unit_runner(UnitRunner* runner) { runner_ = runner; }
  // Replaces the word-embedding lookup (ids [T] -> rows [T, width]) for a
  // table that is not whole on this rank: ZeRO-2/3's vocabulary-sharded
  // table (ft/parallel/flat_param_group.h) looks rows up across the shard group and
  // returns its gradient rows itself. Empty: the table's own lookup. The
  // table keeps its name and shape; only who reads it changes.
  void set_word_lookup(std::function<at::Tensor(const at::Tensor&)> lookup);
  // Activation checkpointing (ft/model/activation_checkpoint.h): in a forward with
  // grad enabled, encoder layers (units 1..L) keep only their input and run
  // again, through the unit runner, in backward. Evaluation is unaffected.
  void set_activation_checkpointing(bool on) { checkpointing_ = on; }
  bool activation_checkpointing() const { return checkpointing_; }

  // HF initialisation: normal(0, initializer_range) for Linear/Embedding
  // weights, zero biases, LayerNorm (1, 0), padding row zero. Seeded by the
  // caller through torch's generator.
  void init_weights();

  // Copies named tensors into the parameters, as transformers'
  // from_pretrained does. Every parameter must be present with the right
  // shape, except under `head_optional` (initial weights: a BertModel, a
  // masked-LM checkpoint fine-tuned as a classifier, or the reverse): then
  // each head module (bert.pooler.dense, classifier, cls.predictions.*) may be
  // missing as a whole and keeps its fresh HF initialisation, and a
  // classifier of another shape (another num_labels) is replaced, as
  // `ignore_mismatched_sizes=True` does. A BertModel's names (embeddings.*,
  // encoder.*, pooler.*, no "bert." prefix) and DDP's "module." prefix are
  // mapped. Other heads' tensors (cls.*, bert.pooler.*, classifier.*) and
  // position_ids are left out; anything else is an error.
  struct LoadOptions {
    bool head_optional = false;
    // Re-heading onto another label set of the same size: the classifier is
    // new whatever the weights hold.
    bool replace_classifier = false;
  };
  struct LoadReport {
    std::vector<std::string> ignored;      // given, not part of this model
    std::vector<std::string> initialised;  // this model's head, not given
    std::vector<std::string> replaced;     // "classifier.weight: 2x384 given, 3x384 here"
    int64_t loaded = 0;                    // tensors copied
    bool base_model_names = false;         // the weights were a BertModel's (no "bert." prefix)
    std::string family_class, family_prefix;  // "Bert", "bert.": how describe_load names the family
  };
  LoadReport load_weights(const TensorList& weights, const std::string& source, const LoadOptions& options);
  LoadReport load_weights(const TensorList& weights, const std::string& source) {
    return load_weights(weights, source, LoadOptions{});
  }
  // Current weights with HF names (views of the parameters, in model order).
  TensorList weights() const;

 private:
  struct Parts;
  BertConfig config_;
  std::unique_ptr<Parts> parts_;
  UnitRunner* runner_ = nullptr;
  bool checkpointing_ = false;
  std::shared_ptr<const TokenLayout> layout_of(const Batch& batch) const;
  bool padding_free_ = true;
  AttentionKernel attention_ = AttentionKernel::kAuto;
};

// The load report as transformers prints it: one line of what was loaded,
// then one line each for the new, the replaced and the unused tensors.
std::vector<std::string> describe_load(const EncoderModel::LoadReport& report,
                                       const std::string& source);

// Loads weights from model.safetensors, pytorch_model.bin or a checkpoint
// directory holding either.
TensorList read_model_weights(const std::string& path);

}  // namespace ft
