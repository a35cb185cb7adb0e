#!/usr/bin/env bash
# ft's sentence-embedding task against the real peer a user would pick:
# sentence-transformers' own SentenceTransformerTrainer (scripts/st_peer_bench.py,
# from the env of scripts/hf-env.sh), MultipleNegativesRankingLoss, on the same
# rows, model, global batch, max_seq_len, threads and optimizer. Per row and
# round, back to back: the peer, then ft, so machine noise hits both alike.
# Median of ROUNDS; the first WARMUP steps are left out of samples/s on both
# sides. Peak RSS is per rank (ru_maxrss for the peer, ft's summary for ft),
# the largest rank shown.
#
#   row     ranks x threads   global batch (per rank)   loss
#   single  1 x C             32 (32)                   MNRL, scale 20
#   ddp     2 x C/2, pinned   32 (16)                   MNRL, negatives gathered across ranks
#                                                       (peer: torchrun + gloo, gather_across_devices=True;
#                                                        ft: --strategy ddp, embedding.gather_across_devices=true)
#   cached  1 x C             1024 (1024)               CachedMNRL (GradCache), mini_batch_size 32,
#                                                       CACHED_STEPS steps (CACHED_WARMUP excluded)
#
# Settings both sides share: data/all-minilm-l6-v2 as the sentence-transformers
# directory it is (Transformer, mean Pooling, Normalize; pretrained weights,
# dropout 0.1 in training), data/imdb-pairs/train.jsonl's first steps x batch
# rows in file order (no shuffle; global batch s = rows [G s, G s + G), rank r
# the r-th contiguous G/ranks of them), anchor and positive each tokenized with
# the MiniLM's tokenizer, truncated to MAX_LEN (256) tokens and padded to the
# batch's longest; AdamW (betas 0.9/0.999, eps 1e-8), lr LR (2e-5) constant, no
# warm-up, no clipping (max_grad_norm 0), weight decay 0.01 on everything but
# biases and LayerNorm weights (the Trainer's rule; ft's
# train.decay_bias_and_norm=false); fp32; seed 42; cores/ranks intra-op threads
# per rank, ranks pinned to their own cores; no evaluation (no dev data, no
# dev_fraction) and no checkpoint (the peer: save_strategy "no"; ft:
# train.output_dir empty, so not even the final one).
#
# What still differs (kept, as each side runs as shipped):
#   - timing: the peer's clock runs from the end of step WARMUP to the end of
#     the last step (Trainer callbacks), so it holds the collator's tokenizing,
#     forward, backward, optimizer and the Trainer's own work between steps. ft's
#     per-step time (the summary's samples_per_s) runs from the start of a step
#     to the end of its optimizer step: it holds the batch's collate, which
#     tokenizes the rows there and then as the peer's collator does (ft does not
#     tokenize ahead), but not the step's metrics line written after it. ft's
#     number is recomputed here from its per-step lines (train.log_every=1) so
#     that it leaves out the same WARMUP steps as the peer (the summary leaves
#     out 2 when more than 6 steps run, else none); with more than 6 steps and
#     WARMUP=2 it is the summary's samples_per_s.
#   - padding: the peer pads anchors and positives each to their own longest
#     row and computes every pad position (SDPA with a mask); ft pads both to
#     the longer of the two, but runs padding-free (model.padding_free=true, its
#     default): pad positions are never computed.
#   - the pooler: the peer's BertModel keeps its pooler (frozen, as mean
#     pooling never uses it, so DDP runs with find_unused_parameters=False; its
#     forward still runs, a 384 x 384 Linear on each [CLS]); ft's model has none.
#   - ft computes the gradient norm for its step line even without clipping.
#   - the peer's train loss (the table's sanity column) is rank 0's mean over
#     all steps; ft's is the mean over steps of the loss averaged over ranks.
#     Dropout masks differ, so the two agree only roughly.
#
# Usage: scripts/bench-st-peer.sh
#   env: ROWS="single ddp cached" ROUNDS=3 STEPS=20 WARMUP=2 BATCH=32 MAX_LEN=256 LR=2e-5
#        CACHED_BATCH=1024 CACHED_STEPS=3 CACHED_WARMUP=1 CACHED_ROUNDS=$ROUNDS MINI_BATCH=32
#        CORES=$(nproc) (threads per rank = CORES / ranks) BUILD=build OUT=file.md OUT_DIR=bench-out/st-peer
#        QUIET_BUSY=0.1 QUIET_TIMEOUT=1800 (seconds to wait until under a tenth of the cores is busy)
# Not a test: on 2 cores the single and ddp rows take minutes per run and the
# cached row (2 x 1024 x up to 256 tokens per step, embedded twice) far longer.
# Numbers from a loaded machine are worthless: the table says how busy it was.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
rows="${ROWS:-single ddp cached}"
rounds="${ROUNDS:-3}"
steps="${STEPS:-20}"
warmup="${WARMUP:-2}"
global="${BATCH:-32}"
max_len="${MAX_LEN:-256}"
lr="${LR:-2e-5}"
cached_global="${CACHED_BATCH:-1024}"
cached_steps="${CACHED_STEPS:-3}"
cached_warmup="${CACHED_WARMUP:-1}"
cached_rounds="${CACHED_ROUNDS:-$rounds}"
mini="${MINI_BATCH:-32}"
cores="${CORES:-$(nproc)}"
data=data/imdb-pairs/train.jsonl
model=data/all-minilm-l6-v2
ft="${BUILD:-build}/bin/ft"
out_dir="${OUT_DIR:-bench-out/st-peer}"
py="$repo/.venv-hf/bin/python"

