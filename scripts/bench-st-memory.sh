#!/usr/bin/env bash
# Peak memory of ft's sentence-embedding task: plain MultipleNegativesRankingLoss
# against CachedMultipleNegativesRankingLoss (GradCache, embedding.mini_batch_size
# MINI_BATCH = 32) at global batches 32, 256 and 1024. The plain loss keeps every
# row's activations until the backward; the cached one embeds the batch without
# a graph, then runs each mini-batch again with its graph, so its activations
# follow the mini-batch and its peak should stay near flat while the plain
# loss's grows with the batch.
#
# Each run: one process (--strategy single), CORES intra-op threads, fp32,
# data/all-minilm-l6-v2 (Transformer, mean Pooling, Normalize) on the first
# STEPS x batch rows of data/imdb-pairs/train.jsonl in file order, anchor and
# positive truncated to MAX_LEN (128) tokens, padded to the batch's longest
# (ft runs padding-free), AdamW lr 2e-5 constant, no clipping, no evaluation,
# no checkpoint. The number is the summary's peak_rss_mb (the process's peak
# resident set: model, AdamW state, tokenized rows, activations), beside the
# summary's model state (parameters + gradients + AdamW moments) so that what
# remains is visible, and its samples/s (STEPS is too few for ft to leave out
# warm-up steps: the first step's one-time costs are in it; a hint, not a
# benchmark).
#
# Plain MNRL at 1024 rows x 2 columns x 128 tokens may need more memory than
# the machine has (CI's has 24 GiB; check `free -g`). Before each plain run
# whose size two smaller plain runs measured, the peak is extrapolated
# linearly in the batch; when that exceeds 90 % of MemAvailable the run is
# skipped and the table says so (FORCE=1 runs it anyway). PLAIN_SIZES and
# CACHED_SIZES leave sizes out by hand (set but empty: that loss at no size).
# A run that dies (the kernel's OOM killer: exit 137) is reported as failed
# with its exit status.
#
# Usage: scripts/bench-st-memory.sh
#   env: SIZES="32 256 1024" PLAIN_SIZES=$SIZES CACHED_SIZES=$SIZES STEPS=3 MAX_LEN=128 MINI_BATCH=32
#        CORES=$(nproc) FORCE=0 BUILD=build OUT=file.md OUT_DIR=bench-out/st-memory
#        QUIET_BUSY=0.1 QUIET_TIMEOUT=1800 (seconds to wait until under a tenth of the cores is busy)
# Not a test: the 1024 runs take many minutes each on 2 cores.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
sizes="${SIZES:-32 256 1024}"
plain_sizes="${PLAIN_SIZES-$sizes}"
cached_sizes="${CACHED_SIZES-$sizes}"
steps="${STEPS:-3}"
max_len="${MAX_LEN:-128}"
mini="${MINI_BATCH:-32}"
cores="${CORES:-$(nproc)}"
force="${FORCE:-0}"
data=data/imdb-pairs/train.jsonl
model=data/all-minilm-l6-v2
ft="${BUILD:-build}/bin/ft"
out_dir="${OUT_DIR:-bench-out/st-memory}"

[[ -x "$ft" ]] || { echo "bench-st-memory: $ft not found: run scripts/setup.sh first (or set BUILD)" >&2; exit 1; }
for need in "$data" "$model/modules.json"; do
  [[ -f "$need" ]] || { echo "bench-st-memory: $need is missing (scripts/fetch-data.sh)" >&2; exit 1; }
done
mkdir -p "$out_dir/logs"
# shellcheck source=wait-low-load.sh
source "$repo/scripts/wait-low-load.sh"

has() { [[ " $1 " == *" $2 "* ]]; }
mem_available_mb() { awk '/^MemAvailable:/ {printf "%.0f", $2 / 1024}' /proc/meminfo; }

