#!/usr/bin/env bash
# The sweep benchmark of docs/training-loop.md: `ft sweep` over learning rate
# x warm-up on the default run (configs/sweeps/imdb.yaml: 8 trials, one at a
# time, SHA), then a plain run of the default config under the same
# conditions, with evaluation only at the end as a plain run has it.
#
#   scripts/bench-sweep.sh [OUT_DIR]      (default runs/bench-sweep)
#
# PRECISION=fp32 scripts/bench-sweep.sh runs every trial and the plain run
# with that strategy.precision instead of the default's (bf16 autocast is
# several times slower than fp32 on CPUs without AVX-512 BF16).
#
# Prints: the sweep's table and wall time; the plain default's and the
# sweep's best dev accuracy (a trial's curve is the plain run's: evaluation
# does not change training); and the sweep's time against 8 plain runs'.
# Needs data/ (scripts/fetch-data.sh) and a built ft.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="${1:-runs/bench-sweep}"
ft="${FT:-build/bin/ft}"
# shellcheck source=wait-low-load.sh
source scripts/wait-low-load.sh
wait_quiet bench-sweep

rm -rf "$out"
mkdir -p "$out"
sed "s|^output_dir: .*|output_dir: $out/sweep|" configs/sweeps/imdb.yaml >"$out/sweep.yaml"
plain=()
if [[ -n "${PRECISION:-}" ]]; then
  sed "s|^  precision: .*|  precision: $PRECISION|" configs/default.yaml >"$out/base.yaml"
  echo "base: $out/base.yaml" >>"$out/sweep.yaml"
  plain=(--set "strategy.precision=$PRECISION")
fi
t0=$(date +%s.%N)
"$ft" sweep --config "$out/sweep.yaml" | tee "$out/sweep.log"
t1=$(date +%s.%N)

run() {  # NAME [ft run flags...]: one full run, its output in OUT/NAME.log
  local name="$1"
  shift
  "$ft" run "$@" --output-dir "$out/$name" --set runtime.progress=false >"$out/$name.log" 2>&1
}
run default "${plain[@]}"
t2=$(date +%s.%N)

default=$(grep -o '"eval_accuracy":[0-9.]*' "$out/default/metrics.jsonl" | tail -1 | cut -d: -f2)
python3 - "$t0" "$t1" "$t2" "$default" "$out/sweep/sweep_state.json" <<'EOF'
import json, sys
t0, t1, t2, default = map(float, sys.argv[1:5])
trials = json.load(open(sys.argv[5]))["trials"]
best = max(t["best"] for t in trials if t["status"] == "done")
sweep, plain = t1 - t0, t2 - t1
print(f"\nsweep: {sweep:.0f} s wall, {sum(t['steps'] for t in trials)} of {8 * 107} steps")
print(f"default (lr 1e-4, warm-up 0.1) plain run: dev accuracy {default:.4f} in {plain:.0f} s; "
      f"the sweep's best {best:.4f} ({'at least as good' if best >= default else 'WORSE'})")
print(f"8 plain runs: {8 * plain:.0f} s; the sweep took {sweep / (8 * plain):.2f} of that")
EOF
