#!/usr/bin/env python3
"""Writes the Hugging Face reference fixtures under tests/data/hf/.

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/hf-fixtures.py [--out tests/data/hf]

Inputs (none is copied into the output, only token ids and numbers):
  data/all-minilm-l6-v2/                   the pretrained MiniLM (scripts/fetch-data.sh)
  data/imdb/train.jsonl                    50 000 rows, the first 25 000 are label 0
  ../shared/data/weibo-emotion/train.json  a JSON list of [text, label_id]

Outputs (tests/data/hf/README.md describes each):
  minilm-logits.safetensors  tokenized IMDB + Weibo texts, HF's logits and the seeded head
  minilm-tokens.json         the fast tokenizer's ids for singles and pairs at 128 and 32
  minilm-trainer/            an 8-step transformers.Trainer run with its exact losses

Deterministic: fixed rows, torch.manual_seed(0) before each model is built,
one intra-op thread, fp32 on the CPU, dropout off where the model trains.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

# Everything is local: never ask the Hub (there may be no network at all).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    TrainingArguments,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_fixture_common import (  # noqa: E402
    IMDB, IMDB_REL, IMDB_ROWS, REPO, WEIBO, WEIBO_REL, WEIBO_ROWS, one_key, read_imdb, read_weibo, sha256_file,
    sha256_text)
from hf_fixture_trainer import FixedOrderTrainer, Rows  # noqa: E402

MINILM = os.path.join(REPO, "data", "all-minilm-l6-v2")
# (a) and (b) use IMDB_ROWS and WEIBO_ROWS.
# (c): 64 negative + 64 positive reviews, interleaved neg, pos, neg, pos, ...
TRAIN_NEG = list(range(1000, 1064))
TRAIN_POS = list(range(26000, 26064))
TRAIN_ROWS = [r for pair in zip(TRAIN_NEG, TRAIN_POS) for r in pair]


def versions():
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
    }


def load_tokenizer():
    tok = AutoTokenizer.from_pretrained(MINILM)
    if not tok.is_fast:
        raise SystemExit("AutoTokenizer did not give the fast (tokenizers) tokenizer")
    return tok


def seeded_classifier(config):
    """The classifier model with HF's own head init drawn after manual_seed(0)."""
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        MINILM, config=config, attn_implementation="eager")
    return model


# --------------------------------------------------------------------- (a)
def make_logits(out, tok, imdb, weibo):
    texts = [imdb[i][0] for i in IMDB_ROWS] + [weibo[i][0] for i in WEIBO_ROWS]
    enc = tok(texts, truncation=True, max_length=128, padding="longest", return_tensors="pt",
              return_token_type_ids=True, return_attention_mask=True)
    config = AutoConfig.from_pretrained(MINILM, num_labels=2)
    model = seeded_classifier(config)
    model.eval()
    with torch.no_grad():
        inputs = dict(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                      token_type_ids=enc["token_type_ids"])
        logits = model(**inputs).logits
        pooled = model.bert(**inputs).pooler_output
    head = {"classifier.weight": model.classifier.weight.detach().clone().contiguous(),
            "classifier.bias": model.classifier.bias.detach().clone().contiguous()}
    tensors = {
        "input_ids": enc["input_ids"].to(torch.int64).contiguous(),
        "attention_mask": enc["attention_mask"].to(torch.int64).contiguous(),
        "token_type_ids": enc["token_type_ids"].to(torch.int64).contiguous(),
        "logits": logits.to(torch.float32).contiguous(),
        "pooler_output": pooled.to(torch.float32).contiguous(),
        **head,
    }
    meta = {
        "imdb_file": IMDB_REL, "imdb_rows": IMDB_ROWS,
        "weibo_file": WEIBO_REL, "weibo_rows": WEIBO_ROWS,
        "order": "imdb rows then weibo rows",
        "tokenizer": "AutoTokenizer (fast), truncation=True, max_length=128, padding=longest",
        "model": "AutoModelForSequenceClassification(num_labels=2), eval, fp32, eager attention, "
                 "head = HF init after torch.manual_seed(0)",
        **{f"version_{k}": v for k, v in versions().items()},
    }
    save_file(tensors, os.path.join(out, "minilm-logits.safetensors"), metadata=one_key(meta))
    print(f"minilm-logits: {tuple(enc['input_ids'].shape)} ids, logits {tuple(logits.shape)}")
    return head


