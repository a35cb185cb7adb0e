#!/usr/bin/env bash
# Regenerates the tables and charts of docs/benchmarks.md ("Measured here"):
# the whole strategy matrix (`ft bench`) over one full epoch of the Weibo
# workload (the seeds' data, random-init `mini` model) and of the IMDB workload
# (the pretrained MiniLM), so dev accuracy says something.
#
# Usage: scripts/bench-docs.sh [weibo|imdb|all]
#        env: BUILD=build  STEPS=0 (one epoch)  NPROC=2  MACHINE='text for the table header'
# Outputs: bench-out/weibo/ and bench-out/imdb/ (results.{json,csv,md},
# chart.svg); copy the tables into docs/benchmarks.md and the charts to
# docs/benchmarks-{weibo,imdb}.svg. Not a test: about 35 minutes on 2 cores,
# and its numbers depend on the machine.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
which="${1:-all}"
build="${BUILD:-build}"
steps="${STEPS:-0}"
nproc="${NPROC:-2}"
machine="${MACHINE:-$(nproc)-core machine}"
ft="$build/bin/ft"
if [[ ! -x "$ft" ]]; then
  echo "bench-docs: $ft not found: build first (ninja -C $build) or set BUILD=<build dir>" >&2
  exit 1
fi
if [[ ! -f data/imdb/train.jsonl || ! -f data/all-minilm-l6-v2/model.safetensors ]]; then
  echo "bench-docs: data/imdb/train.jsonl or data/all-minilm-l6-v2/ is missing: run scripts/fetch-data.sh" >&2
  exit 1
fi
if [[ ! -f data/weibo-vocab.txt ]]; then
  "$ft" vocab build --config configs/weibo.yaml --out data/weibo-vocab.txt
fi
source "$repo/scripts/wait-low-load.sh"
wait_low_load bench-docs
echo "bench-docs: $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load before start $load_before, $(date -u '+%Y-%m-%d %H:%M UTC')"
for wl in weibo imdb; do
  [[ "$which" == "$wl" || "$which" == all ]] || continue
  "$ft" bench --workload "$wl" --nproc "$nproc" --steps "$steps" --machine "$machine" --out "bench-out/$wl" || true
done
