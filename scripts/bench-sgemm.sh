#!/usr/bin/env bash
# Which sgemm serves ft's fp32 products faster on this machine: OpenBLAS (the
# libblas.so.3 alternative) or oneDNN. Prints one table per thread count.
#   scripts/bench-sgemm.sh [THREADS...]     default: 1 2
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$(mktemp -d)/bench-sgemm"
trap 'rm -rf "$(dirname "$bin")"' EXIT
g++ -O2 -fopenmp -o "$bin" "$repo/scripts/bench-sgemm.cpp" -ldnnl -ldl /usr/lib/x86_64-linux-gnu/libblas.so.3
echo "BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(uptime)"
threads=("$@")
((${#threads[@]})) || threads=(1 2)
for t in "${threads[@]}"; do
  echo; echo "### $t thread(s)"; echo
  OMP_NUM_THREADS="$t" "$bin"
done
