#!/usr/bin/env bash
# ModernBERT's element-wise chains: LibTorch op by op against ft's fused
# kernels (scripts/bench-fused.cpp), against the build in BUILD (default
# build/). Prints one table per thread count.
#   scripts/bench-fused.sh [THREADS...]     default: 1 2
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$repo/build}"
[[ -f "$build/lib/libft_core.so" ]] || { echo "bench-fused: no $build/lib/libft_core.so; run scripts/setup.sh" >&2; exit 1; }
bin="$(mktemp -d)/bench-fused"
trap 'rm -rf "$(dirname "$bin")"' EXIT
g++ -O2 -std=c++20 -o "$bin" "$repo/scripts/bench-fused.cpp" -I"$repo/core/include" -I/usr/include/torch/csrc/api/include \
  -L"$build/lib" -lft_core -ltorch -ltorch_cpu -lc10 -Wl,-rpath,"$build/lib"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(uptime)"
threads=("$@")
((${#threads[@]})) || threads=(1 2)
for n in "${threads[@]}"; do
  echo; echo "### $n thread(s), 7 000 tokens, milliseconds forward + backward (best of 5)"; echo
  OMP_NUM_THREADS="$n" "$bin"
done
