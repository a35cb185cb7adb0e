#!/usr/bin/env bash
# ctest entry: `ft export --onnx` on every committed model fixture, run in
# ONNX Runtime and compared with transformers' / sentence-transformers' outputs
# (scripts/check-onnx-export.py). Exit 77 (ctest: skipped) with one SKIPPED
# line when .venv-hf (with onnx and onnxruntime: scripts/hf-env.sh) or the ft
# binary is missing, as in CI.
#
#   tests/onnx/check_onnx_export_ctest.sh BUILD_DIR REPO
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: tests/onnx/check_onnx_export_ctest.sh BUILD_DIR REPO" >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
repo="$(cd "$2" && pwd)"
ft="$build/bin/ft"
py="$repo/.venv-hf/bin/python"
if [[ ! -x "$py" ]]; then
  echo "SKIPPED: needs .venv-hf (scripts/hf-env.sh)"
  exit 77
fi
if ! "$py" -c 'import onnx, onnxruntime, transformers, safetensors' 2>/dev/null; then
  echo "SKIPPED: needs onnx, onnxruntime and transformers in .venv-hf (scripts/hf-env.sh)"
  exit 77
fi
if [[ ! -x "$ft" ]]; then
  echo "SKIPPED: no ft binary at $ft"
  exit 77
fi
exec "$py" "$repo/scripts/check-onnx-export.py" --ft "$ft"