[[ -x "$ft" ]] || { echo "bench-st-peer: $ft not found: run scripts/setup.sh first (or set BUILD)" >&2; exit 1; }
[[ -x "$py" ]] || scripts/hf-env.sh
"$py" -c 'import sentence_transformers, datasets' 2>/dev/null ||
  { echo "bench-st-peer: .venv-hf lacks sentence-transformers or datasets (the peer)" >&2; exit 1; }
for need in "$data" "$model/modules.json"; do
  [[ -f "$need" ]] || { echo "bench-st-peer: $need is missing (scripts/fetch-data.sh)" >&2; exit 1; }
done
mkdir -p "$out_dir/logs"
# shellcheck source=wait-low-load.sh
source "$repo/scripts/wait-low-load.sh"

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
field() { "$py" -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); v=d.get(sys.argv[1]); print(max(v) if isinstance(v, list) else v)' "$1"; }
as_error() { "$py" -c 'import json,sys; print(json.dumps({"error": sys.argv[1]}))' "$1"; }

# The row's shape: ranks, global batch, steps, warm-up, loss flags.
shape() {
  n=1 g="$global" s="$steps" w="$warmup" cached=0
  case "$1" in
    single) ;;
    ddp) n=2 ;;
    cached) g="$cached_global" s="$cached_steps" w="$cached_warmup" cached=1 ;;
    *) echo "bench-st-peer: unknown row '$1' (single, ddp, cached)" >&2; exit 2 ;;
  esac
  threads=$((cores / n)); ((threads >= 1)) || threads=1
  ((g % n == 0)) || { echo "bench-st-peer: $1: global batch $g is not a multiple of $n ranks" >&2; exit 2; }
  ((s > w)) || { echo "bench-st-peer: $1: $s steps leave none after $w warm-up steps" >&2; exit 2; }
}

