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
  dirs/NAME/           a model directory without tokenizer.json (SentencePiece model or
                       vocab.json + merges.txt; written only with --train or --dirs)
  dirs/NAME.ids.json   the ids AutoTokenizer.from_pretrained gives for it (transformers
                       converts it on load), same texts and cases

    .venv-hf/bin/python scripts/hf-tokenizer-fixtures.py --dirs    # first rebuild dirs/ (and deberta-v3-hf5)

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
import shutil
import sys
import tempfile

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


def versions(converted=False):
    out = {"python": sys.version.split()[0], "tokenizers": tokenizers.__version__}
    if converted:  # transformers reads the directory, with these to parse a SentencePiece model
        import google.protobuf
        import sentencepiece
        import transformers
        out.update(transformers=transformers.__version__, sentencepiece=sentencepiece.__version__,
                   protobuf=google.protobuf.__version__)
    return out


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


# The model directories (dirs/NAME) and how each is laid out; "camembert-spm"
# is not committed as files of its own: it is xlmr-spm's model under CamemBERT's
# config, assembled where it is needed (here and in the C++ test).
SPM_DIRS = {
    "deberta-v3-spm": {"file": "spm.model", "config": {"model_type": "deberta-v2"},
                       "tokenizer_config": {"do_lower_case": False, "vocab_type": "spm"}},
    "xlmr-spm": {"file": "sentencepiece.bpe.model", "config": {"model_type": "xlm-roberta"},
                 "tokenizer_config": {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": 512}},
}
CAMEMBERT = ("camembert-spm", "xlmr-spm", {"model_type": "camembert"})


def train_spm(text, path, **kw):
    """A small SentencePiece unigram model with the nmt_nfkc rule (its
    precompiled character map is most of the file), as the real ones have."""
    import sentencepiece as spm
    prefix = path[: -len(".model")] + "-train"
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_prefix=prefix, vocab_size=2000,
                                   model_type="unigram", character_coverage=0.995, num_threads=1,
                                   normalization_rule_name="nmt_nfkc", minloglevel=2, **kw)
    os.replace(prefix + ".model", path)
    os.remove(prefix + ".vocab")


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def make_dirs(out, imdb, weibo):
    """dirs/: DeBERTa-v3's layout ([PAD] [CLS] [SEP] [UNK] first, as its spm.model
    has them), XLM-R's (SentencePiece's <unk> <s> </s>), RoBERTa's vocab.json +
    merges.txt from roberta-bpe, and deberta-v3-hf5.tokenizer.json: what
    transformers 5 saves for the DeBERTa directory."""
    from transformers import AutoTokenizer
    text = training_text(imdb, weibo)
    layouts = {"deberta-v3-spm": dict(pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]", eos_id=2,
                                      eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]"),
               "xlmr-spm": {}}
    for name, spec in SPM_DIRS.items():
        d = os.path.join(out, "dirs", name)
        os.makedirs(d, exist_ok=True)
        train_spm(text, os.path.join(d, spec["file"]), **layouts[name])
        write_json(os.path.join(d, "config.json"), spec["config"])
        write_json(os.path.join(d, "tokenizer_config.json"), spec["tokenizer_config"])
    state = json.load(open(os.path.join(out, "roberta-bpe.tokenizer.json"), encoding="utf-8"))
    d = os.path.join(out, "dirs", "roberta-vocab-merges")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(state["model"]["vocab"], f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in state["model"]["merges"]:
            f.write((m if isinstance(m, str) else " ".join(m)) + "\n")
    write_json(os.path.join(d, "config.json"), {"model_type": "roberta"})
    write_json(os.path.join(d, "tokenizer_config.json"), {"tokenizer_class": "RobertaTokenizer",
                                                          "add_prefix_space": False, "trim_offsets": True,
                                                          "model_max_length": 512})
    with tempfile.TemporaryDirectory() as tmp:
        AutoTokenizer.from_pretrained(os.path.join(out, "dirs", "deberta-v3-spm")).save_pretrained(tmp)
        saved = json.load(open(os.path.join(tmp, "tokenizer.json"), encoding="utf-8"))
        first = saved["normalizer"]["normalizers"][0]
        if first != {"type": "Replace", "pattern": {"Regex": r"\s{2,}|[\n\r\t]"}, "content": " "}:
            raise SystemExit(f"transformers no longer writes the DeBERTa Replace normalizer: {first}")
        shutil.copy(os.path.join(tmp, "tokenizer.json"), os.path.join(out, "deberta-v3-hf5.tokenizer.json"))


def dir_path(out, name, tmp):
    """The directory of dirs/NAME; CamemBERT's is assembled in `tmp`."""
    if name != CAMEMBERT[0]:
        return os.path.join(out, "dirs", name)
    src = SPM_DIRS[CAMEMBERT[1]]
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(out, "dirs", CAMEMBERT[1], src["file"]), os.path.join(d, src["file"]))
    write_json(os.path.join(d, "config.json"), CAMEMBERT[2])
    return d


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


