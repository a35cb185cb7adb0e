#!/usr/bin/env bash
# DDP throughput and overlap on the BENCHMARK.md `mini` workload
# (configs/bench-mini.yaml, ../shared/fixtures/bench-mini, global batch 32).
#
# Rows, run back to back so machine noise hits them alike (compare ratios):
#   single          1 process x 2 threads, batch 32
#   ddp             2 ranks x 1 thread, batch 16 per rank (default 25 MiB buckets)
#   ddp 5MiB        the same with strategy.options.bucket_mb=5 (more, earlier buckets)
#   ddp_amp         2 ranks x 1 thread, bf16 autocast on CPU
# Prints samples/s (the run summary's samples_per_s, warm-up steps excluded),
# speed-up vs single, and the share of gradient communication hidden behind
# backward (the `ddp: comm hidden ...` line rank 0 prints at teardown).
#
# Usage: scripts/bench-ddp.sh            (env: BUILD=build  STEPS=30)
# Not a test: it takes minutes and its numbers depend on the machine.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${BUILD:-build}"
steps="${STEPS:-30}"
ft="$build/bin/ft"
if [[ ! -x "$ft" ]]; then
  echo "bench-ddp: $ft not found: build first (ninja -C $build ft single ddp) or set BUILD=<build dir>" >&2
  exit 1
fi
if [[ ! -d ../shared/fixtures/bench-mini ]]; then
  echo "bench-ddp: ../shared/fixtures/bench-mini is missing (the mini workload's fixture)" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# run <tag> <ft run flags...>: leaves $tmp/<tag>.jsonl and $tmp/<tag>.log
run() {
  local tag="$1"
  shift
  if ! "$ft" run --config configs/bench-mini.yaml --max-steps "$steps" \
      --metrics-out "$tmp/$tag.jsonl" "$@" >"$tmp/$tag.log" 2>&1; then
    echo "bench-ddp: row '$tag' failed:" >&2
    tail -20 "$tmp/$tag.log" >&2
    exit 1
  fi
}

samples_per_s() {
  grep '"event":"summary"' "$tmp/$1.jsonl" | sed -E 's/.*"samples_per_s":([-0-9.eE+]+).*/\1/'
}

precision() {
  grep '"event":"summary"' "$tmp/$1.jsonl" | sed -E 's/.*"precision":"([a-z0-9]+)".*/\1/'
}

# The "ddp.overlap" strategy event of the row's metrics (keys written sorted).
overlap() {
  local line num='[-0-9.eE+]+'
  line="$(grep '"name":"ddp.overlap"' "$tmp/$1.jsonl" || true)"
  [[ -z "$line" ]] && { echo "-"; return; }
  sed -E "s/.*\"buckets\":([0-9]+),\"hidden_fraction\":($num),\"in_flight_s\":($num),\"syncs\":[0-9]+,\"waited_s\":($num).*/\1 \2 \3 \4/" <<<"$line" |
    awk '{printf "%.0f%% (waited %.3f s of %.3f s, %d buckets)\n", 100 * $2, $4, $3, $1}'
}

echo "bench-ddp: mini workload, $steps steps, global batch 32, $(nproc) cores; running 4 rows..." >&2
run single --strategy single --threads 2
run ddp --strategy ddp --nproc 2 --threads 1 --set train.batch_size=16
run ddp5 --strategy ddp --nproc 2 --threads 1 --set train.batch_size=16 --set strategy.options.bucket_mb=5
run ddp_amp --strategy ddp_amp --nproc 2 --threads 1 --set train.batch_size=16

base="$(samples_per_s single)"
printf '%-12s %-6s %-9s %10s %9s  %s\n' row ranks precision samples/s speed-up "comm hidden behind backward"
for row in "single 1" "ddp 2" "ddp5 2" "ddp_amp 2"; do
  set -- $row
  sps="$(samples_per_s "$1")"
  label="$1"
  [[ "$1" == ddp5 ]] && label="ddp 5MiB"
  printf '%-12s %-6s %-9s %10.1f %8.2fx  %s\n' "$label" "$2" "$(precision "$1")" "$sps" "$(awk -v a="$sps" -v b="$base" 'BEGIN{print a/b}')" "$(overlap "$1")"
done
