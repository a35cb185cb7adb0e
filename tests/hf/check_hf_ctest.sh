#!/usr/bin/env bash
# ctest entry: fine-tunes the pretrained all-MiniLM-L6-v2, and the tiny RoBERTa, ELECTRA, DistilBERT,
# XLM-R, DeBERTa-v3 and ModernBERT of tests/data/hf/families, on IMDB with ft for a few steps, fully
# and with LoRA, the MiniLM as a multi-label and a regression model, the MiniLM as a token classifier
# on data/ner-4types (CoNLL-2003, scripts/fetch-ner.sh), and the MiniLM as a sentence-embedding model
# on data/imdb-pairs (MNRL), then cross-checks each checkpoint against
# Hugging Face transformers/PEFT/sentence-transformers (scripts/check-hf.sh: probabilities, logits,
# tokenizer ids, the LoRA adapter through PeftModel, entities with their offsets and scores,
# SentenceTransformer(dir).encode against ft predict's embeddings).
#
#   tests/hf/check_hf_ctest.sh BUILD_DIR REPO
#   CHECK_HF_ONLY="minilm-sentence-embedding ..." tests/hf/check_hf_ctest.sh BUILD_DIR REPO   only those checks:
#     minilm roberta xlm-roberta electra distilbert deberta-v2 modernbert minilm-multi
#     minilm-regression minilm-token-classification minilm-sentence-embedding
#
# Exit 77 (ctest: skipped) with one SKIPPED line when the Python env
# (scripts/hf-env.sh), the MiniLM or the IMDB data (scripts/fetch-data.sh) is
# missing. Without data/ner-4types the token-classification check is left out,
# without data/imdb-pairs (scripts/fetch-pairs.sh) or sentence-transformers in
# .venv-hf the sentence-embedding check, each with a SKIPPED line, and the test
# then exits 77 if every other check passed.
# Every key is explicit, so the built-in default run does not matter.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: tests/hf/check_hf_ctest.sh BUILD_DIR REPO" >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
repo="$(cd "$2" && pwd)"
ft="$build/bin/ft"

if [[ ! -x "$repo/.venv-hf/bin/python" ]]; then
  echo "SKIPPED: needs .venv-hf (scripts/hf-env.sh)"
  exit 77
fi
for need in data/all-minilm-l6-v2/model.safetensors data/imdb/train.jsonl; do
  if [[ ! -f "$repo/$need" ]]; then
    echo "SKIPPED: needs $need (scripts/fetch-data.sh)"
    exit 77
  fi
done
if [[ ! -x "$ft" ]]; then
  echo "SKIPPED: no ft binary at $ft"
  exit 77
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ft-check-hf.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cd "$repo"  # the data paths below are relative to the repository root

# 400 IMDB reviews drawn at random (the file is sorted by label), no dev split,
# 10 steps of 8 rows cut to 64 tokens: short, but enough to move the classifier
# and the adapters. The checkpoints' model_max_length is then 64, so predict on
# full-length reviews also checks that ft and transformers truncate alike.
common=(
  --set data.train=data/imdb/train.jsonl
  --set data.dev=
  --set data.format=jsonl
  --set data.text_field=text
  --set data.pair_field=
  --set data.label_field=label
  --set 'data.labels=[neg, pos]'
  --set data.max_rows=400
  --set data.take=random
  --set data.dev_fraction=0
  --set data.max_seq_len=64
  --set data.padding=longest
  --set train.epochs=1
  --set train.max_steps=10
  --set train.batch_size=8
  --set train.grad_accum=1
  --set train.warmup_ratio=0
  --set train.warmup_steps=2
  --set train.resume_from=
  --set strategy.name=single
  --set strategy.precision=fp32
  --set runtime.device=cpu
)

# wanted NAME: whether CHECK_HF_ONLY (default: every check) names this check.
wanted() { [[ -z "${CHECK_HF_ONLY:-}" || " $CHECK_HF_ONLY " == *" $1 "* ]]; }
skipped=()  # the checks left out for want of data or packages