# --------------------------------------------------------------------- (b)
def make_tokens(out, tok, imdb, weibo):
    sources = [
        {"name": "imdb", "file": IMDB_REL, "path": IMDB, "format": "jsonl", "text_field": "text",
         "rows": IMDB_ROWS, "texts": imdb},
        {"name": "weibo", "file": WEIBO_REL, "path": WEIBO, "format": "json_list", "text_index": 0,
         "rows": WEIBO_ROWS, "texts": weibo},
    ]
    doc = {
        "what": "ids of the fast AutoTokenizer of data/all-minilm-l6-v2: special tokens added, "
                "truncation=True (longest_first for pairs), no padding",
        "versions": versions(),
        "sources": [],
    }
    for src in sources:
        texts = [src["texts"][i][0] for i in src["rows"]]
        entry = {k: src[k] for k in ("name", "file", "format", "text_field", "text_index", "rows")
                 if k in src}
        entry["file_sha256"] = sha256_file(src["path"])
        entry["text_sha256"] = [sha256_text(t) for t in texts]
        entry["cases"] = []
        for pair in (False, True):
            for max_length in (128, 32):
                ids, types = [], []
                # Pair k is (texts[k], texts[k + 1]): neighbours in `rows`.
                for k in range(len(texts) - 1 if pair else len(texts)):
                    enc = tok(texts[k], texts[k + 1] if pair else None, truncation=True,
                              max_length=max_length, return_token_type_ids=True)
                    ids.append(list(enc["input_ids"]))
                    types.append(list(enc["token_type_ids"]))
                entry["cases"].append({"max_length": max_length, "pair": pair,
                                       "input_ids": ids, "token_type_ids": types})
        doc["sources"].append(entry)
    path = os.path.join(out, "minilm-tokens.json")
    with open(path, "w", encoding="utf-8") as f:
        # Compact, but one example per line so that diffs stay readable.
        f.write("{\n")
        for key in ("what", "versions"):
            f.write(f"  {json.dumps(key)}: {json.dumps(doc[key], sort_keys=True)},\n")
        f.write('  "sources": [\n')
        for si, entry in enumerate(doc["sources"]):
            head = {k: v for k, v in entry.items() if k != "cases"}
            f.write("    " + json.dumps(head, separators=(",", ":"))[:-1] + ',"cases":[\n')
            for ci, case in enumerate(entry["cases"]):
                f.write(f'      {{"max_length":{case["max_length"]},'
                        f'"pair":{json.dumps(case["pair"])},\n')
                for key in ("input_ids", "token_type_ids"):
                    rows = [json.dumps(r, separators=(",", ":")) for r in case[key]]
                    f.write(f'       "{key}":[\n        ' + ",\n        ".join(rows) + "]")
                    f.write(",\n" if key == "input_ids" else "}")
                f.write(",\n" if ci + 1 < len(entry["cases"]) else "]}")
            f.write(",\n" if si + 1 < len(doc["sources"]) else "\n")
        f.write("  ]\n}\n")
    with open(path, encoding="utf-8") as f:
        if json.load(f) != json.loads(json.dumps(doc)):
            raise SystemExit(f"{path}: written JSON does not read back")
    print(f"minilm-tokens: {sum(len(e['cases']) for e in doc['sources'])} cases")