# peer <row>: one run; prints the peer's JSON line (or {"error": ...}).
peer() {
  local row="$1" log="$out_dir/logs/peer-$1.log" args
  args=(scripts/st_peer_bench.py --data "$data" --model "$model" --rows $((s * g)) --batch-size $((g / n))
        --max-seq-len "$max_len" --steps "$s" --warmup "$w" --threads "$threads" --nproc "$n" --lr "$lr"
        --weight-decay 0.01 --out-dir "$out_dir/run")
  ((cached)) && args+=(--cached --mini-batch-size "$mini")
  local out
  if out="$("$py" "${args[@]}" 2>"$log")" && [[ "$out" == *samples_per_s* ]]; then
    echo "$out" | tail -1
  else
    local err
    err="$(grep -E '(Error|Exception): ' "$log" | grep -v ChildFailedError | head -1 | cut -c1-300)"
    [[ -n "$err" ]] || err="$(tail -1 "$log" | cut -c1-300)"
    as_error "$err"
  fi
}

# ft's numbers from its metrics file: samples/s over the steps after the
# first W (each step line's samples_per_s is that step's rows over its time),
# the summary's own samples_per_s and peak RSS, the mean step loss.
ft_result() {
  "$py" - "$1" "$2" "$3" <<'PY'
import json, sys
path, warm, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
events = [json.loads(line) for line in open(path) if line.strip()]
steps = [e for e in events if e.get("event") == "step"]
summary = next((e for e in events if e.get("event") == "summary"), None)
if summary is None or len(steps) != want:
    print(json.dumps({"error": f"{path}: {len(steps)} step lines for {want} steps, summary {summary is not None}"}))
    sys.exit(0)
g = summary["samples"] / summary["steps"]
timed = steps[warm:]
seconds = sum(g / e["samples_per_s"] for e in timed)
print(json.dumps({"samples_per_s": g * len(timed) / seconds, "summary_samples_per_s": summary["samples_per_s"],
                  "peak_rss_mb": summary["peak_rss_mb"], "train_loss": sum(e["loss"] for e in steps) / len(steps),
                  "steps": len(steps), "warmup": warm, "global_batch": g}))
PY
}

# ftrun <row>: one run; prints ft_result's line (or {"error": ...}).
ftrun() {
  local row="$1" log="$out_dir/logs/ft-$1.log" strategy=single extra=()
  ((n > 1)) && strategy=ddp
  ((cached)) && extra+=(--set embedding.loss=CachedMultipleNegativesRankingLoss --set "embedding.mini_batch_size=$mini")
  ((cached)) || extra+=(--set embedding.loss=MultipleNegativesRankingLoss)
  rm -f "$out_dir/ft.jsonl"
  if "$ft" run --task sentence-embedding --strategy "$strategy" --nproc "$n" --threads "$threads" \
      --precision fp32 --batch-size $((g / n)) --max-steps "$s" --metrics-out "$out_dir/ft.jsonl" \
      --set "model.config=$model" --set model.padding_free=true \
      --set "data.train=$data" --set data.dev= --set data.dev_fraction=0 --set data.format=jsonl \
      --set 'data.columns=[]' --set data.take=first --set "data.max_rows=$((s * g))" \
      --set "data.max_seq_len=$max_len" --set data.padding=longest --set data.group_by_length=false \
      --set embedding.scale=20 --set embedding.symmetric=false --set embedding.gather_across_devices=true \
      --set embedding.pooling=auto --set embedding.normalize=auto \
      --set train.epochs=1 --set train.grad_accum=1 --set train.optimizer=adamw --set "train.lr=$lr" \
      --set train.beta1=0.9 --set train.beta2=0.999 --set train.eps=1e-8 \
      --set train.weight_decay=0.01 --set train.decay_bias_and_norm=false --set train.scheduler=constant \
      --set train.warmup_ratio=0 --set train.warmup_steps=0 --set train.max_grad_norm=0 \
      --set train.shuffle=false --set train.drop_last=true --set train.seed=42 --set train.log_every=1 \
      --set train.eval_every=0 --set train.save_every=0 --set train.save_each_epoch=false \
      --set train.output_dir= --set train.resume_from= --set runtime.progress=false \
      "${extra[@]}" >"$log" 2>&1; then
    ft_result "$out_dir/ft.jsonl" "$w" "$s"
  else
    as_error "$(grep -m1 -iE 'error|fail' "$log" | cut -c1-300)"
  fi
}