# One model: full fine-tuning and LoRA from MODEL_DIR, both checked.
#   check_model NAME MODEL_DIR [extra ft flags...]
rc=0
check_model() {
  local name="$1" model="$2"
  shift 2
  wanted "$name" || return 0
  local out="$tmp/$name"
  echo "check_hf_ctest: $name: ft run (full fine-tuning) -> $out/full"
  "$ft" run "${common[@]}" --set model.config="$model" --set model.weights="$model" "$@" --set train.lr=5e-5 \
    --set train.output_dir="$out/full" >"$out.full.log" 2>&1 \
    || { tail -n 30 "$out.full.log"; echo "check_hf_ctest: $name: ft run (full) failed"; exit 1; }
  echo "check_hf_ctest: $name: ft run (LoRA r=8) -> $out/lora"
  "$ft" run "${common[@]}" --set model.config="$model" --set model.weights="$model" "$@" --set train.lr=1e-3 \
    --set lora.rank=8 --set lora.alpha=16 --set "lora.targets=${lora_targets:-[query, value]}" --set lora.train_head=true \
    --set train.output_dir="$out/lora" >"$out.lora.log" 2>&1 \
    || { tail -n 30 "$out.lora.log"; echo "check_hf_ctest: $name: ft run (LoRA) failed"; exit 1; }
  for d in "$out/full/final" "$out/lora/final"; do
    [[ -f "$d/config.json" ]] || { ls -R "$tmp" | head -40; echo "check_hf_ctest: no checkpoint at $d"; exit 1; }
  done
  FT="$ft" "$repo/scripts/check-hf.sh" "$out/full/final" "$out/lora/final" || rc=1
}

check_model minilm data/all-minilm-l6-v2 --set data.vocab=data/all-minilm-l6-v2/vocab.txt
# Prompt tuning (8 virtual tokens, the classifier trained beside them): PEFT's PROMPT_TUNING
# adapter, read by PeftModel over the checkpoint's own weights. Not prefix tuning: PEFT runs it
# through past_key_values, which transformers 5's BERT no longer takes ("Model does not support
# past key values which are required for prefix tuning").
if wanted minilm-prompt && [[ -d "$tmp/minilm/full/final" ]]; then
  out="$tmp/minilm-prompt"
  echo "check_hf_ctest: minilm-prompt: ft run (prompt tuning, 8 virtual tokens) -> $out"
  "$ft" run "${common[@]}" --set model.config=data/all-minilm-l6-v2 --set model.weights=data/all-minilm-l6-v2 \
    --set data.vocab=data/all-minilm-l6-v2/vocab.txt --set train.lr=1e-2 --set prompt.length=8 \
    --set train.output_dir="$out" >"$out.log" 2>&1 \
    || { tail -n 30 "$out.log"; echo "check_hf_ctest: minilm-prompt: ft run failed"; exit 1; }
  # The full checkpoint first: transformers reads it directly, the prompt one only through PeftModel.
  FT="$ft" "$repo/scripts/check-hf.sh" "$tmp/minilm/full/final" "$out/final" || rc=1
elif wanted minilm-prompt; then
  echo "check_hf_ctest: minilm-prompt: needs the minilm check's full checkpoint: CHECK_HF_ONLY=\"minilm minilm-prompt\""
  rc=1
fi
# The other families: the tiny transformers-built models of tests/data/hf/families
# with the tokenizer.json each was tokenized with (tests/data/hf/tokenizers).
for fam in roberta:roberta-bpe xlm-roberta:xlmr-unigram electra:wordend-bpe distilbert:wordend-bpe \
  deberta-v2:deberta-unigram modernbert:modern-bpe; do
  name="${fam%%:*}"
  wanted "$name" || continue
  mkdir -p "$tmp/$name-base"
  cp "$repo/tests/data/hf/families/$name/config.json" "$repo/tests/data/hf/families/$name/model.safetensors" \
    "$tmp/$name-base/"
  cp "$repo/tests/data/hf/tokenizers/${fam##*:}.tokenizer.json" "$tmp/$name-base/tokenizer.json"
  # PEFT's names for DistilBERT's attention projections are its own.
  lora_targets="[query, value]"
  [[ "$name" == distilbert ]] && lora_targets="[q_lin, v_lin]"
  [[ "$name" == deberta-v2 ]] && lora_targets="[query_proj, value_proj]"
  [[ "$name" == modernbert ]] && lora_targets="[Wqkv]"  # q, k and v in one Linear
  check_model "$name" "$tmp/$name-base" --set data.vocab=
