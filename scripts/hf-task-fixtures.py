#!/usr/bin/env python3
"""Writes tests/data/hf/tasks/<family>-<problem>/: tiny multi-label and
regression classifiers of BERT, RoBERTa, DeBERTa-v3 and ModernBERT, built and
trained by transformers itself (docs/tasks.md, "How each is checked").

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/hf-task-fixtures.py [--only roberta] [--out DIR]

No registry package ships multi-label or regression data that this project
fetches, so the labels are derived from IMDB reviews by fixed rules, stated
here and in each file's metadata:
  multi-label, three labels: "positive" (the IMDB label), "long" (the review
  has more than 1000 characters), "acting" (it contains act, acting, actor,
  actors or actress as a word, any case);
  regression: the IMDB label plus the review's length in characters over
  4000, capped at 0.75 (a score in [0, 1.75] with a fraction on almost every row).

Per fixture: config.json + model.safetensors (transformers' from_config,
seeded), reference.safetensors (the eval batch, its logits and the model's
own loss) and train.safetensors + ref_losses.json (8 steps of
transformers.Trainer). Only token ids and numbers are written, never text.
Deterministic as scripts/hf-family-fixtures.py, whose tiny configs these are.
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
from transformers import AutoModelForSequenceClassification  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_fixture_common import IMDB, IMDB_REL, REPO, load_script, one_key, read_imdb, sha256_file  # noqa: E402
from hf_fixture_trainer import tiny_trainer_losses, write_ref_losses  # noqa: E402

# The family fixtures' tiny configs, tokenizers and row choices.
families = load_script("hf-family-fixtures.py")

FAMILIES = dict(families.FAMILIES)
FAMILIES["bert"] = {"model_type": "bert", "tokenizer": "wordend-bpe", "pad": "[PAD]", "config": {}}
CHOSEN = ("bert", "roberta", "deberta-v2", "modernbert")

MULTI_LABELS = ["positive", "long", "acting"]
ACTING = re.compile(r"\b(act|acting|actor|actors|actress)\b", re.IGNORECASE)
RULES = {
    "multi_label_classification": "positive: IMDB label; long: > 1000 characters; acting: the words act, acting, "
                                  "actor, actors or actress, any case",
    "regression": "IMDB label + min(characters / 4000, 0.75)",
}


def multi_label(text, label):
    return [float(label), float(len(text) > 1000), float(ACTING.search(text) is not None)]


def score(text, label):
    return float(label) + min(len(text) / 4000.0, 0.75)


def targets(problem, rows):
    if problem == "regression":
        return torch.tensor([score(t, y) for t, y in rows], dtype=torch.float32)
    return torch.tensor([multi_label(t, y) for t, y in rows], dtype=torch.float32)


def build(spec, tok, problem):
    config = families.tiny_config(spec, tok)
    if problem == "regression":
        config.num_labels = 1
        config.id2label, config.label2id = {0: "LABEL_0"}, {"LABEL_0": 0}
    else:
        config.num_labels = 3
        config.id2label = dict(enumerate(MULTI_LABELS))
        config.label2id = {n: i for i, n in enumerate(MULTI_LABELS)}
    config.problem_type = problem
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")


def make(name, problem, out, imdb):
    spec = FAMILIES[name]
    tok_file = os.path.join(families.TOKENIZERS, spec["tokenizer"] + ".tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(tok_file)
    pad_id = tok.token_to_id(spec.get("pad", "<pad>"))
    short = "multi-label" if problem == "multi_label_classification" else "regression"
    d = os.path.join(out, f"{name}-{short}")
    os.makedirs(d, exist_ok=True)
    model = build(spec, tok, problem)
    model.save_pretrained(d)
    meta = {"imdb_file": IMDB_REL, "tokenizer": spec["tokenizer"], "tokenizer_sha256": sha256_file(tok_file),
            "labels": RULES[problem], **{f"version_{k}": v for k, v in families.versions().items()}}

    # Logits in eval mode and the model's own loss, on 32 reviews.
    rows = [imdb[i] for i in families.EVAL_IMDB]
    ids, mask, types = families.encode(tok, [t for t, _ in rows], pad_id)
    labels = targets(problem, rows)
    model.eval()
    with torch.no_grad():
        out_ = model(input_ids=ids, attention_mask=mask, labels=labels)
    save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": labels,
               "logits": out_.logits.contiguous(), "loss": out_.loss.reshape(1)},
              os.path.join(d, "reference.safetensors"), metadata=one_key({**meta, "imdb_rows": families.EVAL_IMDB}))

    # Eight steps of transformers.Trainer from the saved weights.
    rows = [imdb[i] for i in families.TRAIN_ROWS]
    ids, mask, types = families.encode(tok, [t for t, _ in rows], pad_id)
    data = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": targets(problem, rows)}
    save_file(data, os.path.join(d, "train.safetensors"), metadata=one_key({**meta, "imdb_rows": families.TRAIN_ROWS}))
    model = AutoModelForSequenceClassification.from_pretrained(d, attn_implementation="eager")
    losses = tiny_trainer_losses(model, data, f"{name} {problem}")
    write_ref_losses(os.path.join(d, "ref_losses.json"),
                     f"transformers.Trainer, 8 steps of the tiny {spec['model_type']} {problem} model on "
                     "train.safetensors; global step s trains on rows [16 s, 16 s + 16) in file order",
                     losses, families.versions(), labels=RULES[problem])
    print(f"{name} {problem}: logits {tuple(out_.logits.shape)}, loss {out_.loss.item():.6f}, "
          f"Trainer {losses[0]:.6f} .. {losses[-1]:.6f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "hf", "tasks"))
    ap.add_argument("--only", choices=CHOSEN, action="append")
    args = ap.parse_args()
    if not os.path.exists(IMDB):
        raise SystemExit(f"missing {IMDB} (scripts/fetch-data.sh)")
    imdb = read_imdb()
    for name in args.only or CHOSEN:
        for problem in ("multi_label_classification", "regression"):
            make(name, problem, args.out, imdb)


if __name__ == "__main__":
    main()
