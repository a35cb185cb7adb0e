#!/usr/bin/env python3
"""Checks `ft export --onnx`: each committed model fixture exported by ft,
checked by the ONNX checker, run in ONNX Runtime on the fixture's padded
batch and compared with what transformers / sentence-transformers computed
on the same ids (the fixture's reference.safetensors, which ft's own tests
match within 5e-6).

    .venv-hf/bin/python scripts/check-onnx-export.py --ft build/bin/ft [--tolerance 1e-4]

Cases:
- tests/data/hf/families/* and tests/data/hf/tasks/*: sequence classification
  in the three problem types, token classification and masked LM, on BERT,
  RoBERTa, XLM-RoBERTa, ELECTRA, DistilBERT, DeBERTa-v2 and ModernBERT
  (`logits`; token classification at the attended positions, masked LM at
  the masked ones);
- tests/data/st/tiny-*: sentence embeddings, four poolings, Dense and
  Normalize (`sentence_embedding`, on both padded batches);
- a BERT masked LM and a BertModel made here by transformers (tiny, seed 0),
  and `--task feature-extraction` on the RoBERTa, DeBERTa-v2 and ModernBERT
  classifiers, against transformers' outputs on random padded ids
  (`last_hidden_state` at the attended positions);
- a LoRA adapter saved by PEFT beside its base model (random B, so it
  changes the logits), folded in by the export, against PEFT's logits;
- `--fp16` on one fixture per family and head, against the same references
  within --fp16-tolerance (ONNX Runtime with its basic graph optimizations:
  its extended ones crash on the float16 DeBERTa graph on the CPU; ONNX's
  reference evaluator where a float16 kernel is missing).

Exit 0 when every case holds, 1 otherwise.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

transformers.utils.logging.set_verbosity_error()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP16_CASES = ("tasks/bert-multi-label", "tasks/bert-token-classification", "families/roberta", "families/electra",
              "families/distilbert-mlm", "families/deberta-v2", "families/modernbert", "tasks/modernbert-regression")

failures = []


def say(msg):
    print(f"check-onnx-export: {msg}", flush=True)


def export(ft, model_dir, out, *extra):
    return subprocess.run([ft, "export", "--onnx", *extra, model_dir, out], capture_output=True, text=True)


class Reference:
    """onnx's reference evaluator behind ONNX Runtime's session interface."""

    def __init__(self, path):
        from onnx.reference import ReferenceEvaluator
        self.model = onnx.load(path)
        self.evaluator = ReferenceEvaluator(self.model)

    def get_inputs(self):
        return self.model.graph.input

    def get_outputs(self):
        return self.model.graph.output

    def run(self, names, feed):
        return self.evaluator.run(names, feed)


def session(path, fp16=False):
    onnx.checker.check_model(path, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if fp16:
        # ONNX Runtime 1.32's extended graph optimizations crash (SIGSEGV) on the float16 DeBERTa
        # graph on the CPU; the basic ones (constant folding, redundant nodes) run it.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # ONNX Runtime's CPU provider lacks some float16 kernels
        if not fp16:
            raise
        say(f"  ONNX Runtime's CPU provider cannot run it ({str(e).splitlines()[0][:120]}); ONNX's reference evaluator instead")
        return Reference(path)


def run(sess, ids, mask, types=None):
    feed = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
    names = [i.name for i in sess.get_inputs()]
    if "token_type_ids" in names:
        feed["token_type_ids"] = (types if types is not None else np.zeros_like(ids)).astype(np.int64)
    try:
        return sess.run(None, feed)[0], names
    except Exception as e:
        if isinstance(sess, Reference):
            raise
        raise RuntimeError(f"ONNX Runtime: {e}")


def compare(name, got, want, tol):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        failures.append(name)
        say(f"FAIL {name}: shape {got.shape}, expected {want.shape}")
        return
    diff = float(np.max(np.abs(got - want))) if got.size else 0.0
    ok = diff <= tol
    if not ok:
        failures.append(name)
    say(f"{'ok  ' if ok else 'FAIL'} {name}: max |ORT - reference| {diff:.2e} over {got.size} values")


def fixture_case(ft, d, tmp, tol, fp16=False):
    name = os.path.relpath(d, REPO) + (" --fp16" if fp16 else "")
    out = os.path.join(tmp, os.path.basename(d) + ("-fp16" if fp16 else "") + ".onnx")
    r = export(ft, d, out, *(["--fp16"] if fp16 else []))
    if r.returncode != 0:
        failures.append(name)
        say(f"FAIL {name}: ft export --onnx exited {r.returncode}: {(r.stdout + r.stderr).strip()}")
        return
    ref = load_file(os.path.join(d, "reference.safetensors"))
    sess = session(out, fp16)
    ids, mask = ref["input_ids"], ref["attention_mask"]
    logits, inputs = run(sess, ids, mask, ref.get("token_type_ids"))
    want = ref["logits"]
    if "mlm_positions" in ref:  # masked LM: the masked tokens' rows of [batch * sequence, vocab]
        logits = logits.reshape(-1, logits.shape[-1])[ref["mlm_positions"]]
    elif logits.ndim == 3:  # token classification: attended positions only (padding's are unspecified)
        keep = mask.astype(bool)
        logits, want = logits[keep], want[keep]
    compare(f"{name} ({', '.join(inputs)} -> {sess.get_outputs()[0].name})", logits, want, tol)


def st_case(ft, d, ref, tmp, tol):
    name = os.path.relpath(d, REPO)
    out = os.path.join(tmp, os.path.basename(d) + ".onnx")
    r = export(ft, d, out)
    if r.returncode != 0:
        failures.append(name)
        say(f"FAIL {name}: ft export --onnx exited {r.returncode}: {(r.stdout + r.stderr).strip()}")
        return
    sess = session(out)
    key = os.path.basename(d)
    for batch in ("", "short."):
        got, _ = run(sess, ref[batch + "input_ids"], ref[batch + "attention_mask"])
        compare(f"{name} {batch or 'long.'}sentence_embedding", got, ref[f"{key}.{batch}sentence_embedding"], tol)


def padded_ids(vocab, rows=6, seq=24, seed=0):
    g = np.random.default_rng(seed)
    lengths = g.integers(4, seq + 1, size=rows)
    lengths[0] = seq
    ids = g.integers(5, vocab, size=(rows, seq))
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    ids[:, 0] = 2
    return np.where(mask == 1, ids, 0).astype(np.int64), mask


def lora_case(ft, tmp, tol):
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, initializer_range=0.2, num_labels=3)
    torch.manual_seed(0)
    base = BertForSequenceClassification(cfg).eval()
    d = os.path.join(tmp, "lora")
    base.save_pretrained(d)
    torch.manual_seed(1)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["query", "value"],
                                                 init_lora_weights=False)).eval()
    peft_model.save_pretrained(d)
    ids, mask = padded_ids(cfg.vocab_size, seed=2)
    with torch.no_grad():
        want = peft_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
        with peft_model.disable_adapter():
            plain = peft_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits
    name = "PEFT LoRA (r 4, query and value) folded by ft export --onnx"
    out = d + ".onnx"
    r = export(ft, d, out)
    if r.returncode != 0:
        failures.append(name)
        say(f"FAIL {name}: ft export --onnx exited {r.returncode}: {(r.stdout + r.stderr).strip()}")
        return
    say(f"  {r.stdout.strip()}")
    # Not vacuous: the adapter moves the logits.
    say(f"  the adapter moves the logits by up to {float(np.max(np.abs(want - plain.numpy()))):.2e}")
    got, _ = run(session(out), ids, mask)
    compare(name, got, want, tol)


def transformers_cases(ft, tmp, tol):
    from transformers import AutoModel, BertConfig, BertForMaskedLM, BertModel

    cfg = BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, initializer_range=0.2)
    ids, mask = padded_ids(cfg.vocab_size)
    types = np.zeros_like(ids)
    types[:, 12:] = 1
    t = {k: torch.from_numpy(v) for k, v in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types))}
    keep = mask.astype(bool)
    for cls, what in ((BertForMaskedLM, "logits"), (BertModel, "last_hidden_state")):
        torch.manual_seed(0)
        model = cls(cfg).eval()
        d = os.path.join(tmp, cls.__name__)
        model.save_pretrained(d)
        out = d + ".onnx"
        r = export(ft, d, out)
        name = f"transformers {cls.__name__} ({what})"
        if r.returncode != 0:
            failures.append(name)
            say(f"FAIL {name}: ft export --onnx exited {r.returncode}: {(r.stdout + r.stderr).strip()}")
            continue
        with torch.no_grad():
            want = getattr(model(**t), what).numpy()
        got, _ = run(session(out), ids, mask, types)
        compare(name, got[keep], want[keep], tol)
    # --task feature-extraction on a classifier: its encoder's hidden states (ModernBERT's after its final norm).
    for family in ("roberta", "deberta-v2", "modernbert"):
        d = os.path.join(REPO, "tests/data/hf/families", family)
        out = os.path.join(tmp, f"{family}-features.onnx")
        r = export(ft, d, out, "--task", "feature-extraction")
        name = f"tests/data/hf/families/{family} --task feature-extraction (last_hidden_state)"
        if r.returncode != 0:
            failures.append(name)
            say(f"FAIL {name}: ft export --onnx exited {r.returncode}: {(r.stdout + r.stderr).strip()}")
            continue
        model = AutoModel.from_pretrained(d).eval()
        ids, mask = padded_ids(model.config.vocab_size, seq=40, seed=1)
        ids[:, 0] = 0
        with torch.no_grad():
            want = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
        got, _ = run(session(out), ids, mask)
        compare(name, got[mask.astype(bool)], want[mask.astype(bool)], tol)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ft", required=True)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--fp16-tolerance", type=float, default=2e-2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="ft-onnx-export-") as tmp:
        for d in sorted(glob.glob(os.path.join(REPO, "tests/data/hf/families/*")) +
                        glob.glob(os.path.join(REPO, "tests/data/hf/tasks/*"))):
            fixture_case(args.ft, d, tmp, args.tolerance)
        st_ref = load_file(os.path.join(REPO, "tests/data/st/embeddings.safetensors"))
        for d in sorted(glob.glob(os.path.join(REPO, "tests/data/st/tiny-*"))):
            st_case(args.ft, d, st_ref, tmp, args.tolerance)
        transformers_cases(args.ft, tmp, args.tolerance)
        lora_case(args.ft, tmp, args.tolerance)
        for rel in FP16_CASES:
            fixture_case(args.ft, os.path.join(REPO, "tests/data/hf", rel), tmp, args.fp16_tolerance, fp16=True)
    if failures:
        say(f"{len(failures)} case(s) failed: {', '.join(failures)}")
        return 1
    say("every case holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
