#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -DFT_FUZZ=ON: ASan + UBSan + coverage)
# in build-fuzz/ and runs each for a bounded time; see docs/hardening.md.
#
#   scripts/fuzz.sh                       every target, 600 s each, 2 at a time
#   scripts/fuzz.sh -t 60 tokenizer data  those targets, 60 s each
#   scripts/fuzz.sh -j 1 -b               one at a time; -b: build only
#   scripts/fuzz.sh -n                    run the binaries already built
#
# Targets: safetensors tokenizer data config (tests/fuzz/fuzz_<name>.cpp).
# Each run starts from tests/fuzz/corpus/<name> and regressions/<name> and
# grows build-fuzz/fuzz-work/<name>/corpus; a crash, hang (> 5 s of CPU), escaping
# non-ft exception, sanitizer report or huge allocation stops that target
# and leaves the input in build-fuzz/fuzz-work/<name>/crashes/. Minimise it
# (fuzz_<name> -minimize_crash=1 -runs=10000 FILE), fix the bug, and save it
# as tests/fuzz/regressions/<name>/<bug-name> so the replay test keeps it.
# Exit status: 0 when no target found anything.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FT_FUZZ_BUILD:-$repo/build-fuzz}"
seconds=600
parallel=2
build_only=0
no_build=0
while getopts "t:j:bnh" opt; do
  case "$opt" in
    t) seconds="$OPTARG" ;;
    j) parallel="$OPTARG" ;;
    b) build_only=1 ;;
    n) no_build=1 ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
((${#targets[@]})) || targets=(safetensors tokenizer data config)

if ((!no_build)); then
  command -v clang++ >/dev/null || { echo "fuzz: clang++ not found; apt-get install clang" >&2; exit 2; }
  export CCACHE_BASEDIR="$repo"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DFT_FUZZ=ON >/dev/null
  nice -n 15 ninja -C "$build" -j "${FT_BUILD_JOBS:-2}" "${targets[@]/#/fuzz_}"
fi
((build_only)) && exit 0

# Inputs at most this long (bytes); enough for a few rows / tensors / keys.
declare -A max_len=([safetensors]=4096 [tokenizer]=2048 [data]=4096 [config]=4096)
# Leak checks stay on (libFuzzer checks an input whose mallocs and frees do
# not balance); LibTorch's one-time allocations have not tripped them.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:print_stacktrace=1:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# One intra-op thread: the targets are single-threaded, and the machine is shared.
export OMP_NUM_THREADS=1

run_target() {
  local name="$1" work="$build/fuzz-work/$1"
  mkdir -p "$work/corpus" "$work/crashes"
  local seeds=("$repo/tests/fuzz/corpus/$name")
  [[ -d "$repo/tests/fuzz/regressions/$name" ]] && seeds+=("$repo/tests/fuzz/regressions/$name")
  nice -n 15 "$build/bin/fuzz_$name" "$work/corpus" "${seeds[@]}" \
    -max_total_time="$seconds" -max_len="${max_len[$name]}" -timeout=120 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -dict="$repo/tests/fuzz/dict/$name.dict" \
    -artifact_prefix="$work/crashes/" -report_slow_units=100000 -print_final_stats=1 \
    >"$work/log" 2>&1 || true
}

summary() {
  local name="$1" log="$build/fuzz-work/$1/log"
  local execs cov time crashes
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  time=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 | awk '{print $5 "s"}')
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1)
  crashes=$(find "$build/fuzz-work/$name/crashes" -type f | wc -l)
  printf '%-12s ran %-6s execs=%-10s %-34s crash files=%s\n' "$name" "${time:-?}" \
    "${execs:-?}" "${cov:-?}" "$crashes"
}

status=0
pids=()
for name in "${targets[@]}"; do
  [[ -n "${max_len[$name]:-}" ]] || { echo "fuzz: unknown target '$name'" >&2; exit 2; }
  echo "fuzz: $name for ${seconds}s (log: $build/fuzz-work/$name/log)"
  run_target "$name" &
  pids+=($!)
  if ((${#pids[@]} >= parallel)); then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done

echo "fuzz: results (corpus in $build/fuzz-work/<target>/corpus)"
for name in "${targets[@]}"; do
  summary "$name"
  if grep -qE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)|runtime error:|deadly signal|invariant broken' \
      "$build/fuzz-work/$name/log"; then
    echo "  FOUND: see $build/fuzz-work/$name/log and $build/fuzz-work/$name/crashes/" >&2
    status=1
  fi
done
exit "$status"
