"""What the Hugging Face fixture scripts (hf-fixtures.py, hf-tokenizer-fixtures.py,
hf-family-, hf-task- and hf-token-fixtures.py) share: where the data lies and how a
file or text is fingerprinted. Imports nothing heavy, so the tokenizer script runs
without torch."""
import hashlib
import importlib.util
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMDB = os.path.join(REPO, "data", "imdb", "train.jsonl")
WEIBO = os.path.join(os.path.dirname(REPO), "shared", "data", "weibo-emotion", "train.json")
# Paths as they are written into the fixtures: relative to the repository root.
IMDB_REL = "data/imdb/train.jsonl"
WEIBO_REL = "../shared/data/weibo-emotion/train.json"

# The texts of the ids fixtures: 32 negative and 32 positive reviews, and the first 64 posts.
IMDB_ROWS = list(range(0, 32)) + list(range(25000, 25032))
WEIBO_ROWS = list(range(0, 64))


def load_script(filename):
    """A sibling script whose name has hyphens (hf-family-fixtures.py), as a module."""
    name = filename.removesuffix(".py").replace("-", "_")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), filename)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def one_key(meta):
    """safetensors keeps metadata in a hash map whose order varies from run to
    run: one key holding sorted JSON keeps the file's bytes reproducible."""
    return {"fixture": json.dumps(meta, sort_keys=True)}


def read_imdb(path=None):
    """(text, label) of every row of IMDB's train.jsonl (`path`, default IMDB), checked to be sorted by label."""
    path = path or IMDB
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            rows.append((obj["text"], int(obj["label"])))
    if len(rows) != 50000 or rows[24999][1] != 0 or rows[25000][1] != 1:
        raise SystemExit(f"{path}: expected 50 000 rows sorted by label")
    return rows


def read_weibo():
    """(text, label_id) of every Weibo post."""
    with open(WEIBO, encoding="utf-8") as f:
        return [(r[0], int(r[1])) for r in json.load(f)]
