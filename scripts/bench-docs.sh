#!/usr/bin/env bash
# Regenerates the tables and charts of docs/benchmarks.md: the whole strategy
# matrix (`ft bench`) on the Weibo workload (the seeds' data) and on IMDB.
#
# Usage: scripts/bench-docs.sh        (env: BUILD=build  STEPS=30  NPROC=2)
# Outputs: bench-out/weibo/ and bench-out/imdb/ (results.{json,csv,md},
# chart.svg); copy the tables into docs/benchmarks.md and the charts to
# docs/benchmarks-{weibo,imdb}.svg. Not a test: it takes a while and its numbers
# depend on the machine.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${BUILD:-build}"
steps="${STEPS:-30}"
nproc="${NPROC:-2}"
ft="$build/bin/ft"
if [[ ! -x "$ft" ]]; then
  echo "bench-docs: $ft not found: build first (ninja -C $build) or set BUILD=<build dir>" >&2
  exit 1
fi
if [[ ! -f data/weibo-vocab.txt ]]; then
  "$ft" vocab build --config configs/weibo.yaml --out data/weibo-vocab.txt
fi
if [[ ! -f data/imdb/train.jsonl ]]; then
  echo "bench-docs: data/imdb/train.jsonl is missing: run scripts/fetch-data.sh" >&2
  exit 1
fi
"$ft" bench --workload weibo --nproc "$nproc" --steps "$steps" --out bench-out/weibo || true
"$ft" bench --workload imdb --nproc "$nproc" --steps "$steps" --out bench-out/imdb || true
