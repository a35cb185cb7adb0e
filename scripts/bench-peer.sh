#!/usr/bin/env bash
# ft against PyTorch's own Python stack (Debian python3-torch) on the same
# rows, model, initialisation scheme and hyper-parameters, interleaved per
# strategy in one invocation so machine noise hits both alike.
#
# Per strategy and round, back to back:
#   peer default   scripts/peer_bench.py with PyTorch's default threads, no pinning
#   peer tuned     the same with cores/ranks threads per rank, ranks pinned
#   ft padded      ft with model.padding_free=false (every pad position computed)
#   ft             ft as shipped (padding-free, one thread pool, pinned ranks)
# and prints the median samples/s of each (warm-up steps excluded on both
# sides) and ft's ratio to the better of the two peer settings.
#
# Workloads (global batch 32, 2 cores, ranks share them equally):
#   mini   ../shared/fixtures/bench-mini, configs/bench-mini.yaml: pad to the
#          batch's longest row (62 % real tokens); single, ddp, ddp_amp, zero1
#   weibo  ../shared/fixtures/bench-weibo: the seeds' posts padded to 128 as
#          the seeds did (15 % real tokens), lr 3e-5; single, ddp, ddp_amp
#
# Usage: scripts/bench-peer.sh [mini|weibo|all]   (env: STEPS=20 ROUNDS=3 BUILD=build OUT=file.md)
# Not a test: it takes minutes. Check `uptime` first: load must be < 0.5.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
which_workloads="${1:-all}"
steps="${STEPS:-20}"
rounds="${ROUNDS:-3}"
ft="${BUILD:-build}/bin/ft"
py=/usr/bin/python3
cores="$(nproc)"

[[ -x "$ft" ]] || { echo "bench-peer: $ft not found: run scripts/setup.sh first (or set BUILD)" >&2; exit 1; }
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "bench-peer: installing python3-torch (the peer)" >&2
  sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3-torch >/dev/null
fi
source "$repo/scripts/wait-low-load.sh"
wait_low_load bench-peer
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Fields of the JSON object on stdin: "samples_per_s" by default.
sps() { sed -E 's/.*"samples_per_s":[ ]*([-0-9.eE+]+).*/\1/'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

peer() {  # peer <fixture> <strategy> <nproc> <padding> <lr> <threads> [--pin]
  "$py" scripts/peer_bench.py --fixture "$1" --strategy "$2" --nproc "$3" --padding "$4" --lr "$5" \
    --threads "$6" --steps "$steps" --port $((29500 + RANDOM % 2000)) "${@:7}" 2>"$tmp/peer.err" | sps ||
    { echo "bench-peer: peer $2 failed:" >&2; tail -5 "$tmp/peer.err" >&2; exit 1; }
}

ftrun() {  # ftrun <strategy> <nproc> <config overrides...>
  local s="$1" n="$2"
  shift 2
  local extra=()
  [[ "$s" == ddp_amp ]] || extra+=(--precision fp32)
  if ! "$ft" run --config configs/bench-mini.yaml --strategy "$s" --nproc "$n" --threads $((cores / n)) \
      --max-steps "$steps" --set train.batch_size=$((32 / n)) --metrics-out "$tmp/ft.jsonl" "${extra[@]}" \
      "$@" >"$tmp/ft.log" 2>&1; then
    echo "bench-peer: ft $s failed:" >&2
    tail -5 "$tmp/ft.log" >&2
    exit 1
  fi
  grep '"event":"summary"' "$tmp/ft.jsonl" | sps
}

bench_workload() {  # bench_workload <name> <fixture> <padding> <lr> <strategies...>
  local name="$1" fixture="$2" padding="$3" lr="$4"
  shift 4
  [[ -f "$fixture/data.safetensors" ]] || { echo "bench-peer: $fixture is missing (../shared)" >&2; exit 1; }
  local over=(--set "model.config=$fixture/config.json" --set "data.train=$fixture/data.safetensors"
              --set "data.padding=$padding" --set "train.lr=$lr")
  echo
  echo "### $name: $fixture, padding $padding, global batch 32, $steps steps (2 warm-up excluded), median of $rounds"
  echo
  echo "| strategy | ranks x threads | peer, default threads | peer, tuned (threads, pinned) | ft padded | ft | ft / better peer |"
  echo "|---|---|---|---|---|---|---|"
  for s in "$@"; do
    local n=2
    [[ "$s" == single ]] && n=1
    : >"$tmp/pd"; : >"$tmp/pb"; : >"$tmp/fp"; : >"$tmp/ff"
    for ((r = 0; r < rounds; r++)); do
      echo "bench-peer: $name $s round $((r + 1))/$rounds" >&2
      peer "$fixture" "$s" "$n" "$padding" "$lr" 0 >>"$tmp/pd"
      peer "$fixture" "$s" "$n" "$padding" "$lr" $((cores / n)) --pin >>"$tmp/pb"
      ftrun "$s" "$n" "${over[@]}" --set model.padding_free=false >>"$tmp/fp"
      ftrun "$s" "$n" "${over[@]}" >>"$tmp/ff"
    done
    local pd pb fp ff
    pd="$(median <"$tmp/pd")"; pb="$(median <"$tmp/pb")"; fp="$(median <"$tmp/fp")"; ff="$(median <"$tmp/ff")"
    awk -v s="$s" -v n="$n" -v t=$((cores / n)) -v pd="$pd" -v pb="$pb" -v fp="$fp" -v ff="$ff" 'BEGIN {
      best = pd > pb ? pd : pb
      printf "| %s | %d x %d | %.1f | %.1f | %.1f | %.1f | **%.2fx** |\n", s, n, t, pd, pb, fp, ff, ff / best }'
  done
}

{
  echo "ft vs PyTorch $("$py" -c 'import torch; print(torch.__version__)') (Python), $(nproc) cores, load before start: $load_before, BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
  if [[ "$which_workloads" == mini || "$which_workloads" == all ]]; then
    bench_workload mini ../shared/fixtures/bench-mini longest 2e-5 single ddp ddp_amp zero1
  fi
  if [[ "$which_workloads" == weibo || "$which_workloads" == all ]]; then
    bench_workload weibo ../shared/fixtures/bench-weibo max_length 3e-5 single ddp ddp_amp
  fi
} | tee "${OUT:-/dev/null}"
