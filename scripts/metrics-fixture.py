#!/usr/bin/env python3
"""Writes tests/data/metrics/sklearn.json: fixed predictions and what
scikit-learn reports for them, so test_training_loop checks ft's metrics
(ft/observe/metrics.h) against the real thing without Python in the test.

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/metrics-fixture.py [--out FILE]

Three cases, drawn from a seeded NumPy generator: binary (200 rows),
four classes (300 rows), multi-label with five labels (150 rows). The
scores are rounded to two decimals so that ties occur, which is where ROC
and PR areas are easiest to get wrong. Predictions are the argmax of the
probabilities (the first of equal maxima, as NumPy and ft take it);
multi-label decisions are scores >= 0.5.
"""
import argparse
import json
import os

import numpy as np
import sklearn
from sklearn import metrics
from sklearn.preprocessing import label_binarize


def single_label(rng, rows, classes):
    labels = rng.integers(0, classes, size=rows)
    logits = rng.normal(size=(rows, classes)) + 1.5 * np.eye(classes)[labels] * rng.random((rows, 1))
    probs = np.exp(logits)
    probs /= probs.sum(1, keepdims=True)
    probs = np.round(probs, 2)
    probs[:, -1] = np.round(1.0 - probs[:, :-1].sum(1), 2)  # rows still sum to 1 for roc_auc_score
    probs = np.clip(probs, 0.0, 1.0)
    probs /= probs.sum(1, keepdims=True)
    preds = probs.argmax(1)
    if classes == 2:
        roc = metrics.roc_auc_score(labels, probs[:, 1])
        ap = metrics.average_precision_score(labels, probs[:, 1])
    else:
        roc = metrics.roc_auc_score(labels, probs, multi_class="ovr", average="macro")
        ap = metrics.average_precision_score(label_binarize(labels, classes=list(range(classes))), probs,
                                             average="macro")
    return {
        "classes": classes,
        "labels": labels.tolist(),
        "preds": preds.tolist(),
        "probs": probs.reshape(-1).tolist(),
        "expected": {
            "accuracy": metrics.accuracy_score(labels, preds),
            "macro_f1": metrics.f1_score(labels, preds, average="macro", zero_division=0),
            "weighted_f1": metrics.f1_score(labels, preds, average="weighted", zero_division=0),
            "mcc": metrics.matthews_corrcoef(labels, preds),
            "roc_auc": roc,
            "pr_auc": ap,
            "confusion": metrics.confusion_matrix(labels, preds, labels=list(range(classes))).tolist(),
        },
    }


def multi_label(rng, rows, labels_n):
    truth = (rng.random((rows, labels_n)) < 0.35).astype(int)
    scores = np.round(1 / (1 + np.exp(-(rng.normal(size=(rows, labels_n)) + 1.2 * (2 * truth - 1)))), 2)
    decided = (scores >= 0.5).astype(int)
    return {
        "labels_n": labels_n,
        "truth": truth.reshape(-1).tolist(),
        "scores": scores.reshape(-1).tolist(),
        "decided": decided.reshape(-1).tolist(),
        "expected": {
            "micro_f1": metrics.f1_score(truth, decided, average="micro", zero_division=0),
            "macro_f1": metrics.f1_score(truth, decided, average="macro", zero_division=0),
            "subset_accuracy": metrics.accuracy_score(truth, decided),
            "roc_auc": metrics.roc_auc_score(truth, scores, average="macro"),
            "pr_auc": metrics.average_precision_score(truth, scores, average="macro"),
        },
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "metrics", "sklearn.json"))
    args = parser.parse_args()
    rng = np.random.default_rng(20261127)
    out = {
        "source": f"scripts/metrics-fixture.py, scikit-learn {sklearn.__version__}",
        "binary": single_label(rng, 200, 2),
        "four_classes": single_label(rng, 300, 4),
        "multi_label": multi_label(rng, 150, 5),
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
