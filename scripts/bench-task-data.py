#!/usr/bin/env python3
"""Writes bench-out/tasks/{single,multi,tokens}.jsonl: the same first N IMDB
reviews (data/imdb/train.jsonl, scripts/fetch-data.sh) as a single-label, a
multi-label and a token-classification training file, so that the three
tasks can be timed on the same rows (docs/benchmarks.md, "Tasks"):

    python3 scripts/bench-task-data.py [N]
    ROWS="single ddp" DATA=bench-out/tasks/single.jsonl scripts/bench-ab.sh \\
      single=build/bin/ft:set.data.train=bench-out/tasks/single.jsonl \\
      multi=build/bin/ft:set.data.train=bench-out/tasks/multi.jsonl \\
      token=build/bin/ft:set.data.train=bench-out/tasks/tokens.jsonl:set.task=token-classification

Labels by fixed rules (the timing does not depend on them): single the IMDB
label; multi-label "positive", "long" (> 1000 characters), "acting" (act,
acting, actor(s), actress as a word), as scripts/hf-task-fixtures.py; tags
CAP for a run of capitalised words not starting a sentence and NUM for
digits, IOB2, on the review's words and punctuation marks.
Standard library only.
"""
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACTING = re.compile(r"\b(act|acting|actor|actors|actress)\b", re.IGNORECASE)
WORD = re.compile(r"\w+|[^\w\s]")


def tags_of(words):
    tags, prev = [], None
    for i, w in enumerate(words):
        sentence_start = i == 0 or words[i - 1] in (".", "!", "?")
        kind = "NUM" if w.isdigit() else "CAP" if w[:1].isupper() and not sentence_start else None
        tags.append("O" if kind is None else ("I-" if prev == kind else "B-") + kind)
        prev = kind
    return tags


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    rows = []
    with open(os.path.join(REPO, "data/imdb/train.jsonl"), encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if len(rows) == n:
                break
    out = os.path.join(REPO, "bench-out/tasks")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "single.jsonl"), "w", encoding="utf-8") as s, \
            open(os.path.join(out, "multi.jsonl"), "w", encoding="utf-8") as m, \
            open(os.path.join(out, "tokens.jsonl"), "w", encoding="utf-8") as t:
        for r in rows:
            text, label = r["text"], r["label"]
            s.write(json.dumps({"text": text, "label": label}) + "\n")
            labels = [name for name, keep in (("positive", label in (1, "1", "pos")), ("long", len(text) > 1000),
                                              ("acting", ACTING.search(text) is not None)) if keep]
            m.write(json.dumps({"text": text, "label": labels}) + "\n")
            words = WORD.findall(text)
            t.write(json.dumps({"tokens": words, "ner_tags": tags_of(words)}) + "\n")
    print(f"bench-task-data: {len(rows)} rows -> {out}/{{single,multi,tokens}}.jsonl")


if __name__ == "__main__":
    main()
