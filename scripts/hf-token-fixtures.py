#!/usr/bin/env python3
"""Writes tests/data/hf/tasks/<family>-token-classification/: tiny token
classifiers (NER-style, IOB2 tags) of BERT, DistilBERT, ELECTRA, RoBERTa,
DeBERTa-v3 and ModernBERT, built and trained by transformers itself.

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/hf-token-fixtures.py [--only roberta] [--out DIR]

No registry package ships tagged data that this project fetches, so the words
and tags come from IMDB reviews by a fixed rule, stated here and in each
file's metadata:
  words: the review with <br /> as a break, split on whitespace, non-letters
  and non-digits stripped off both ends of each piece, empty pieces dropped;
  the first 32 words (40 put most BERT rows past 64 tokens);
  tags (IOB2): a run of consecutive words of digits is one NUM entity; a run of
  consecutive words starting with an upper-case letter is one CAP entity unless
  its first word starts a sentence (the review's or a break's first word, or
  one after a piece with . ! or ? in its stripped end), then it is all O;
  punctuation between two words (stripped or a piece of its own) ends a run;
  every other word is O.
  Labels as run_ner.py orders them, sorted names: B-CAP B-NUM I-CAP I-NUM O.

Tokenized as transformers' examples/pytorch/token-classification/run_ner.py
does (tokenize_and_align_labels, label_all_tokens=False): the words as
pre-tokenized input (is_split_into_words), truncated at 64 tokens; a word's
first token gets its tag, its other tokens, the special tokens and padding
get -100. The committed tokenizer.json is used as it is, except that
run_ner.py loads a RoBERTa tokenizer with add_prefix_space=True: for roberta
the ByteLevel pre-tokenizer has add_prefix_space=True (RobertaTokenizer's own
setting for it; each word is read as if a space came before it). The ModernBERT
tokenizer already has it; wordend-bpe (BERT, DistilBERT, ELECTRA) and the
DeBERTa Metaspace tokenizer need nothing.

The rows are padded to the file's longest (at most 64) before the Trainer sees
them, so its default collator (default_data_collator: torch.stack) gives the
batches DataCollatorForTokenClassification would pad to the same width: the
labels need no padding of their own. The loss is the model's own:
CrossEntropyLoss mean over the batch's tokens whose label is not -100 (16 rows
per step, one process: the Trainer's num_items_in_batch changes nothing).

Per fixture: config.json + model.safetensors (from_config, seeded),
reference.safetensors (the eval batch, per-token logits, the model's loss)
and train.safetensors + ref_losses.json (8 steps of transformers.Trainer with
the settings of scripts/hf-task-fixtures.py). Only token ids and numbers are
written, never text (so no words or tag names per row). Deterministic as
scripts/hf-family-fixtures.py, whose tiny configs these are.
"""
import argparse
import os
import re
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import tokenizers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForTokenClassification  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_fixture_common import IMDB, IMDB_REL, REPO, load_script, one_key, read_imdb, sha256_file  # noqa: E402
from hf_fixture_trainer import tiny_trainer_losses, write_ref_losses  # noqa: E402

tasks = load_script("hf-task-fixtures.py")  # its FAMILIES add BERT to the family fixtures'
families = tasks.families
CHOSEN = ("bert", "distilbert", "electra", "roberta", "deberta-v2", "modernbert")

N_WORDS = 32
LABELS = ["B-CAP", "B-NUM", "I-CAP", "I-NUM", "O"]
LABEL_ID = {n: i for i, n in enumerate(LABELS)}
RULE = (f"words: IMDB review, <br /> a break, whitespace split, non-alphanumerics stripped off piece ends, empty "
        f"pieces dropped, first {N_WORDS}; IOB2 tags: a run of digit words = NUM; a run of words starting upper-case "
        "= CAP unless its first word starts a sentence (first of the review or a break, or after a piece with . ! ? "
        "in its stripped end), then O; punctuation between words ends a run; else O")
TOKENIZATION = ("run_ner.py tokenize_and_align_labels: is_split_into_words, truncation at 64, the first token of a "
                "word labelled, other tokens, special tokens and padding -100")
BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
EDGES = re.compile(r"^([\W_]*)(.*?)([\W_]*)$", re.DOTALL)
DIGITS = re.compile(r"[0-9]+")


def words_and_tags(text):
    """The first N_WORDS words of `text` and their IOB2 tags, by RULE."""
    words = []  # (word, kind: "NUM", "CAP" or None, starts a sentence, nothing between it and the word before)
    for part in BREAK.split(text):
        prev = None  # (lead, core, trail) of the piece before, in this part
        for piece in part.split():
            lead, core, trail = EDGES.match(piece).groups()
            if core:
                kind = "NUM" if DIGITS.fullmatch(core) else "CAP" if core[0].isupper() else None
                starts = prev is None or any(c in ".!?" for c in (prev[2] if prev[1] else prev[0]))
                joined = prev is not None and bool(prev[1]) and not prev[2] and not lead
                words.append((core, kind, starts, joined))
            prev = (lead, core, trail)
    words = words[:N_WORDS]
    tags = []
    for i, (_, kind, starts, joined) in enumerate(words):
        if kind is None:
            tags.append("O")
        elif i > 0 and joined and words[i - 1][1] == kind:  # the run goes on
            tags.append("O" if tags[-1] == "O" else "I-" + kind)
        else:
            tags.append("O" if kind == "CAP" and starts else "B-" + kind)
    return [w for w, *_ in words], tags


