#!/usr/bin/env python3
"""Writes the tokenizer.json fixtures under tests/data/hf/tokenizers/.

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/hf-tokenizer-fixtures.py           # ids of the committed files
    .venv-hf/bin/python scripts/hf-tokenizer-fixtures.py --derive  # first rebuild the variants
    .venv-hf/bin/python scripts/hf-tokenizer-fixtures.py --train   # first train everything anew

Inputs (no text is copied into the output, only token ids):
  data/imdb/train.jsonl                    50 000 rows, the first 25 000 are label 0
  ../shared/data/weibo-emotion/train.json  a JSON list of [text, label_id]

Outputs (tests/data/hf/README.md, "tokenizers/", describes each):
  NAME.tokenizer.json  a tokenizer.json (written only with --train)
  NAME.ids.json        the ids `tokenizers` gives on IMDB and Weibo texts, singles and
                       pairs, max_length 128 and 32, truncation longest_first, padded

No PyPI or npm package ships a small RoBERTa- or XLM-R-style tokenizer.json (the
real ones are 0.5-17 MB), so the files are trained here with `tokenizers` on
IMDB and Weibo rows that the fixtures do not use. Training is deterministic for
BPE but not guaranteed for Unigram (its EM runs in parallel), which is why the
trained files are committed and a plain run only recomputes the ids from them.
"""
import argparse
import base64
import json
import os
import sys

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
from tokenizers import (  # noqa: E402
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_fixture_common import (  # noqa: E402
    IMDB, IMDB_REL, IMDB_ROWS, REPO, WEIBO, WEIBO_REL, WEIBO_ROWS, sha256_file, sha256_text)

# The training text: rows no fixture reads.
TRAIN_IMDB = list(range(5000, 7000)) + list(range(30000, 32000))
TRAIN_WEIBO_FROM = 1000
TRAIN_WEIBO_COUNT = 6000
VOCAB = 5000
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def versions():
    return {"python": sys.version.split()[0], "tokenizers": tokenizers.__version__}


def read_imdb():
    with open(IMDB, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def read_weibo():
    with open(WEIBO, encoding="utf-8") as f:
        return [r[0] for r in json.load(f)]


def training_text(imdb, weibo):
    return [imdb[i] for i in TRAIN_IMDB] + weibo[TRAIN_WEIBO_FROM:TRAIN_WEIBO_FROM + TRAIN_WEIBO_COUNT]


def roberta_specials():
    return ["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True, normalized=False)]


def train_byte_bpe(text):
    """RoBERTa's layout: byte-level BPE, no normalizer, <s> A </s></s> B </s>."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=roberta_specials(),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tok


def modern_bpe(roberta):
    """The same merges under a ModernBERT-like pipeline: NFC, GPT-2's regex as a
    Split, ByteLevel without its own regex, ignore_merges, a template with type
    ids, and added tokens that single_word / rstrip / normalized apply to."""
    tok = Tokenizer.from_str(roberta.to_str())
    state = json.loads(tok.to_str())
    state["model"]["ignore_merges"] = True
    tok = Tokenizer.from_str(json.dumps(state))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
    ])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                      special_tokens=[("<s>", 0), ("</s>", 2)]),
    ])
    tok.add_tokens([AddedToken("...", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("great movie", single_word=True, normalized=True)])
    return tok


def train_char_bpe(text):
    """A classic BPE: lower-cased, accents stripped, Whitespace words, '##'
    continuations and a '</w>' suffix, an unknown token for the characters the
    small alphabet leaves out, BERT's [CLS] A [SEP] B [SEP]."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>",
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, limit_alphabet=300,
                                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>", show_progress=False)
    tok.train_from_iterator(text, trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return tok


def train_unigram(text):
    """XLM-R's layout with NFKC in place of SentencePiece's precompiled charsmap:
    runs of spaces folded, Metaspace always prepending, Unigram with <unk>,
    <mask> appended after the pieces, <s> A </s></s> B </s> as a template."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>", max_piece_length=16, show_progress=False)
    tok.train_from_iterator(text, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def precompiled_unigram(xlmr, charsmap):
    """XLM-R's own normalizer: SentencePiece's compiled nmt_nfkc map (what
    XLMRobertaTokenizerFast's converter writes), then runs of spaces folded."""
    state = json.loads(xlmr.to_str())
    state["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    return Tokenizer.from_str(json.dumps(state))


def committed_charsmap(out):
    state = json.load(open(os.path.join(out, "xlmr-precompiled.tokenizer.json"), encoding="utf-8"))
    return base64.b64decode(state["normalizer"]["normalizers"][0]["precompiled_charsmap"])


def deberta_unigram(xlmr):
    """The same pieces under a DeBERTa-v3-like pipeline: Strip and accents off,
    punctuation and digits split, Metaspace prepending only at the start of the
    input, byte_fallback over 256 <0xNN> pieces, [CLS]-style type ids."""
    state = json.loads(xlmr.to_str())
    pieces = state["model"]["vocab"]
    low = min(score for _, score in pieces)
    pieces.extend([f"<0x{b:02X}>", low - 1.0] for b in range(256))
    state["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(state))
    tok.normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.NFD(), normalizers.StripAccents(),
                                           normalizers.Replace("``", '"')])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True),
    ])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def train_all(out, imdb, weibo):
    text = training_text(imdb, weibo)
    save(out, {"roberta-bpe": train_byte_bpe(text), "wordend-bpe": train_char_bpe(text),
               "xlmr-unigram": train_unigram(text)})


def derive_all(out, charsmap):
    """The variants, from the trained files as committed."""
    def load(name):
        return Tokenizer.from_file(os.path.join(out, f"{name}.tokenizer.json"))
    save(out, {"modern-bpe": modern_bpe(load("roberta-bpe")), "deberta-unigram": deberta_unigram(load("xlmr-unigram")),
               "xlmr-precompiled": precompiled_unigram(load("xlmr-unigram"), charsmap)})


def save(out, made):
    for name, tok in made.items():
        path = os.path.join(out, f"{name}.tokenizer.json")
        tok.save(path, pretty=False)
        print(f"{name}: {os.path.getsize(path)} bytes, vocab {tok.get_vocab_size()}")


def pad_token(tok):
    for name in ("<pad>", "[PAD]"):
        if tok.token_to_id(name) is not None:
            return name, tok.token_to_id(name)
    raise SystemExit("no padding token")


def make_ids(out, name, imdb, weibo):
    path = os.path.join(out, f"{name}.tokenizer.json")
    tok = Tokenizer.from_file(path)
    pad, pad_id = pad_token(tok)
    sources = [
        {"name": "imdb", "file": IMDB_REL, "path": IMDB, "format": "jsonl", "text_field": "text",
         "rows": IMDB_ROWS, "texts": imdb},
        {"name": "weibo", "file": WEIBO_REL, "path": WEIBO, "format": "json_list", "text_index": 0,
         "rows": WEIBO_ROWS, "texts": weibo},
    ]
    doc = {
        "what": f"ids of tokenizers.Tokenizer.from_file('{name}.tokenizer.json'): special tokens added, "
                "truncation longest_first to max_length, padded to max_length with the pad token; "
                "attention_mask and token_type_ids as strings of digits, one per position",
        "tokenizer": f"{name}.tokenizer.json",
        "tokenizer_sha256": sha256_file(path),
        "pad": pad,
        "versions": versions(),
        "sources": [],
    }
    for src in sources:
        texts = [src["texts"][i] for i in src["rows"]]
        entry = {k: src[k] for k in ("name", "file", "format", "text_field", "text_index", "rows") if k in src}
        entry["file_sha256"] = sha256_file(src["path"])
        entry["text_sha256"] = [sha256_text(t) for t in texts]
        entry["cases"] = []
        for pair in (False, True):
            for max_length in (128, 32):
                tok.enable_truncation(max_length, strategy="longest_first")
                tok.enable_padding(length=max_length, pad_id=pad_id, pad_token=pad)
                case = {"max_length": max_length, "pair": pair, "input_ids": [], "attention_mask": [],
                        "token_type_ids": []}
                # Pair k is (texts[k], texts[k + 1]): neighbours in `rows`.
                for k in range(len(texts) - 1 if pair else len(texts)):
                    enc = tok.encode(texts[k], texts[k + 1]) if pair else tok.encode(texts[k])
                    case["input_ids"].append(list(enc.ids))
                    case["attention_mask"].append("".join(str(v) for v in enc.attention_mask))
                    case["token_type_ids"].append("".join(str(v) for v in enc.type_ids))
                entry["cases"].append(case)
        doc["sources"].append(entry)
    ids_path = os.path.join(out, f"{name}.ids.json")
    with open(ids_path, "w", encoding="utf-8") as f:
        # One example per line so that diffs stay readable.
        head = {k: v for k, v in doc.items() if k != "sources"}
        f.write(json.dumps(head, sort_keys=True)[:-1] + ',\n"sources":[\n')
        for si, entry in enumerate(doc["sources"]):
            f.write(json.dumps({k: v for k, v in entry.items() if k != "cases"}, separators=(",", ":"))[:-1])
            f.write(',"cases":[\n')
            for ci, case in enumerate(entry["cases"]):
                f.write(f'{{"max_length":{case["max_length"]},"pair":{json.dumps(case["pair"])}')
                for key in ("input_ids", "attention_mask", "token_type_ids"):
                    rows = [json.dumps(r, separators=(",", ":")) for r in case[key]]
                    f.write(f',\n"{key}":[\n' + ",\n".join(rows) + "]")
                f.write("}" + (",\n" if ci + 1 < len(entry["cases"]) else "]}"))
            f.write(",\n" if si + 1 < len(doc["sources"]) else "\n")
        f.write("]}\n")
    with open(ids_path, encoding="utf-8") as f:
        if json.load(f) != json.loads(json.dumps(doc)):
            raise SystemExit(f"{ids_path}: written JSON does not read back")
    compared = sum(len(r) for e in doc["sources"] for c in e["cases"] for r in c["input_ids"])
    print(f"{name}: {compared} ids per array")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "hf", "tokenizers"))
    ap.add_argument("--train", action="store_true", help="train the tokenizer.json files anew first")
    ap.add_argument("--derive", action="store_true", help="rebuild the variants from the trained files first")
    ap.add_argument("--charsmap", help="SentencePiece's nmt_nfkc precompiled_charsmap (raw bytes) for "
                    "xlmr-precompiled; default: the one the committed file carries")
    args = ap.parse_args()
    for path in (IMDB, WEIBO):
        if not os.path.exists(path):
            raise SystemExit(f"missing {path} (scripts/fetch-data.sh, ../shared)")
    os.makedirs(args.out, exist_ok=True)
    imdb, weibo = read_imdb(), read_weibo()
    if args.train:
        train_all(args.out, imdb, weibo)
    if args.train or args.derive:
        if args.charsmap:
            with open(args.charsmap, "rb") as f:
                charsmap = f.read()
        else:
            charsmap = committed_charsmap(args.out)
        derive_all(args.out, charsmap)
    names = sorted(f[: -len(".tokenizer.json")] for f in os.listdir(args.out) if f.endswith(".tokenizer.json"))
    for name in names:
        make_ids(args.out, name, imdb, weibo)


if __name__ == "__main__":
    main()
