#!/usr/bin/env bash
# README command (2): set up, build and run the whole test suite.
# Tests that need ../shared (fixtures, real data) skip visibly without it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
"$repo/scripts/fetch-data.sh" "$repo/data"
cd "$repo/build"
ctest --output-on-failure -j "${FT_TEST_JOBS:-2}"