def tokenizer(spec):
    tok = tokenizers.Tokenizer.from_file(os.path.join(families.TOKENIZERS, spec["tokenizer"] + ".tokenizer.json"))
    if spec["model_type"] == "roberta":  # run_ner.py: AutoTokenizer(..., add_prefix_space=True)
        tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True,
                                                               use_regex=True)
    tok.enable_truncation(families.MAX_LEN)
    return tok


def encode(tok, rows, pad_id):
    """ids, mask, zero types, labels [N, width]: the rows' words tokenized and aligned as run_ner.py does."""
    tagged = [words_and_tags(text) for text, _ in rows]
    encs = tok.encode_batch([w for w, _ in tagged], is_pretokenized=True)
    width = max(len(e.ids) for e in encs)
    ids = torch.full((len(encs), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(encs), width), dtype=torch.int64)
    labels = torch.full((len(encs), width), -100, dtype=torch.int64)
    for i, (e, (_, tags)) in enumerate(zip(encs, tagged)):
        ids[i, :len(e.ids)] = torch.tensor(e.ids)
        mask[i, :len(e.ids)] = 1
        previous = None
        for j, w in enumerate(e.word_ids):
            if w is not None and w != previous:
                labels[i, j] = LABEL_ID[tags[w]]
            previous = w
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids), "labels": labels}


def build(spec, tok):
    config = families.tiny_config(spec, tok)
    config.num_labels = len(LABELS)
    config.id2label = dict(enumerate(LABELS))
    config.label2id = dict(LABEL_ID)
    torch.manual_seed(0)
    return AutoModelForTokenClassification.from_config(config, attn_implementation="eager")


def make(name, out, imdb):
    spec = tasks.FAMILIES[name]
    tok_file = os.path.join(families.TOKENIZERS, spec["tokenizer"] + ".tokenizer.json")
    tok = tokenizer(spec)
    pad_id = tok.token_to_id(spec.get("pad", "<pad>"))
    d = os.path.join(out, f"{name}-token-classification")
    os.makedirs(d, exist_ok=True)
    model = build(spec, tok)
    model.save_pretrained(d)
    meta = {"imdb_file": IMDB_REL, "tokenizer": spec["tokenizer"], "tokenizer_sha256": sha256_file(tok_file),
            "pre_tokenizer": ("ByteLevel add_prefix_space=True (run_ner.py)" if spec["model_type"] == "roberta"
                              else "as in the tokenizer file"), "labels": RULE, "label_list": LABELS,
            "tokenization": TOKENIZATION, **{f"version_{k}": v for k, v in families.versions().items()}}

    # Per-token logits in eval mode and the model's own loss, on 32 reviews.
    batch = encode(tok, [imdb[i] for i in families.EVAL_IMDB], pad_id)
    model.eval()
    with torch.no_grad():
        out_ = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    save_file({**batch, "logits": out_.logits.contiguous(), "loss": out_.loss.reshape(1)},
              os.path.join(d, "reference.safetensors"), metadata=one_key({**meta, "imdb_rows": families.EVAL_IMDB}))

    # Eight steps of transformers.Trainer from the saved weights.
    data = encode(tok, [imdb[i] for i in families.TRAIN_ROWS], pad_id)
    save_file(data, os.path.join(d, "train.safetensors"), metadata=one_key({**meta, "imdb_rows": families.TRAIN_ROWS}))
    model = AutoModelForTokenClassification.from_pretrained(d, attn_implementation="eager")
    with torch.no_grad():  # step 1's loss: the model's token mean over rows 0..15, as the Trainer normalises it
        first = model(**{k: data[k][:16] for k in ("input_ids", "attention_mask", "labels")}).loss.item()
    losses = tiny_trainer_losses(model, data, f"{name} token classification")
    if abs(losses[0] - first) > 1e-6:
        raise SystemExit(f"{name}: Trainer step 1 loss {losses[0]} is not the model's own {first}")
    write_ref_losses(os.path.join(d, "ref_losses.json"),
                     f"transformers.Trainer, 8 steps of the tiny {spec['model_type']} token classifier on "
                     "train.safetensors; global step s trains on rows [16 s, 16 s + 16) in file order",
                     losses, families.versions(), labels=RULE, label_list=LABELS, tokenization=TOKENIZATION,
                     collator="default_data_collator (rows already padded)",
                     loss="CrossEntropyLoss, mean over the batch's tokens whose label is not -100")
    counts = torch.bincount(data["labels"][data["labels"] >= 0], minlength=len(LABELS)).tolist()
    print(f"{name}: logits {tuple(out_.logits.shape)}, loss {out_.loss.item():.6f}, "
          f"train {tuple(data['labels'].shape)} tags {dict(zip(LABELS, counts))}, Trainer {losses[0]:.6f} .. {losses[-1]:.6f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "hf", "tasks"))
    ap.add_argument("--only", choices=CHOSEN, action="append")
    args = ap.parse_args()
    if not os.path.exists(IMDB):
        raise SystemExit(f"missing {IMDB} (scripts/fetch-data.sh)")
    imdb = read_imdb()
    for name in args.only or CHOSEN:
        make(name, args.out, imdb)


if __name__ == "__main__":
    main()
