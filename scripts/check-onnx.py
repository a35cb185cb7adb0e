#!/usr/bin/env python3
"""Checks `ft import onnx` on a real export: the model directory it wrote
must tokenise as the export's tokenizer.json does and compute the hidden
states ONNX Runtime computes on the .onnx file, in ft and in transformers.

    .venv-hf/bin/python scripts/check-onnx.py --onnx FILE --tokenizer FILE --model DIR [--ft FT]

tests/onnx/check_onnx_ctest.sh runs it on bge-small-zh-v1.5
(scripts/fetch-bge-zh.sh). Texts: the first 64 Weibo posts
(../shared/data/weibo-emotion/train.json, spaces removed as its README says)
and the first 64 IMDB reviews (data/imdb/train.jsonl), each run alone, cut
at 128 tokens. Newlines and tabs become spaces: ft reads one text per line,
and `ft tokenize` reads a tab as the start of a pair.

Exit 0 when every comparison is within --tolerance, 1 otherwise, 77 (with a
SKIPPED line) when there is no text to check.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModel  # noqa: E402

# The missing pooler (the export has none) is expected; only errors are news.
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_fixture_common import IMDB, REPO, WEIBO  # noqa: E402


def say(msg):
    print(f"check-onnx: {msg}", flush=True)


def one_line(text):
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")


def load_texts(rows):
    """(source, text) pairs; sources missing on this machine are reported and left out."""
    texts = []
    if os.path.isfile(WEIBO):
        with open(WEIBO, encoding="utf-8") as f:
            texts += [("weibo", r[0].replace(" ", "")) for r in json.load(f)[:rows]]
    else:
        say(f"SKIPPED the Weibo posts: no {os.path.relpath(WEIBO, REPO)}")
    if os.path.isfile(IMDB):
        with open(IMDB, encoding="utf-8") as f:
            texts += [("imdb", json.loads(line)["text"]) for line in itertools.islice(f, rows)]
    else:
        say(f"SKIPPED the IMDB reviews: no {os.path.relpath(IMDB, REPO)} (scripts/fetch-data.sh)")
    # ft predict drops empty lines: an empty text would shift every answer after it.
    texts = [(s, one_line(t)) for s, t in texts]
    return [(s, t) for s, t in texts if t.strip()]


def ft_lines(cmd, texts):
    """ft's JSON Lines for the texts on stdin, via files: predict's output
    for 128 texts is ~100 MB of JSON, read back one line at a time."""
    with tempfile.TemporaryDirectory(prefix="check-onnx.") as tmp:
        src, dst = os.path.join(tmp, "in.txt"), os.path.join(tmp, "out.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in texts))
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            run = subprocess.run(cmd, stdin=fin, stdout=fout, stderr=subprocess.PIPE)
        if run.returncode != 0:
            err = run.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise SystemExit(f"check-onnx: {' '.join(cmd)} exited {run.returncode}: " + " | ".join(err))
        # Split at "\n" only: the JSON keeps U+2028 and friends raw, which splitlines() would split at.
        with open(dst, encoding="utf-8", newline="") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


class Worst:
    """The largest |a - b| over every token of every text, and where it was."""

    def __init__(self, name):
        self.name, self.diff, self.where, self.texts, self.tokens, self.bad = name, 0.0, "", 0, 0, []
        self.scale = 0.0  # the largest |b|: how absolute the tolerance is

    def add(self, label, a, b):
        if a.shape != b.shape:
            self.bad.append(f"{label}: shape {list(a.shape)} vs {list(b.shape)}")
            return
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        self.texts += 1
        self.tokens += a.shape[0]
        self.scale = max(self.scale, float(np.abs(b).max()))
        if d.max() > self.diff:
            self.diff = float(d.max())
            self.where = f"{label}, token {int(np.unravel_index(d.argmax(), d.shape)[0])}"

    def report(self, tolerance):
        ok = not self.bad and self.texts > 0 and self.diff <= tolerance
        say(f"{self.name}: max |diff| {self.diff:.3g} over {self.texts} texts, {self.tokens} tokens "
            f"(tolerance {tolerance:g}, values up to {self.scale:.3g}; worst at {self.where or '-'}): "
            f"{'ok' if ok else 'FAILED'}")
        for b in self.bad[:5]:
            say(f"  {b}")
        return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx", required=True, help="the exported .onnx file")
    ap.add_argument("--tokenizer", required=True, help="the export's tokenizer.json")
    ap.add_argument("--model", required=True, help="the directory `ft import onnx` wrote")
    ap.add_argument("--ft", default=os.environ.get("FT", os.path.join(REPO, "build", "bin", "ft")))
    ap.add_argument("--rows", type=int, default=64, help="texts taken from each data set")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--tolerance", type=float, default=1e-5)
    args = ap.parse_args()

    sourced = load_texts(args.rows)
    if not sourced:
        print("SKIPPED: no texts (neither the Weibo posts nor data/imdb/train.jsonl)")
        return 77
    # "weibo #3": the fourth Weibo text checked, for the reports.
    labels = [f"{s} #{sum(x == s for x, _ in sourced[:i])}" for i, (s, _) in enumerate(sourced)]
    texts = [t for _, t in sourced]
    say(f"{len(texts)} texts ({sum(s == 'weibo' for s, _ in sourced)} Weibo, "
        f"{sum(s == 'imdb' for s, _ in sourced)} IMDB), each alone, at most {args.max_length} tokens")

    tok = Tokenizer.from_file(args.tokenizer)
    tok.enable_truncation(max_length=args.max_length)
    encs = [tok.encode(t) for t in texts]
    ft_ids = [r["input_ids"] for r in ft_lines([args.ft, "tokenize", "--model", args.model,
                                               "--max-length", str(args.max_length)], texts)]
    same = [i for i, e in enumerate(encs) if i < len(ft_ids) and ft_ids[i] == e.ids]
    ok = len(ft_ids) == len(texts) and len(same) == len(texts)
    say(f"token ids, ft tokenize vs tokenizers: {len(same)}/{len(texts)} texts equal "
        f"({sum(len(e.ids) for e in encs)} tokens; ft gave {len(ft_ids)} lines): {'ok' if ok else 'FAILED'}")
    for i in [i for i in range(len(texts)) if i not in set(same)][:5]:
        got = ft_ids[i] if i < len(ft_ids) else None
        say(f"  {labels[i]}: tokenizers {encs[i].ids[:16]}..., ft {got[:16] if got else got}...")

    # ONNX Runtime on the export: the reference.
    sess = ort.InferenceSession(args.onnx, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    refs = []
    for e in encs:
        ids = np.array([e.ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.array([e.attention_mask], dtype=np.int64),
                 "token_type_ids": np.array([e.type_ids], dtype=np.int64)}
        refs.append(sess.run(["last_hidden_state"], {k: v for k, v in feeds.items() if k in names})[0][0])

    ft_vs = Worst("ft predict vs ONNX Runtime")
    cmd = [args.ft, "predict", "--checkpoint", args.model, "--task", "feature-extraction",
           "--max-length", str(args.max_length)]
    n = 0
    for i, row in enumerate(ft_lines(cmd, texts)):
        n += 1
        if i >= len(texts) or row.get("text") != texts[i]:
            ft_vs.bad.append(f"answer {i + 1} is for another text: {str(row.get('text'))[:40]!r}")
            continue
        ft_vs.add(labels[i], np.array(row["last_hidden_state"], dtype=np.float64), refs[i])
    if n != len(texts):
        ft_vs.bad.append(f"ft predict answered {n} of {len(texts)} texts")

    hf_vs = Worst("transformers vs ONNX Runtime")
    model = AutoModel.from_pretrained(args.model, dtype=torch.float32).eval()
    with torch.no_grad():
        for i, e in enumerate(encs):
            out = model(input_ids=torch.tensor([e.ids]), attention_mask=torch.tensor([e.attention_mask]),
                        token_type_ids=torch.tensor([e.type_ids])).last_hidden_state[0].numpy()
            hf_vs.add(labels[i], out, refs[i])

    ok = ft_vs.report(args.tolerance) and ok
    ok = hf_vs.report(args.tolerance) and ok
    say("PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
