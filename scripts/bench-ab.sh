#!/usr/bin/env bash
# Side-by-side timings of ft binaries (before/after a change) on the MiniLM
# rows of docs/benchmarks.md: all-MiniLM-L6-v2, the pre-tokenized IMDB reviews
# of scripts/bench-hf-peers.sh (256 tokens, padding longest), global batch 32.
# Per round and row every variant runs once, back to back; the table gives
# the median samples/s and peak RSS of the largest rank over the rounds.
#
#   scripts/bench-ab.sh LABEL=FT[:VAR=VALUE...][:set.KEY=VALUE...] ...
#   scripts/bench-ab.sh before=/tmp/before/bin/ft after=build/bin/ft
#   scripts/bench-ab.sh packed=build/bin/ft:set.model.attention=packed eager=build/bin/ft:set.model.attention=eager
#
# VAR=VALUE goes into that variant's environment, set.KEY=VALUE becomes
# `--set KEY=VALUE` on its command line.
#   ROWS="single ddp" ROUNDS=5 STEPS=10 scripts/bench-ab.sh ...
#
# A copied build runs from its own lib/ (LD_LIBRARY_PATH=<FT's dir>/../lib),
# so `cp -a build/bin build/lib DIR/` keeps an old build for comparison.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
rows="${ROWS:-single ddp ddp_amp}"
rounds="${ROUNDS:-3}"
steps="${STEPS:-10}"
data="${DATA:-bench-out/hf-peers/imdb-minilm.safetensors}"
model="${MODEL:-data/all-minilm-l6-v2}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
[[ $# -gt 0 ]] || { sed -n 2,14p "$0" >&2; exit 2; }
[[ -f "$data" ]] || { echo "bench-ab: $data is missing: scripts/bench-hf-peers.sh minilm writes it" >&2; exit 1; }
# shellcheck source=wait-low-load.sh
source "$repo/scripts/wait-low-load.sh"
wait_low_load bench-ab

labels=()
for spec in "$@"; do labels+=("${spec%%=*}"); done

run_one() {  # run_one <ft> <row> <metrics file> [VAR=VALUE | set.KEY=VALUE ...]
  local ft="$1" row="$2" metrics="$3"; shift 3
  local n=2 prec=(--precision fp32) vars=() sets=() p
  for p in "$@"; do
    if [[ "$p" == set.* ]]; then sets+=(--set "${p#set.}"); else vars+=("$p"); fi
  done
  [[ "$row" == single ]] && n=1
  [[ "$row" == ddp_amp ]] && prec=()
  env LD_LIBRARY_PATH="$(dirname "$ft")/../lib" "${vars[@]}" "$ft" run --config configs/bench-mini.yaml \
    --strategy "$row" --nproc "$n" --threads $((2 / n)) --max-steps "$steps" --set train.batch_size=$((32 / n)) \
    --set model.config="$model" --set data.train="$data" --set data.padding=longest --set data.max_seq_len=256 \
    --set train.lr=1e-4 "${prec[@]}" "${sets[@]}" --metrics-out "$metrics" >/dev/null 2>&1
}

summary() {  # summary <metrics file>: "samples/s peak_rss_mb"
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("event") == "summary": print(j["samples_per_s"], max(j["peak_rss_mb"]))' "$1"
}

for ((r = 1; r <= rounds; r++)); do
  for row in $rows; do
    for spec in "$@"; do
      label="${spec%%=*}" rest="${spec#*=}"
      IFS=: read -r -a parts <<<"$rest"
      echo "bench-ab: round $r/$rounds, $row, $label" >&2
      rm -f "$out/m.jsonl"
      run_one "${parts[0]}" "$row" "$out/m.jsonl" "${parts[@]:1}" || { echo "bench-ab: $label $row failed" >&2; exit 1; }
      summary "$out/m.jsonl" >>"$out/$row.$label"
    done
  done
done

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "ft side by side: $model, $data, global batch 32, $steps steps, median of $rounds rounds (load before: $load_before)"
echo
printf '| row |'; for l in "${labels[@]}"; do printf ' %s samples/s | %s peak RSS MB |' "$l" "$l"; done; echo
printf '|---|'; for _ in "${labels[@]}"; do printf -- '---:|---:|'; done; echo
for row in $rows; do
  printf '| %s |' "$row"
  for l in "${labels[@]}"; do
    printf ' %.2f | %.0f |' "$(cut -d' ' -f1 "$out/$row.$l" | median)" "$(cut -d' ' -f2 "$out/$row.$l" | median)"
  done
  echo
done
