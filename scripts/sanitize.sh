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
# FT_BUILD_JOBS ninja's (default 2). Every report from any process (tests
# and the `ft` runs they start) lands in build-asan/sanitizer-reports/.
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
#
# Reports go to files (log_path), not stderr: many tests run `ft` as a child
# whose stderr only a test log sees, and some (kill trials, a bench row that
# is meant to fail) accept a failed child; a report is a failure here even
# when its test passed.
reports="$build/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=0:strict_string_checks=1:detect_stack_use_after_return=0:check_initialization_order=1:log_path=$reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
cd "$build"
# Test timeouts are 4x the normal build's (tests/CMakeLists.txt).
status=0
ctest --output-on-failure -j "${FT_TEST_JOBS:-1}" "$@" || status=$?
if [ -n "$(ls -A "$reports")" ]; then
  echo "sanitize: sanitizer reports in $reports:" >&2
  for f in "$reports"/*; do echo "== $f" >&2; head -60 "$f" >&2; done
  status=1
else
  echo "sanitize: no sanitizer report from any process"
fi
exit "$status"