# ftrun <plain|cached> <global batch>: one run; prints "peak_rss_mb model_state_mb samples_per_s",
# or "failed: ..." (one line).
ftrun() {
  local loss="$1" g="$2" log="$out_dir/logs/ft-$1-$2.log" extra=()
  if [[ "$loss" == cached ]]; then
    extra+=(--set embedding.loss=CachedMultipleNegativesRankingLoss --set "embedding.mini_batch_size=$mini")
  else
    extra+=(--set embedding.loss=MultipleNegativesRankingLoss)
  fi
  rm -f "$out_dir/ft.jsonl"
  local rc=0
  "$ft" run --task sentence-embedding --strategy single --nproc 1 --threads "$cores" --precision fp32 \
    --batch-size "$g" --max-steps "$steps" --metrics-out "$out_dir/ft.jsonl" \
    --set "model.config=$model" --set "data.train=$data" --set data.dev= --set data.dev_fraction=0 \
    --set data.take=first --set "data.max_rows=$((steps * g))" --set "data.max_seq_len=$max_len" \
    --set data.padding=longest --set train.lr=2e-5 --set train.scheduler=constant --set train.warmup_ratio=0 \
    --set train.warmup_steps=0 --set train.max_grad_norm=0 --set train.shuffle=false --set train.drop_last=true \
    --set train.eval_every=0 --set train.save_every=0 --set train.save_each_epoch=false --set train.output_dir= \
    --set train.resume_from= --set runtime.progress=false "${extra[@]}" >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    local why
    why="$(grep -m1 -iE 'error|fail' "$log" | cut -c1-200 || true)"
    ((rc == 137)) && why="killed (SIGKILL: the OOM killer?)${why:+; $why}"
    echo "failed: exit $rc${why:+: $why}"
    return 0
  fi
  python3 - "$out_dir/ft.jsonl" <<'PY'
import json, sys
s = next((e for e in map(json.loads, filter(str.strip, open(sys.argv[1]))) if e.get("event") == "summary"), None)
if s is None:
    print("failed: no summary line")
else:
    print(f"{max(s['peak_rss_mb']):.0f} {max(s['model_state_bytes']) / 2**20:.0f} {s['samples_per_s']:.2f}")
PY
}

# The plain loss's peak at size g from the two largest smaller plain runs (a line through them).
plain_points=()
estimate() {
  local g="$1" k=${#plain_points[@]}
  ((k >= 2)) || return 1
  awk -v g="$g" -v a="${plain_points[k - 2]}" -v b="${plain_points[k - 1]}" 'BEGIN {
    split(a, p, ":"); split(b, q, ":")
    if (q[1] == p[1]) exit 1
    printf "%.0f", q[2] + (q[2] - p[2]) * (g - q[1]) / (q[1] - p[1]) }'
}

busy0="$(busy_now)"
load0="$(cut -d' ' -f1-3 /proc/loadavg)"
wait_quiet bench-st-memory
{
  echo "ft ($(git rev-parse --short HEAD)) sentence-embedding peak memory, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM ($(mem_available_mb) MB available at start), $(date -u '+%Y-%m-%d %H:%M UTC'); load average at start $load0, cores busy $busy0, then $last_busy after waiting"
  echo
  echo "### $model on $data (first $steps x batch rows, file order), max_seq_len $max_len, fp32, 1 process x $cores threads, $steps steps, cached mini_batch_size $mini"
  echo
  echo "| global batch | MNRL peak RSS MB | CachedMNRL peak RSS MB | cached / plain | model state MB (params + grads + AdamW) | MNRL samples/s | CachedMNRL samples/s |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for g in $sizes; do
    plain="not run (PLAIN_SIZES)" cached="not run (CACHED_SIZES)" state="" psps="–" csps="–"
    if has "$plain_sizes" "$g"; then
      avail="$(mem_available_mb)"
      if est="$(estimate "$g")" && ((force == 0)) && ((est > avail * 9 / 10)); then
        plain="skipped: ~$est MB expected (from the smaller batches), $avail MB available (FORCE=1 runs it)"
        echo "bench-st-memory: batch $g: plain $plain" >&2
      else
        wait_quiet bench-st-memory
        echo "bench-st-memory: batch $g: MultipleNegativesRankingLoss${est:+ (~$est MB expected)}" >&2
        r="$(ftrun plain "$g")"
        if [[ "$r" == failed* ]]; then plain="$r"; else
          read -r plain state psps <<<"$r"
          plain_points+=("$g:$plain")
        fi
      fi
    fi
    if has "$cached_sizes" "$g"; then
      wait_quiet bench-st-memory
      echo "bench-st-memory: batch $g: CachedMultipleNegativesRankingLoss" >&2
      r="$(ftrun cached "$g")"
      if [[ "$r" == failed* ]]; then cached="$r"; else read -r cached state csps <<<"$r"; fi
    fi
    ratio="–"
    [[ "$plain" =~ ^[0-9]+$ && "$cached" =~ ^[0-9]+$ ]] && ratio="$(awk -v c="$cached" -v p="$plain" 'BEGIN {printf "%.2f", c / p}')"
    echo "| $g | $plain | $cached | $ratio | ${state:-–} | $psps | $csps |"
  done
} | tee "${OUT:-/dev/null}"
