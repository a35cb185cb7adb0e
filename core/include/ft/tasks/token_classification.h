// Token classification (NER, POS tagging) building blocks, as Hugging Face's
// run_ner.py, seqeval and the "token-classification" pipeline do it:
//
//   words + tags (JSON Lines or CoNLL)  read_tagged_data
//   words -> sub-tokens + word ids      Tokenizer::encode_words (ft/tokenizer/tokenizer.h)
//   word tags -> per-token labels       LabelAligner (-100 where the loss ignores a token)
//   predicted tags -> entity scores     count_entities / entity_report (seqeval's default mode)
//   predicted labels -> entity spans    group_entities (aggregation_strategy="simple")
//
// Everything here is plain data in, plain data out: no tensors, no model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ft/base/problem_type.h"  // kIgnoreLabel
#include "ft/observe/metrics.h"
#include "ft/tokenizer/tokenizer.h"  // WordsEncoding

namespace ft {

// ---- reading word/tag data -------------------------------------------------

/// One sentence: words and one tag id per word (same length).
struct TaggedSentence {
  std::vector<std::string> words;
  std::vector<int64_t> tags;
};

struct TaggedData {
  std::vector<TaggedSentence> rows;
  std::vector<std::string> label_names;  ///< id -> name; size = num_labels
  std::string source;                    ///< the file read
};

/// Auto picks by extension: .jsonl/.ndjson/.json -> JsonLines; .conll,
/// .conllu, .iob, .bio, .txt, .tsv -> Conll; anything else by content
/// (a first non-blank byte '{' -> JsonLines, else Conll).
enum class TaggedFormat { Auto, JsonLines, Conll };

/// Which tag names are accepted.
///  - Iob2: "O", or "B-"/"I-" followed by a non-empty type. Only the form is
///    checked, not the order: an I-X after O or after another type is valid,
///    as in seqeval's default mode (it starts an entity there).
///  - Any: every non-empty name (POS tags such as "NOUN").
enum class TagScheme { Iob2, Any };

struct TaggedSource {
  std::string path;
  TaggedFormat format = TaggedFormat::Auto;
  /// JSON Lines: the word list and the tag list of each object (HF datasets' names).
  std::string words_field = "tokens";
  std::string tags_field = "ner_tags";
  TagScheme scheme = TagScheme::Iob2;
  /// Fixes the label ids (their order). Tags in the file may then be these
  /// names or (JSON Lines) integer ids in [0, size). Empty: inferred.
  std::vector<std::string> label_names;
};

/// Whether `tag` is an IOB2 tag: "O", "B-<type>" or "I-<type>" with a
/// non-empty type.
bool is_iob2_tag(std::string_view tag);

/// Reads a word/tag file.
///
/// JSON Lines: one object per non-blank line with a list of strings
/// (words_field) and a list of tags (tags_field) of the same length; tags are
/// all names (strings) or all integer ids. CoNLL: one token per line, columns
/// separated by spaces or tabs, the word first and the tag last (middle
/// columns, such as CoNLL-2003's POS and chunk tags, are ignored); blank
/// lines end a sentence; lines whose first column is -DOCSTART- are skipped.
///
/// Labels without label_names: integer ids give "0".."max" (no scheme check:
/// there are no names to check); names give their sorted unique set, by plain
/// byte order and with no special place for "O", because transformers'
/// run_ner.py sorts the set it finds the same way: a model trained there on
/// the same file has the same id2label.
///
/// Errors are one ft::Error line naming the file and the 1-based line:
/// word and tag lists of different lengths, an empty word, a tag outside the
/// scheme, a tag not in label_names, a malformed line or object. An
/// unreadable file or one without sentences names the file.
TaggedData read_tagged_data(const TaggedSource& source);

/// read_tagged_data on bytes in memory; `source.path` only names them in
/// messages and `source.format` must be JsonLines or Conll.
TaggedData parse_tagged_data(std::string_view bytes, const TaggedSource& source);

// ---- label alignment -------------------------------------------------------

// kIgnoreLabel (ft/base/problem_type.h): the label id a token without a label gets.

/// Per-token labels from per-word tags, as run_ner.py's tokenize_and_align_labels.
class LabelAligner {
 public:
  /// label_all_tokens: every sub-token of a word is labelled, its later
  /// sub-tokens with the I- label of a B- tag (when the label set has it).
  LabelAligner(const std::vector<std::string>& label_names, bool label_all_tokens);

