"""The inference peers of scripts/bench-predict.sh, in the env of scripts/hf-env.sh.

  predict_peer_bench.py pipeline CKPT INPUTS.jsonl MAX_LEN THREADS BATCH OUT.jsonl
  predict_peer_bench.py ort      CKPT INPUTS.jsonl MAX_LEN THREADS BATCH OUT.jsonl MODEL.onnx

pipeline: transformers' pipeline("text-classification") on the checkpoint
directory, batch_size BATCH, inputs in file order (as a user calls it).
ort: ONNX Runtime on MODEL.onnx (`ft export --onnx` of the same checkpoint),
the checkpoint's fast tokenizer (`tokenizers`), inputs sorted by token
count and padded to each batch's longest (the strongest schedule, the one ft
uses). Both truncate at MAX_LEN and run THREADS intra-op threads. Loading is
outside the clock; tokenisation and the forward passes are inside it.

Prints one JSON line {"seconds", "texts", "tokens"}, and writes OUT.jsonl:
one {"label", "score"} per input, in input order, for the agreement check.
"""
import json
import sys
import time


def read_texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def fast_tokenizer(ckpt, max_len):
    """The checkpoint's tokenizer as a `tokenizers.Tokenizer` (from tokenizer.json or vocab.txt)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt).backend_tokenizer
    tok.enable_truncation(max_len)
    tok.no_padding()
    return tok


def run_pipeline(ckpt, texts, max_len, threads, batch):
    import torch
    from transformers import pipeline

    torch.set_num_threads(threads)
    clf = pipeline("text-classification", model=ckpt, tokenizer=ckpt, device=-1)
    start = time.perf_counter()
    out = clf(texts, batch_size=batch, truncation=True, max_length=max_len)
    seconds = time.perf_counter() - start
    return seconds, [{"label": o["label"], "score": o["score"]} for o in out]


def run_ort(ckpt, texts, max_len, threads, batch, model):
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    tok = fast_tokenizer(ckpt, max_len)
    with open(f"{ckpt}/config.json", encoding="utf-8") as f:
        id2label = {int(k): v for k, v in json.load(f)["id2label"].items()}
    start = time.perf_counter()
    enc = tok.encode_batch(texts)
    order = sorted(range(len(texts)), key=lambda i: -len(enc[i].ids))
    results = [None] * len(texts)
    for b in range(0, len(order), batch):
        rows = order[b:b + batch]
        width = len(enc[rows[0]].ids)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for r, i in enumerate(rows):
            n = len(enc[i].ids)
            ids[r, :n] = enc[i].ids
            mask[r, :n] = 1
            types[r, :n] = enc[i].type_ids
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feed["token_type_ids"] = types
        logits = sess.run(None, feed)[0]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        for r, i in enumerate(rows):
            k = int(p[r].argmax())
            results[i] = {"label": id2label[k], "score": float(p[r, k])}
    seconds = time.perf_counter() - start
    return seconds, results


def main():
    kind, ckpt, inputs, max_len, threads, batch, out_path = sys.argv[1:8]
    max_len, threads, batch = int(max_len), int(threads), int(batch)
    texts = read_texts(inputs)
    if kind == "pipeline":
        seconds, results = run_pipeline(ckpt, texts, max_len, threads, batch)
    elif kind == "ort":
        seconds, results = run_ort(ckpt, texts, max_len, threads, batch, sys.argv[8])
    else:
        sys.exit(f"predict_peer_bench.py: unknown peer {kind!r}; use pipeline or ort")
    tok = fast_tokenizer(ckpt, max_len)
    tokens = sum(len(e.ids) for e in tok.encode_batch(texts))
    with open(out_path, "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    print(json.dumps({"seconds": seconds, "texts": len(texts), "tokens": tokens}))


if __name__ == "__main__":
    main()
