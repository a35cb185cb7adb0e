"""The transformers baseline of ft's NER run: what transformers' run_ner.py does.

    .venv-hf/bin/python scripts/hf-ner-baseline.py [--data data/ner] [--model data/all-minilm-l6-v2]
        [--epochs 3] [--batch-size 16] [--lr 5e-5] [--threads 1] [--out DIR]

Fine-tunes AutoModelForTokenClassification on DATA/{train,dev}.jsonl
({"tokens": [...], "ner_tags": [...]}, labels.txt; scripts/fetch-ner.sh) with
transformers' Trainer: words tokenized with is_split_into_words, max_length
128, the label on each word's first sub-token (-100 on the others and on
special tokens), DataCollatorForTokenClassification, AdamW, linear decay, no
warm-up, no weight decay, seed 42. After each epoch it prints the entity
precision/recall/F1 of dev and test (seqeval's default, conlleval's chunks:
an I-X after O or another type starts an entity). Prints one JSON object at
the end: the per-epoch metrics and the wall time. The run behind the numbers
in scripts/fetch-ner.sh; with --out the final model is saved to OUT/final.
"""
import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    Trainer,
    TrainingArguments,
    set_seed,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def chunks(tags):
    """(start, end, type) of each entity, as seqeval's default mode reads IOB2."""
    out, start, typ = set(), None, None
    for i, t in enumerate(list(tags) + ["O"]):
        tt = t[2:] if t != "O" else None
        if start is not None and (t == "O" or t.startswith("B-") or tt != typ):
            out.add((start, i, typ))
            start = None
        if t != "O" and start is None:
            start, typ = i, tt
    return out


def entity_f1(pred_seqs, gold_seqs):
    tp = n_pred = n_gold = 0
    for p, g in zip(pred_seqs, gold_seqs):
        P, G = chunks(p), chunks(g)
        tp += len(P & G)
        n_pred += len(P)
        n_gold += len(G)
    pr = tp / n_pred if n_pred else 0.0
    rc = tp / n_gold if n_gold else 0.0
    return {"precision": pr, "recall": rc, "f1": 2 * pr * rc / (pr + rc) if pr + rc else 0.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(REPO, "data", "ner"))
    ap.add_argument("--model", default=os.path.join(REPO, "data", "all-minilm-l6-v2"))
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    set_seed(42)

    def load(split):
        with open(os.path.join(args.data, split + ".jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    with open(os.path.join(args.data, "labels.txt"), encoding="utf-8") as f:
        labels = [line.strip() for line in f if line.strip()]
    label2id = {name: i for i, name in enumerate(labels)}
    tok = AutoTokenizer.from_pretrained(args.model)

    def encode(rows):
        feats = []
        for r in rows:
            enc = tok(r["tokens"], is_split_into_words=True, truncation=True, max_length=128)
            prev, lab = None, []
            for w in enc.word_ids():
                lab.append(-100 if w is None or w == prev else label2id[r["ner_tags"][w]])
                prev = w
            enc["labels"] = lab
            feats.append(dict(enc))
        return feats

    train, dev, test = encode(load("train")), encode(load("dev")), encode(load("test"))
    model = AutoModelForTokenClassification.from_pretrained(
        args.model, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id)

    def metrics(ev):
        logits, gold = ev
        pred_seqs, gold_seqs = [], []
        for p, g in zip(logits.argmax(-1), gold):
            keep = g != -100
            pred_seqs.append([labels[x] for x in p[keep]])
            gold_seqs.append([labels[x] for x in g[keep]])
        return entity_f1(pred_seqs, gold_seqs)

    out = args.out or os.path.join("/tmp", f"hf-ner-baseline-{os.getpid()}")
    targs = TrainingArguments(output_dir=out, learning_rate=args.lr, per_device_train_batch_size=args.batch_size,
                              per_device_eval_batch_size=64, num_train_epochs=args.epochs, weight_decay=0.0,
                              eval_strategy="epoch", save_strategy="no", logging_steps=50, report_to=[], seed=42,
                              use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=targs, train_dataset=train, eval_dataset={"dev": dev, "test": test},
                      processing_class=tok, data_collator=DataCollatorForTokenClassification(tok),
                      compute_metrics=metrics)
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0
    history = [{k: round(v, 4) for k, v in h.items() if k.endswith(("_f1", "_precision", "_recall")) or k == "epoch"}
               for h in trainer.state.log_history if "eval_dev_f1" in h or "eval_test_f1" in h]
    print(json.dumps({"data": args.data, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                      "threads": args.threads, "train_and_eval_s": round(wall, 1), "history": history}))
    if args.out:
        trainer.save_model(os.path.join(args.out, "final"))
        tok.save_pretrained(os.path.join(args.out, "final"))


if __name__ == "__main__":
    main()