done

# Multi-label and regression: the MiniLM fine-tuned by ft on IMDB reviews with
# labels derived by scripts/hf-task-fixtures.py's rules (no registry package
# ships such data here), then checked as above: transformers' pipeline gives
# the same sigmoids and labels, or the same score.
"$repo/.venv-hf/bin/python" - "$repo/data/imdb/train.jsonl" "$tmp" <<'PY'
import json, re, sys
acting = re.compile(r"\b(act|acting|actor|actors|actress)\b", re.IGNORECASE)
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
picked = rows[20000:20200] + rows[45000:45200]  # 200 of each label, away from the fixtures' rows
with open(f"{sys.argv[2]}/multi.jsonl", "w") as m, open(f"{sys.argv[2]}/regression.jsonl", "w") as r:
    for row in picked:
        t, y = row["text"], int(row["label"])
        labels = [n for n, on in (("positive", y == 1), ("long", len(t) > 1000), ("acting", acting.search(t))) if on]
        m.write(json.dumps({"text": t, "label": labels}) + "\n")
        r.write(json.dumps({"text": t, "label": y + min(len(t) / 4000, 0.75)}) + "\n")
PY
for problem in multi regression; do
  wanted "minilm-$problem" || continue
  out="$tmp/minilm-$problem"
  echo "check_hf_ctest: minilm-$problem: ft run -> $out"
  "$ft" run "${common[@]}" --set data.train="$tmp/$problem.jsonl" --set 'data.labels=[]' --set data.take=first \
    --set data.max_rows=0 --set train.best_metric=loss --set model.config=data/all-minilm-l6-v2 \
    --set model.weights=data/all-minilm-l6-v2 --set data.vocab=data/all-minilm-l6-v2/vocab.txt --set train.lr=5e-5 \
    --set train.output_dir="$out" >"$out.log" 2>&1 \
    || { tail -n 30 "$out.log"; echo "check_hf_ctest: minilm-$problem: ft run failed"; exit 1; }
  FT="$ft" "$repo/scripts/check-hf.sh" "$out/final" || rc=1
done

# Token classification: the MiniLM fine-tuned by ft on 1 000 sentences of the
# CoNLL-2003 NER data with its four types (scripts/fetch-ner.sh: more entity
# groups to aggregate than data/ner's PER), one epoch of batches of 16 at lr
# 1e-4 (with transformers' Trainer that makes a model that finds ~80 PER and
# LOC entities in check_hf's 18 texts; at 5e-5 ~16), then checked against
# transformers' pipeline("token-classification", aggregation_strategy="simple"):
# the same entities, offsets and scores.
if ! wanted minilm-token-classification; then
  :
elif [[ ! -f data/ner-4types/train.jsonl || ! -f data/ner-4types/dev.jsonl ]]; then
  echo "check_hf_ctest: minilm-token-classification: SKIPPED: needs data/ner-4types/{train,dev}.jsonl (scripts/fetch-ner.sh)"
  skipped+=("the token-classification check (no data/ner-4types: scripts/fetch-ner.sh)")
else
  out="$tmp/minilm-token-classification"
  echo "check_hf_ctest: minilm-token-classification: ft run -> $out"
  "$ft" run "${common[@]}" --task token-classification --set data.train=data/ner-4types/train.jsonl \
    --set data.dev=data/ner-4types/dev.jsonl --set data.tokens_field=tokens --set data.tags_field=ner_tags \
    --set 'data.labels=[]' --set data.take=first --set data.max_rows=1000 --set data.max_seq_len=128 \
    --set train.max_steps=0 --set train.batch_size=16 --set train.warmup_steps=0 --set train.warmup_ratio=0.1 \
    --set train.best_metric=loss --set model.config=data/all-minilm-l6-v2 --set model.weights=data/all-minilm-l6-v2 \
    --set data.vocab=data/all-minilm-l6-v2/vocab.txt --set train.lr=1e-4 \
    --set train.output_dir="$out" >"$out.log" 2>&1 \
    || { tail -n 30 "$out.log"; echo "check_hf_ctest: minilm-token-classification: ft run failed"; exit 1; }
  FT="$ft" "$repo/scripts/check-hf.sh" "$out/final" || rc=1
