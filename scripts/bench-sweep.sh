#!/usr/bin/env bash
# The sweep benchmark of docs/training-loop.md: `ft sweep` over learning rate
# x warm-up on the default run (configs/sweeps/imdb.yaml: 8 trials, one at a
# time, ASHA), then the default config and the sweep's best.yaml trained one
# after the other under the same conditions, with evaluation only at the end
# as a plain run has it.
#
#   scripts/bench-sweep.sh [OUT_DIR]      (default runs/bench-sweep)
#
# PRECISION=fp32 scripts/bench-sweep.sh runs every trial and both plain runs
# with that strategy.precision instead of the default's (bf16 autocast is
# several times slower than fp32 on CPUs without AVX-512 BF16).
#
# Prints: the sweep's table and wall time; the default's and the best
# config's dev accuracy; and 8 full trials' time, estimated as 4 x the two
# plain runs' time (without the pruning evaluations). Needs data/
# (scripts/fetch-data.sh) and a built ft.
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
run best --config "$out/sweep/best.yaml"
t2=$(date +%s.%N)

acc() { grep -o '"eval_accuracy":[0-9.]*' "$out/$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
python3 - "$t0" "$t1" "$t2" "$(acc default)" "$(acc best)" <<'EOF'
import sys
t0, t1, t2, default, best = map(float, sys.argv[1:])
sweep, pair = t1 - t0, t2 - t1
print(f"\nsweep: {sweep:.0f} s wall")
print(f"default (lr 1e-4, warm-up 0.1) dev accuracy {default:.4f}; best.yaml {best:.4f} "
      f"({'at least as good' if best >= default else 'WORSE'})")
print(f"8 full trials: ~{4 * pair:.0f} s (4 x the {pair:.0f} s of the two plain runs); "
      f"the sweep took {sweep / (4 * pair):.2f} of that")
EOF