# record <label> <json>: one run's numbers appended to $out_dir/<label>.{sps,rss,loss}, or its error to <label>.err.
record() {
  if [[ "$2" == *'"error"'* ]]; then echo "$2" | field error >"$out_dir/$1.err"; else
    echo "$2" | field samples_per_s >>"$out_dir/$1.sps"
    echo "$2" | field peak_rss_mb >>"$out_dir/$1.rss"
    echo "$2" | field train_loss >>"$out_dir/$1.loss"
  fi
}

busy0="$(busy_now)"
load0="$(cut -d' ' -f1-3 /proc/loadavg)"
wait_quiet bench-st-peer
{
  echo "ft ($(git rev-parse --short HEAD)) vs SentenceTransformerTrainer ($("$py" -c 'import torch, transformers, sentence_transformers; print(f"sentence-transformers {sentence_transformers.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")' 2>/dev/null | tail -1)), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u '+%Y-%m-%d %H:%M UTC'); load average at start $load0, cores busy $busy0, then $last_busy after waiting (the share of all cores busy over 3 s, from /proc/stat)"
  echo
  echo "### $model on $data (first steps x batch rows, file order), max_seq_len $max_len, fp32, AdamW lr $lr constant, weight decay 0.01, no clipping"
  echo
  echo "| row | ranks x threads | global batch (per rank) | steps (warm-up excluded) | rounds | peer samples/s | ft samples/s | ft / peer | peer peak RSS/rank MB | ft peak RSS/rank MB | mean train loss peer / ft | cores busy before each round |"
  echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"
  for row in $rows; do
    shape "$row"
    nr="$rounds"
    [[ "$row" == cached ]] && nr="$cached_rounds"
    for c in peer ft; do : >"$out_dir/$c.sps"; : >"$out_dir/$c.rss"; : >"$out_dir/$c.loss"; : >"$out_dir/$c.err"; done
    busy=""
    for ((r = 0; r < nr; r++)); do
      wait_quiet bench-st-peer
      busy+="$last_busy "
      echo "bench-st-peer: $row: peer, round $((r + 1))/$nr" >&2
      record peer "$(peer "$row")"
      echo "bench-st-peer: $row: ft, round $((r + 1))/$nr" >&2
      record ft "$(ftrun "$row")"
    done
    cell() {  # cell <label> <sps|rss|loss> <printf format>
      if [[ -s "$out_dir/$1.err" ]]; then echo "**failed**: \`$(cat "$out_dir/$1.err")\`"; else median <"$out_dir/$1.$2" | xargs printf "$3"; fi
    }
    ps="$(cell peer sps %.1f)"; fs="$(cell ft sps %.1f)"
    ratio="–"
    [[ "$ps" == *failed* || "$fs" == *failed* ]] || ratio="$(awk -v f="$fs" -v p="$ps" 'BEGIN {printf "**%.2fx**", f / p}')"
    prss="$(cell peer rss %.0f)"; frss="$(cell ft rss %.0f)"
    [[ "$prss" == *failed* ]] && prss="–"
    [[ "$frss" == *failed* ]] && frss="–"
    losses="$( [[ -s "$out_dir/peer.loss" ]] && median <"$out_dir/peer.loss" | xargs printf %.4f || echo –) / $( [[ -s "$out_dir/ft.loss" ]] && median <"$out_dir/ft.loss" | xargs printf %.4f || echo –)"
    echo "| $row | $n x $threads | $g ($((g / n))) | $s ($w) | $nr | $ps | $fs | $ratio | $prss | $frss | $losses | $busy|"
  done
} | tee "${OUT:-/dev/null}"
