#!/usr/bin/env bash
# Builds ft with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DFT_SANITIZE=ON, the default compiler) in build-asan/ and runs the ctest
# suite under it; see docs/hardening.md for the last results.
#
#   scripts/sanitize.sh                    build all, run every test
#   scripts/sanitize.sh -R 'tokenizer|data' extra arguments go to ctest
#
# Any sanitizer report fails the test that triggered it (halt_on_error).
# Slow (a full instrumented build plus the suite at 2-3x its normal time),
# so CI does not run it. FT_TEST_JOBS sets ctest's -j (default 1),
# FT_BUILD_JOBS ninja's (default 2).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FT_ASAN_BUILD:-$repo/build-asan}"
export CCACHE_BASEDIR="$repo"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFT_SANITIZE=ON >/dev/null
nice -n 15 ninja -C "$build" -j "${FT_BUILD_JOBS:-2}"

# detect_leaks=0: LibTorch, Gloo and OpenBLAS are not instrumented and keep
# one-time allocations (thread pools, op registries) alive until exit, which
# LeakSanitizer reports as leaks we cannot fix; ft's own objects are RAII.
# Child processes (the `ft` runs and ranks the tests start) inherit these.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=0:strict_string_checks=1:detect_stack_use_after_return=0:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
cd "$build"
ctest --output-on-failure -j "${FT_TEST_JOBS:-1}" "$@"