  /// word_ids: per token, the index of its word, -1 for special tokens and
  /// padding (Tokenizer::encode_words). The first token of a word gets the
  /// word's tag; the others get kIgnoreLabel, or with label_all_tokens the
  /// continuation label; -1 tokens get kIgnoreLabel. A token counts as a
  /// word's first when the token before it belongs to another word (as in
  /// run_ner.py). ft::Error on a word id past `tags` or a tag id outside the
  /// label set.
  std::vector<int64_t> align(const std::vector<int64_t>& word_ids,
                             const std::vector<int64_t>& tags) const;

  /// Per label id, the label its continuation sub-tokens get: "B-X" -> the id
  /// of "I-X" if there is one, every other label itself.
  const std::vector<int64_t>& continuation() const { return continuation_; }

 private:
  std::vector<int64_t> continuation_;
  bool label_all_tokens_ = false;
};

// ---- entity metrics (seqeval, default mode) ---------------------------------

/// An entity found in a tag sequence: tokens [begin, end) of one type.
struct EntitySpan {
  std::string type;
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const EntitySpan& o) const {
    return type == o.type && begin == o.begin && end == o.end;
  }
};

/// The entities of one sentence as seqeval's get_entities finds them in its
/// default (non-strict) mode: the first character of a tag is its prefix
/// and what follows the first '-' its type; an entity starts at B-X, or at
/// I-X after O or after another type, and ends before a tag that is not
/// I-X of the same type. (E- and S- tags follow seqeval's IOBES rules too.)
std::vector<EntitySpan> extract_entities(const std::vector<std::string>& tags);

/// The entity types of a label set (seqeval's type of every name other
/// than "O"), sorted and unique: the rows of EntityCounts.
std::vector<std::string> entity_types(const std::vector<std::string>& label_names);

/// Counts that add up across ranks: an all-reduce (sum) of to_vector()
/// from every rank, read back with from_vector, gives the counts of the
/// whole evaluation; no predictions need to be gathered.
struct EntityCounts {
  std::vector<std::string> types;      ///< sorted; index = row of the vectors below
  std::vector<int64_t> true_entities;  ///< per type: entities in the labels (support)
  std::vector<int64_t> predicted_entities;
  std::vector<int64_t> correct_entities;  ///< same type, begin and end in both
  int64_t tokens = 0;                     ///< tags compared
  int64_t correct_tokens = 0;             ///< tags equal in both

  /// [tokens, correct_tokens, then per type: true, predicted, correct].
  std::vector<int64_t> to_vector() const;
  /// The inverse of to_vector; ft::Error if `v` has the wrong size.
  static EntityCounts from_vector(std::vector<std::string> types, const std::vector<int64_t>& v);
  /// Adds `other`'s counts; ft::Error if its types differ.
  EntityCounts& operator+=(const EntityCounts& other);
};

/// Counts over sentences of tag names (true and predicted, one list per
/// sentence, pairwise of equal length; the tokens whose label is -100
/// already left out, as run_ner.py's compute_metrics does). `types` fixes
/// the rows (entity_types(label_names)); empty: the types found. An entity
/// of a type not in a non-empty `types` is an ft::Error, as are sentences of
/// different lengths.
EntityCounts count_entities(const std::vector<std::vector<std::string>>& truth,
                            const std::vector<std::vector<std::string>>& predicted,
                            const std::vector<std::string>& types = {});

