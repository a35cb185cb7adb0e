#!/usr/bin/env bash
# README command (2): set up, build and run the whole test suite.
# Tests that need ../shared (fixtures, real data) skip visibly without it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
"$repo/scripts/fetch-data.sh" "$repo/data"
cd "$repo/build"
status=0
ctest --output-on-failure -j "${FT_TEST_JOBS:-2}" || status=$?
if [ "$status" -ne 0 ]; then
  # CI keeps only the tail of this output: repeat the failed checks last.
  echo "--- failed checks (build/Testing/Temporary/LastTest.log) ---"
  grep -E -A4 "ERROR: |FATAL ERROR|^test [a-z_]+ +\*\*\*" Testing/Temporary/LastTest.log | cut -c1-400 | tail -n 80 || true
fi
exit "$status"
