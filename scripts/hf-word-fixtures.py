#!/usr/bin/env python3
"""Writes tests/data/hf/tokenizers/words.ids.json: the ids and word ids that
Hugging Face gives for text already split into words (transformers'
`is_split_into_words=True`, `tokenizers`' `is_pretokenized=True`), which
ft's Tokenizer::encode_words must reproduce (tests/unit/test_token_classification.cpp).

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/hf-word-fixtures.py

Tokenizers (files relative to the repository root):
  data/all-minilm-l6-v2/tokenizer.json             BERT WordPiece (scripts/fetch-data.sh)
  tests/data/hf/tokenizers/roberta-bpe.tokenizer.json  byte-level BPE, read twice: as it is
      (add_prefix_space false) and with the ByteLevel pre-tokenizer's add_prefix_space set,
      which is what transformers does for RoBERTa with add_prefix_space=True (run_ner.py's
      choice); the script checks that AutoTokenizer on the same vocabulary
      (dirs/roberta-vocab-merges, add_prefix_space=True) gives those ids
  tests/data/hf/tokenizers/modern-bpe.tokenizer.json   Split + ByteLevel(add_prefix_space)
  tests/data/hf/tokenizers/xlmr-unigram.tokenizer.json Metaspace, prepend_scheme "always"
  tests/data/hf/tokenizers/deberta-unigram.tokenizer.json  Metaspace "first" after Punctuation/Digits

Every sentence is encoded twice: whole (no truncation, no padding) and with
truncation to max_length 8 and padding to 8. Word ids of special tokens and
padding are written as -1 (None in Python). The BERT ids are checked against
AutoTokenizer as well.
"""
import json
import os
import sys

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_fixture_common import REPO  # noqa: E402

OUT = os.path.join(REPO, "tests", "data", "hf", "tokenizers", "words.ids.json")
MAX_LENGTH = 8

# Made up for the fixture: entity-like words, punctuation inside words,
# accents, CJK, inner spaces and tabs, empty words, special-token text, long words.
SENTENCES = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Jean-Baptiste", "lives", "in", "Montréal", "!"],
    ["naïve", "café", "U.S.", "e-mail", "2024-01-05"],
    ["东京", "是", "日本", "的", "首都"],
    ["  spaced ", "tab\tword", "x"],
    ["", "empty", ""],
    ["[SEP]", "<s>", "</s>", "[MASK]"],
    ["unbelievably", "antidisestablishmentarianism", "ok"],
    [],
]

TOKENIZERS = [
    {"name": "bert-wordpiece", "file": "data/all-minilm-l6-v2/tokenizer.json"},
    {"name": "roberta-bpe", "file": "tests/data/hf/tokenizers/roberta-bpe.tokenizer.json"},
    {"name": "roberta-bpe-prefix", "file": "tests/data/hf/tokenizers/roberta-bpe.tokenizer.json",
     "add_prefix_space": True},
    {"name": "modern-bpe", "file": "tests/data/hf/tokenizers/modern-bpe.tokenizer.json"},
    {"name": "xlmr-unigram", "file": "tests/data/hf/tokenizers/xlmr-unigram.tokenizer.json"},
    {"name": "deberta-unigram", "file": "tests/data/hf/tokenizers/deberta-unigram.tokenizer.json"},
]


def load(spec):
    with open(os.path.join(REPO, spec["file"]), encoding="utf-8") as f:
        state = json.load(f)
    if "add_prefix_space" in spec:
        assert state["pre_tokenizer"]["type"] == "ByteLevel"
        state["pre_tokenizer"]["add_prefix_space"] = spec["add_prefix_space"]
    tok = Tokenizer.from_str(json.dumps(state))
    tok.no_truncation()
    tok.no_padding()
    return tok


def pad_id(tok):
    for name in ("<pad>", "[PAD]"):
        if tok.token_to_id(name) is not None:
            return tok.token_to_id(name), name
    raise SystemExit("no padding token")


def encode_all(tok, max_length):
    out = {"max_length": max_length, "input_ids": [], "word_ids": [], "token_type_ids": []}
    if max_length:
        tok.enable_truncation(max_length=max_length)
        pid, ptok = pad_id(tok)
        tok.enable_padding(length=max_length, pad_id=pid, pad_token=ptok)
    for words in SENTENCES:
        e = tok.encode(words, is_pretokenized=True)
        out["input_ids"].append(e.ids)
        out["word_ids"].append([-1 if w is None else w for w in e.word_ids])
        out["token_type_ids"].append(e.type_ids)
    tok.no_truncation()
    tok.no_padding()
    return out


def check_transformers(name, cases):
    """The same ids through transformers, where it reads the vocabulary itself."""
    from transformers import AutoTokenizer
    if name == "bert-wordpiece":
        auto = AutoTokenizer.from_pretrained(os.path.join(REPO, "data", "all-minilm-l6-v2"))
    elif name == "roberta-bpe-prefix":
        auto = AutoTokenizer.from_pretrained(
            os.path.join(REPO, "tests", "data", "hf", "tokenizers", "dirs", "roberta-vocab-merges"),
            add_prefix_space=True)
    else:
        return False
    whole = cases[0]
    for k, words in enumerate(SENTENCES):
        enc = auto(words, is_split_into_words=True)
        word_ids = [-1 if w is None else w for w in enc.word_ids()]
        if enc["input_ids"] != whole["input_ids"][k] or word_ids != whole["word_ids"][k]:
            raise SystemExit(f"{name}: transformers disagrees on sentence {k}: {enc['input_ids']}")
    return True


def main():
    import transformers
    fixture = {
        "what": "ids and word ids of pre-split words (is_pretokenized=True), scripts/hf-word-fixtures.py",
        "versions": {"python": sys.version.split()[0], "tokenizers": tokenizers.__version__,
                     "transformers": transformers.__version__},
        "sentences": SENTENCES,
        "tokenizers": [],
    }
    for spec in TOKENIZERS:
        tok = load(spec)
        cases = [encode_all(tok, 0), encode_all(tok, MAX_LENGTH)]
        entry = dict(spec)
        entry["checked_with_transformers"] = check_transformers(spec["name"], cases)
        entry["cases"] = cases
        fixture["tokenizers"].append(entry)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", os.path.relpath(OUT, REPO))


if __name__ == "__main__":
    main()