fi

# Sentence embeddings: the MiniLM (the sentence-transformers directory it is:
# Transformer, mean Pooling, Normalize) fine-tuned by ft with
# MultipleNegativesRankingLoss for the common 10 steps of 8 (anchor, positive)
# pairs drawn at random from data/imdb-pairs/train.jsonl (64 tokens; the saved
# max_seq_length stays the model's 256), then loaded with
# SentenceTransformer(dir): encode gives ft predict's embeddings on halves of
# test-split reviews and texts of every length, one past max_seq_length.
if ! wanted minilm-sentence-embedding; then
  :
elif [[ ! -f data/imdb-pairs/train.jsonl || ! -f data/imdb-pairs/test.jsonl ]]; then
  echo "check_hf_ctest: minilm-sentence-embedding: SKIPPED: needs data/imdb-pairs/{train,test}.jsonl (scripts/fetch-pairs.sh)"
  skipped+=("the sentence-embedding check (no data/imdb-pairs: scripts/fetch-pairs.sh)")
elif ! "$repo/.venv-hf/bin/python" -c 'import sentence_transformers' 2>/dev/null; then
  echo "check_hf_ctest: minilm-sentence-embedding: SKIPPED: needs sentence-transformers in .venv-hf"
  skipped+=("the sentence-embedding check (no sentence-transformers in .venv-hf)")
else
  out="$tmp/minilm-sentence-embedding"
  echo "check_hf_ctest: minilm-sentence-embedding: ft run -> $out"
  "$ft" run "${common[@]}" --task sentence-embedding --set data.train=data/imdb-pairs/train.jsonl \
    --set 'data.labels=[]' --set 'data.columns=[]' --set embedding.loss=MultipleNegativesRankingLoss \
    --set embedding.pooling=auto --set embedding.normalize=auto --set model.config=data/all-minilm-l6-v2 \
    --set model.weights=data/all-minilm-l6-v2 --set data.vocab=data/all-minilm-l6-v2/vocab.txt --set train.lr=5e-5 \
    --set train.output_dir="$out" >"$out.log" 2>&1 \
    || { tail -n 30 "$out.log"; echo "check_hf_ctest: minilm-sentence-embedding: ft run failed"; exit 1; }
  [[ -f "$out/final/modules.json" ]] \
    || { ls -R "$out" | head -40; echo "check_hf_ctest: minilm-sentence-embedding: no modules.json in $out/final"; exit 1; }
  FT="$ft" "$repo/scripts/check-hf.sh" "$out/final" || rc=1
  # The same with LoRA (r=8 on query and value): a PEFT adapter of the bare BertModel that
  # SentenceTransformer(dir) attaches itself, and PeftModel finds every key of.
  echo "check_hf_ctest: minilm-sentence-embedding: ft run (LoRA r=8) -> $out-lora"
  "$ft" run "${common[@]}" --task sentence-embedding --set data.train=data/imdb-pairs/train.jsonl \
    --set 'data.labels=[]' --set 'data.columns=[]' --set embedding.loss=MultipleNegativesRankingLoss \
    --set embedding.pooling=auto --set embedding.normalize=auto --set model.config=data/all-minilm-l6-v2 \
    --set model.weights=data/all-minilm-l6-v2 --set data.vocab=data/all-minilm-l6-v2/vocab.txt --set train.lr=1e-3 \
    --set lora.rank=8 --set lora.alpha=16 --set 'lora.targets=[query, value]' \
    --set train.output_dir="$out-lora" >"$out-lora.log" 2>&1 \
    || { tail -n 30 "$out-lora.log"; echo "check_hf_ctest: minilm-sentence-embedding: ft run (LoRA) failed"; exit 1; }
  FT="$ft" "$repo/scripts/check-hf.sh" "$out-lora/final" || rc=1
fi

if [[ "$rc" -eq 0 && ${#skipped[@]} -gt 0 ]]; then
  printf -v left '%s, ' "${skipped[@]}"
  echo "SKIPPED: ${left%, }; every other check passed"
  exit 77
fi
exit "$rc"