def file_encoder(path):
    """tokenizers.Tokenizer.from_file: (encode(text, pair, max_length), pad token)."""
    tok = Tokenizer.from_file(path)
    pad, pad_id = pad_token(tok)

    def encode(a, b, max_length):
        tok.enable_truncation(max_length, strategy="longest_first")
        tok.enable_padding(length=max_length, pad_id=pad_id, pad_token=pad)
        enc = tok.encode(a, b) if b is not None else tok.encode(a)
        return list(enc.ids), list(enc.attention_mask), list(enc.type_ids)
    return encode, pad


def auto_encoder(path):
    """transformers' AutoTokenizer.from_pretrained(directory), called as a
    Trainer data collator would: truncation longest_first, padded to max_length."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)

    def encode(a, b, max_length):
        enc = tok(a, b, max_length=max_length, truncation="longest_first", padding="max_length",
                  return_token_type_ids=True, return_attention_mask=True)
        return enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]
    return encode, tok.pad_token


def make_ids(out, name, imdb, weibo, directory=None):
    if directory is None:
        path = os.path.join(out, f"{name}.tokenizer.json")
        encode, pad = file_encoder(path)
        what = f"ids of tokenizers.Tokenizer.from_file('{name}.tokenizer.json')"
        fingerprint = {"tokenizer": f"{name}.tokenizer.json", "tokenizer_sha256": sha256_file(path)}
        ids_path = os.path.join(out, f"{name}.ids.json")
    else:
        encode, pad = auto_encoder(directory)
        what = f"ids of transformers.AutoTokenizer.from_pretrained('dirs/{name}')"
        files = sorted(os.listdir(directory))
        fingerprint = {"tokenizer": f"dirs/{name}", "files_sha256": {f: sha256_file(os.path.join(directory, f))
                                                                    for f in files}}
        ids_path = os.path.join(out, "dirs", f"{name}.ids.json")
    sources = [
        {"name": "imdb", "file": IMDB_REL, "path": IMDB, "format": "jsonl", "text_field": "text",
         "rows": IMDB_ROWS, "texts": imdb},
        {"name": "weibo", "file": WEIBO_REL, "path": WEIBO, "format": "json_list", "text_index": 0,
         "rows": WEIBO_ROWS, "texts": weibo},
    ]
    doc = {
        "what": f"{what}: special tokens added, "
                "truncation longest_first to max_length, padded to max_length with the pad token; "
                "attention_mask and token_type_ids as strings of digits, one per position",
        **fingerprint,
        "pad": pad,
        "versions": versions(converted=directory is not None),
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
                case = {"max_length": max_length, "pair": pair, "input_ids": [], "attention_mask": [],
                        "token_type_ids": []}
                # Pair k is (texts[k], texts[k + 1]): neighbours in `rows`.
                for k in range(len(texts) - 1 if pair else len(texts)):
                    ids, mask, types = encode(texts[k], texts[k + 1] if pair else None, max_length)
                    case["input_ids"].append(list(ids))
                    case["attention_mask"].append("".join(str(v) for v in mask))
                    case["token_type_ids"].append("".join(str(v) for v in types))
                entry["cases"].append(case)
        doc["sources"].append(entry)
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
    ap.add_argument("--dirs", action="store_true", help="rebuild the model directories under dirs/ first")
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
    if args.train or args.dirs:
        make_dirs(args.out, imdb, weibo)
    names = sorted(f[: -len(".tokenizer.json")] for f in os.listdir(args.out) if f.endswith(".tokenizer.json"))
    for name in names:
        make_ids(args.out, name, imdb, weibo)
    dirs = sorted(f for f in os.listdir(os.path.join(args.out, "dirs")) if not f.endswith(".json"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in dirs + [CAMEMBERT[0]]:
            make_ids(args.out, name, imdb, weibo, directory=dir_path(args.out, name, tmp))


if __name__ == "__main__":
    main()