# --------------------------------------------------------------------- (c)
def make_trainer(out, tok, imdb, head_a):
    d = os.path.join(out, "minilm-trainer")
    os.makedirs(d, exist_ok=True)
    texts = [imdb[i][0] for i in TRAIN_ROWS]
    labels = [imdb[i][1] for i in TRAIN_ROWS]
    enc = tok(texts, truncation=True, max_length=64, padding="max_length", return_tensors="pt",
              return_token_type_ids=True, return_attention_mask=True)
    data = {
        "input_ids": enc["input_ids"].to(torch.int64).contiguous(),
        "attention_mask": enc["attention_mask"].to(torch.int64).contiguous(),
        "token_type_ids": enc["token_type_ids"].to(torch.int64).contiguous(),
        "labels": torch.tensor(labels, dtype=torch.int64),
    }
    save_file(data, os.path.join(d, "data.safetensors"), metadata=one_key({
        "imdb_file": IMDB_REL, "imdb_rows": TRAIN_ROWS,
        "tokenizer": "AutoTokenizer (fast), truncation=True, max_length=64, padding=max_length"}))

    config = AutoConfig.from_pretrained(MINILM, num_labels=2, hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0,
                                        id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    model = seeded_classifier(config)
    init_head = {"classifier.weight": model.classifier.weight.detach().clone().contiguous(),
                 "classifier.bias": model.classifier.bias.detach().clone().contiguous()}
    same_head = all(torch.equal(init_head[k], head_a[k]) for k in init_head)
    save_file(init_head, os.path.join(d, "init_head.safetensors"))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        shutil.copyfile(os.path.join(tmp, "config.json"), os.path.join(d, "config.json"))

    hp = dict(
        optim="adamw_torch", learning_rate=1e-4, weight_decay=0.01, adam_beta1=0.9,
        adam_beta2=0.999, adam_epsilon=1e-8, lr_scheduler_type="linear", warmup_steps=2,
        max_steps=8, max_grad_norm=1.0, per_device_train_batch_size=16,
        gradient_accumulation_steps=1, seed=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, report_to=[], use_cpu=True, save_strategy="no", logging_steps=1,
            disable_tqdm=True, dataloader_num_workers=0, dataloader_drop_last=False,
            remove_unused_columns=False, **hp)
        trainer = FixedOrderTrainer(model=model, args=args, train_dataset=Rows(data, ("input_ids", "attention_mask", "token_type_ids", "labels")))
        trainer.train()
    names = {id(p): n for n, p in model.named_parameters()}
    decay, no_decay = [], []
    for group in trainer.optimizer.param_groups:
        for p in group["params"]:
            (decay if group["weight_decay"] > 0 else no_decay).append(names[id(p)])
    steps = len(trainer.exact_losses)
    if steps != 8:
        raise SystemExit(f"expected 8 recorded steps, got {steps}")
    ref = {
        "what": "transformers.Trainer, 8 optimizer steps of the MiniLM classifier on "
                "data.safetensors; global step s trains on rows [16 s, 16 s + 16) in file order",
        "loss": "mean cross-entropy of the step's 16 rows, computed before that step's update "
                "(loss.item() in compute_loss, full float precision)",
        "init": "encoder + pooler from data/all-minilm-l6-v2/model.safetensors; classifier = "
                "init_head.safetensors (HF's init after torch.manual_seed(0)); config.json here "
                "(dropout 0)",
        "hyperparameters": {**hp, "precision": "fp32", "device": "cpu", "processes": 1,
                            "global_batch": 16, "seq_len": 64, "dropout": 0.0,
                            "sampler": "SequentialSampler", "torch_threads": 1},
        "lr_schedule": "linear: lr * s / 2 for s < 2, then lr * (8 - s) / 6 (the LR used at step s)",
        "weight_decay_params": decay,
        "no_weight_decay_params": no_decay,
        "losses": trainer.exact_losses,
        "lrs": trainer.step_lrs,
        "grad_norms_before_clip": trainer.grad_norms,
        "head_equals_minilm_logits_head": same_head,
        "versions": versions(),
    }
    for v in ref["losses"]:
        if not math.isfinite(v):
            raise SystemExit("non-finite loss")
    with open(os.path.join(d, "ref_losses.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
    print(f"minilm-trainer: losses {ref['losses'][0]:.6f} .. {ref['losses'][-1]:.6f}, "
          f"lrs {ref['lrs']}, no decay on {len(no_decay)} tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "hf"))
    ap.add_argument("--only", choices=["logits", "tokens", "trainer"], action="append")
    args = ap.parse_args()
    for path in (MINILM, IMDB, WEIBO):
        if not os.path.exists(path):
            raise SystemExit(f"missing {path} (scripts/fetch-data.sh)")
    os.makedirs(args.out, exist_ok=True)
    only = set(args.only or ["logits", "tokens", "trainer"])
    tok = load_tokenizer()
    imdb, weibo = read_imdb(), read_weibo()
    head = make_logits(args.out, tok, imdb, weibo) if "logits" in only or "trainer" in only else None
    if "tokens" in only:
        make_tokens(args.out, tok, imdb, weibo)
    if "trainer" in only:
        make_trainer(args.out, tok, imdb, head)


if __name__ == "__main__":
    main()
