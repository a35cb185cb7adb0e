#!/usr/bin/env bash
# ctest entry: `ft import onnx` on a real export, bge-small-zh-v1.5 as langchain4j
# ships it (scripts/fetch-bge-zh.sh), checked by scripts/check-onnx.py: on 64 Weibo
# posts and 64 IMDB reviews, ft tokenize gives the tokenizer.json's ids, and
# ft predict's and transformers' last_hidden_state on the imported directory are
# within 1e-5 of ONNX Runtime's on the .onnx file.
#
#   tests/onnx/check_onnx_ctest.sh BUILD_DIR REPO
#   ONNX_DIR=DIR tests/onnx/check_onnx_ctest.sh ...   the export elsewhere (default
#                                                     REPO/data/bge-small-zh-v1.5)
#
# The model is imported afresh into a temp directory on every run, so the
# check is of this build's importer, not of whichever ft wrote
# data/bge-small-zh-v1.5/model. Exit 77 (ctest: skipped) with one SKIPPED line
# when .venv-hf (with onnxruntime: scripts/hf-env.sh), the export or the ft
# binary is missing; check-onnx.py leaves out a missing data set with a line of
# its own, and skips when it has no text at all.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: tests/onnx/check_onnx_ctest.sh BUILD_DIR REPO" >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
repo="$(cd "$2" && pwd)"
ft="$build/bin/ft"
py="$repo/.venv-hf/bin/python"
export_dir="${ONNX_DIR:-$repo/data/bge-small-zh-v1.5}"
onnx="$export_dir/onnx/bge-small-zh-v1.5.onnx"
tokenizer="$export_dir/onnx/bge-small-zh-v1.5-tokenizer.json"

if [[ ! -x "$py" ]]; then
  echo "SKIPPED: needs .venv-hf (scripts/hf-env.sh)"
  exit 77
fi
if ! "$py" -c 'import onnxruntime, tokenizers, transformers' 2>/dev/null; then
  echo "SKIPPED: needs onnxruntime, tokenizers and transformers in .venv-hf (scripts/hf-env.sh)"
  exit 77
fi
for need in "$onnx" "$tokenizer"; do
  if [[ ! -f "$need" ]]; then
    echo "SKIPPED: needs $need (scripts/fetch-bge-zh.sh)"
    exit 77
  fi
done
if [[ ! -x "$ft" ]]; then
  echo "SKIPPED: no ft binary at $ft"
  exit 77
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ft-check-onnx.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "check_onnx_ctest: ft import onnx $onnx -> $tmp/model"
"$ft" import onnx "$onnx" --tokenizer "$tokenizer" --out "$tmp/model" >"$tmp/import.log" 2>&1 \
  || { tail -n 20 "$tmp/import.log"; echo "check_onnx_ctest: ft import onnx failed"; exit 1; }
cat "$tmp/import.log"
for f in config.json model.safetensors tokenizer.json vocab.txt tokenizer_config.json; do
  [[ -f "$tmp/model/$f" ]] || { ls -la "$tmp/model"; echo "check_onnx_ctest: the import wrote no $f"; exit 1; }
done

rc=0
"$py" "$repo/scripts/check-onnx.py" --onnx "$onnx" --tokenizer "$tokenizer" --model "$tmp/model" --ft "$ft" \
  || rc=$?
exit "$rc"
