#!/usr/bin/env python3
"""Model-FLOPs utilisation of a training row, against this machine's measured sgemm peak.

    .venv-hf/bin/python scripts/mfu.py --data bench-out/hf-peers/imdb-minilm.safetensors \
        --model data/all-minilm-l6-v2 --samples-per-s 8.1 [--rows 640] [--threads 2]
    .venv-hf/bin/python scripts/mfu.py --gemm-peaks [--threads 2]   # fp32 vs bf16 GEMM peaks only

The peak: the best of torch.mm (fp32) on square matrices of 512..4096 with --threads intra-op
threads, in this interpreter's torch (the PyPI wheel's oneDNN/MKL sgemm) and in Debian's
/usr/bin/python3 torch (OpenBLAS) when present: whichever sgemm this machine runs fastest.

The model FLOPs count real tokens only (padding does no useful work), forward + backward:
  per row of t real tokens: 6 * P * t + 12 * L * h * t^2
P: the encoder's matmul weights (attention q/k/v/o and the two feed-forward matrices of every
layer, the pooler and the classifier; not the embeddings, which are gathers), L layers, hidden
h (the t^2 term: the attention scores and their use on the values, 4 t^2 h per layer forward,
twice that backward). The rows are the first --rows of the data file, in the order the bench
trains them (global batch 32, 20 steps: 640).
"""
import argparse
import json
import os
import subprocess
import sys
import time

PEAK_SNIPPET = r"""
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.float32
best = 0.0
for n in (512, 1024, 2048, 4096):
    a = torch.randn(n, n, dtype=dtype); b = torch.randn(n, n, dtype=dtype)
    for _ in range(2): torch.mm(a, b)
    reps = max(3, int(2e10 / (2 * n ** 3)))
    t0 = time.perf_counter()
    for _ in range(reps): torch.mm(a, b)
    best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0))
print(best)
"""


def peak(python, threads, dtype="float32"):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([python, "-c", PEAK_SNIPPET, str(threads), dtype], capture_output=True, text=True, env=env)
    return float(out.stdout.strip()) if out.returncode == 0 else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gemm-peaks", action="store_true",
                   help="only print the fp32 and bf16 GEMM peaks (this interpreter's torch) at 1 and --threads threads")
    p.add_argument("--data", help="pre-tokenized rows (safetensors with attention_mask)")
    p.add_argument("--model", help="model directory (config.json)")
    p.add_argument("--samples-per-s", type=float)
    p.add_argument("--rows", type=int, default=640)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--labels", type=int, default=2)
    args = p.parse_args()
    if args.gemm_peaks:  # no data or model needed
        out = {}
        for n in sorted({1, args.threads}):
            for dtype in ("float32", "bfloat16"):
                v = peak(sys.executable, n, dtype)
                out[f"{dtype} x{n} threads GFLOP/s"] = round(v / 1e9, 1) if v else None
        print(json.dumps(out))
        return
    if args.data is None or args.model is None or args.samples_per_s is None:
        p.error("--data, --model and --samples-per-s are required (or --gemm-peaks)")

    from safetensors.torch import load_file

    cfg = json.load(open(os.path.join(args.model, "config.json")))
    h, L, ff = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    matmul_params = L * (4 * h * h + 2 * h * ff) + h * h + h * args.labels
    mask = load_file(args.data)["attention_mask"][: args.rows]
    t = mask.sum(dim=1).double()
    flops_per_row = (6 * matmul_params * t + 12 * L * h * t * t).mean().item()

    peaks = {"wheel torch (this interpreter)": peak(sys.executable, args.threads)}
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        peaks["Debian torch (/usr/bin/python3)"] = peak("/usr/bin/python3", args.threads)
    best_name, best = max(((k, v) for k, v in peaks.items() if v), key=lambda kv: kv[1])
    achieved = args.samples_per_s * flops_per_row
    print(json.dumps({
        "matmul_params": matmul_params, "rows": int(mask.shape[0]), "mean_real_tokens": round(t.mean().item(), 1),
        "gflop_per_row": round(flops_per_row / 1e9, 3),
        "sgemm_peak_gflops": {k: (round(v / 1e9, 1) if v else None) for k, v in peaks.items()},
        "achieved_gflops": round(achieved / 1e9, 1), "mfu_of_best_sgemm": round(achieved / best, 3),
        "best_sgemm": best_name}))


if __name__ == "__main__":
    main()