struct EntityScore {
  std::string type;
  double precision = 0.0, recall = 0.0, f1 = 0.0;
  int64_t support = 0;  ///< true entities of this type
};

/// What seqeval (through `evaluate`'s "seqeval" metric, as run_ner.py uses
/// it) reports: micro precision, recall and F1 over all entities, token
/// accuracy, and per type the same with its support. A ratio with a zero
/// denominator is 0 (seqeval's zero_division). per_type lists the types
/// with a true or predicted entity, sorted, as seqeval does.
struct EntityReport {
  double precision = 0.0, recall = 0.0, f1 = 0.0;
  double accuracy = 0.0;
  int64_t true_entities = 0, predicted_entities = 0, correct_entities = 0;
  int64_t tokens = 0;
  std::vector<EntityScore> per_type;
};

EntityReport entity_report(const EntityCounts& counts);

/// The report as the Trainer logs and judges evaluations: task
/// "token-classification", scores precision, recall, f1 (entities) and
/// accuracy (tokens), per entity type P/R/F1/support (row_names the types;
/// macro the mean over them), total the tokens compared.
ClassificationReport entity_task_report(const EntityReport& report, double loss);

// ---- entity grouping for predict --------------------------------------------

/// What the model said about each token of one text.
struct TokenPredictions {
  std::vector<int64_t> labels;             ///< the predicted label id per token (argmax)
  std::vector<std::vector<float>> scores;  ///< per token, the softmax over the labels
  /// Per token, [start, end) in BYTES of the UTF-8 text. The tokenizer does
  /// not produce offsets yet: the caller computes them.
  std::vector<std::pair<int64_t, int64_t>> offsets;
  std::vector<int64_t> word_ids;  ///< -1: a special token or padding, skipped
};

struct PredictedEntity {
  std::string entity_group;  ///< the type: the label without its "B-"/"I-"
  double score = 0.0;        ///< the mean of its tokens' scores of their own label
  std::string word;          ///< text[start, end)
  int64_t start = 0, end = 0;
};

/// Raw text as the words encode_words reads, with their [start, end) byte
/// spans: whitespace separates words, and each punctuation or CJK character
/// is a word of its own (BERT's pre-tokenizer; a WordPiece model therefore
/// tokenizes the words as it does the text). ft::Error on invalid UTF-8.
struct TextWords {
  std::vector<std::string> words;
  std::vector<std::pair<int64_t, int64_t>> spans;
};
TextWords split_text_words(std::string_view text);

/// Per token of `encoding` (encode_words of `words`), its [start, end) byte
/// span in the text: the pieces of a word split its span by their lengths
/// when those add up to the word's (no normaliser changed it; an uncased
/// model's lower-casing of ASCII keeps lengths); otherwise the first piece
/// spans the word and the others are empty at its end. Special tokens: {0, 0}.
std::vector<std::pair<int64_t, int64_t>> token_offsets(const WordsEncoding& encoding, const TextWords& words,
                                                       const std::vector<std::string>& vocabulary);

/// The entities of one text as transformers' TokenClassificationPipeline
/// with aggregation_strategy="simple" groups them: special tokens (word id
/// -1) are dropped; each other token is tagged with its label, and a token
/// joins the group before it when it has the same type and is not a B- tag
/// (a label without B-/I- counts as I-, so O tokens group too); groups of
/// type "O" are dropped. start/end are the first token's start and the last
/// one's end. Two differences from the pipeline: offsets are bytes, not code
/// points, and `word` is the text under the span, where the pipeline
/// rebuilds it from the tokens (lower-cased for an uncased model).
/// ft::Error on vectors of different lengths, a label outside
/// `label_names`, a score row of the wrong size or an offset outside `text`.
std::vector<PredictedEntity> group_entities(std::string_view text, const TokenPredictions& tokens,
                                            const std::vector<std::string>& label_names);

}  // namespace ft
