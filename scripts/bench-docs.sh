#!/usr/bin/env bash
# Regenerates the tables and charts of docs/benchmarks.md ("Measured here"):
# the whole strategy matrix (`ft bench`) over one full epoch of the Weibo
# workload (the seeds' data, the pretrained bge-small-zh-v1.5) and of the IMDB workload
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
if [[ ! -f data/bge-small-zh-v1.5/model/model.safetensors ]]; then
  scripts/fetch-bge-zh.sh   # Weibo's model: bge-small-zh-v1.5, imported from its ONNX export
fi
source "$repo/scripts/wait-low-load.sh"
wait_low_load bench-docs
echo "bench-docs: $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load before start $load_before, $(date -u '+%Y-%m-%d %H:%M UTC')"
for wl in weibo imdb; do
  [[ "$which" == "$wl" || "$which" == all ]] || continue
  "$ft" bench --workload "$wl" --nproc "$nproc" --steps "$steps" --machine "$machine" --out "bench-out/$wl" || true
done
