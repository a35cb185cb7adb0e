"""The real peer of ft's sentence-embedding task: sentence-transformers' own trainer.

SentenceTransformerTrainer with MultipleNegativesRankingLoss (scale 20: cosine
similarities times 20, cross-entropy of each anchor against every positive of
the batch), or CachedMultipleNegativesRankingLoss (--cached: GradCache, the
batch embedded in mini-batches of --mini-batch-size), on (anchor, positive)
rows of JSON Lines (data/imdb-pairs/train.jsonl from scripts/fetch-pairs.sh).
Runs in the env of scripts/hf-env.sh (.venv-hf) with sentence-transformers
and datasets added (6.2.0 and 5.2.0 when this was written).

  --nproc 1  plain python, the Trainer in this process
  --nproc 2  this script re-started under torchrun (DDP over gloo), as
             scripts/bench-hf-peers.sh starts hf_peer_bench.py's ddp row; the
             loss gathers every rank's embeddings (gather_across_devices=True),
             so each anchor's negatives are the positives of the global batch,
             as on one process (--local-negatives: only the rank's own)

The model: --model's sentence-transformers directory when it has modules.json,
else (a bare BertModel such as data/all-minilm-l6-v2) Transformer + mean
Pooling + Normalize, all-MiniLM-L6-v2's own stack. max_seq_length is
--max-seq-len; the trainer's collator tokenizes each batch as it comes (each
column padded to its longest row, truncated to max_seq_length), so the
tokenizer is inside the timed steps, as for any user of this trainer. The
BertModel's pooler is frozen: mean pooling never uses it, so it would get no
gradient anyway (AdamW skips such parameters) and DDP can run with
find_unused_parameters=False, the peer's best setting (the Trainer's default
for a model that is not a PreTrainedModel is True: one more autograd pass).

Rows and order are those of hf_peer_bench.py: the first --rows rows of the
file in file order (make-pairs.js already ordered them by SHA-256), global
batch s = rows [G s, G s + G) with G = --batch-size x nproc, rank r takes the
r-th contiguous --batch-size of them (a sequential batch sampler, which
accelerate shards batch by batch); steps = min(--steps, rows // G). AdamW
(torch), constant LR, no clipping, no evaluation, no checkpoints, fp32.

Threads, warm-up and samples/s as hf_peer_bench.py: --threads intra-op
threads per rank (0 = cores / ranks; OMP_NUM_THREADS too), ranks pinned to
their own cores (--no-pin: not), samples/s = G x (steps - warmup) / the time
from the end of step --warmup to the end of the last step on rank 0's clock.
A sample is one (anchor, positive) pair: two sequences through the encoder.

Output: one JSON line on stdout, hf_peer_bench.py's fields (row, world_size,
threads_per_rank, pinned, steps, warmup, samples_per_s, train_loss,
peak_rss_mb per rank, trainable_params, versions) and this workload's (loss,
batch_per_rank, global_batch, max_seq_len, rows, gather_across_devices,
mini_batch_size). Every rank writes <out-dir>/rank<r>.json first (a temp dir
unless --out-dir); under a launcher of your own (torchrun with WORLD_SIZE
set), the ranks only write those and `--collect DIR` merges them, as for
hf_peer_bench.py.

  .venv-hf/bin/python scripts/st_peer_bench.py --rows 2048 --batch-size 32 --max-seq-len 256 --steps 20
  .venv-hf/bin/python scripts/st_peer_bench.py --nproc 2 --batch-size 16 ...   (global batch 32)
  .venv-hf/bin/python scripts/st_peer_bench.py --cached --mini-batch-size 8 ...
"""
import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_peer_bench import collect, rss_mb  # noqa: E402  (stdlib only at import)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="data/imdb-pairs/train.jsonl", help="JSON Lines with anchor and positive")
    p.add_argument("--model", default="data/all-minilm-l6-v2",
                   help="a sentence-transformers directory, or an HF encoder directory (mean pooling added)")
    p.add_argument("--rows", type=int, default=2048, help="the first ROWS rows of --data")
    p.add_argument("--batch-size", type=int, default=32, help="pairs per rank per step")
    p.add_argument("--max-seq-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of samples/s")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per rank; 0 = cores / ranks")
    p.add_argument("--nproc", type=int, choices=[1, 2], default=1,
                   help="ranks (2: torchrun, DDP over gloo); under a launcher of your own, its WORLD_SIZE")
    p.add_argument("--no-pin", action="store_true", help="do not pin each local rank to its own CPUs")
    p.add_argument("--cached", action="store_true", help="CachedMultipleNegativesRankingLoss (GradCache)")
    p.add_argument("--mini-batch-size", type=int, default=32, help="--cached: pairs embedded at a time")
    p.add_argument("--local-negatives", action="store_true",
                   help="with --nproc 2: no gather across ranks (negatives from the rank's own batch only)")
    p.add_argument("--scale", type=float, default=20.0)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--optim", default="adamw_torch", help="TrainingArguments.optim")
    p.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa (default) or eager")
    p.add_argument("--out-dir", help="where each rank writes rank<r>.json (default: a temp dir)")
    p.add_argument("--collect", metavar="DIR", help="merge DIR/rank*.json into one JSON line and exit")
    return p, p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    """--nproc 2 from a plain python: this script again under torchrun; then the merged line."""
    cores = len(os.sched_getaffinity(0))
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads or max(1, cores // args.nproc)),
               TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), os.path.abspath(__file__)]
    # Without --nproc: torchrun's own parser would take it for an abbreviation of its
    # --nproc-per-node. The ranks count themselves from WORLD_SIZE.
    argv, skip = [], False
    for a in sys.argv[1:]:
        if skip or a.startswith("--nproc="):
            skip = False
            continue
        skip = a == "--nproc"
        if not skip:
            argv.append(a)
    cmd += argv
    if not args.out_dir:
        cmd += ["--out-dir", args.run_dir]
    # The ranks' own output (the Trainer's log lines) goes to stderr: stdout is the JSON line only.
    rc = subprocess.call(cmd, env=env, stdout=sys.stderr)
    if rc != 0:
        print(json.dumps({"error": f"torchrun exited {rc}"}))
        return rc
    return collect(args.run_dir)


def load_rows(path, n):
    anchors, positives = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if len(anchors) == n:
                break
            row = json.loads(line)
            anchors.append(row["anchor"])
            positives.append(row["positive"])
    if len(anchors) < n:
        raise SystemExit(f"st-peer: {path} has {len(anchors)} rows, --rows asks for {n}")
    return {"anchor": anchors, "positive": positives}


def train(args, p):
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    cpus = sorted(os.sched_getaffinity(0))
    threads = args.threads or max(1, len(cpus) // local_world)
    if world > 1 and not args.no_pin:  # each rank its own cores, as ft pins its ranks
        share = max(1, len(cpus) // local_world)
        os.sched_setaffinity(0, cpus[share * local_rank:share * (local_rank + 1)])
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import datasets
    import torch
    torch.set_num_threads(threads)
    import sentence_transformers
    import transformers
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments)
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from sentence_transformers.sentence_transformer.losses import (CachedMultipleNegativesRankingLoss,
                                                                   MultipleNegativesRankingLoss)
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import TrainerCallback

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    global_batch = args.batch_size * world
    steps = min(args.steps, args.rows // global_batch)
    if steps <= args.warmup:
        p.error(f"{steps} steps (--rows {args.rows} // global batch {global_batch}, at most --steps) leave none "
                f"after --warmup {args.warmup}: raise --rows or --steps")
    train_ds = datasets.Dataset.from_dict(load_rows(args.data, args.rows))

    torch.manual_seed(42)
    model_kwargs = {"attn_implementation": args.attn}
    if os.path.exists(os.path.join(args.model, "modules.json")):
        model = SentenceTransformer(args.model, device="cpu", model_kwargs=model_kwargs)
        model.max_seq_length = args.max_seq_len
    else:
        enc = Transformer(args.model, max_seq_length=args.max_seq_len, model_kwargs=model_kwargs)
        model = SentenceTransformer(modules=[enc, Pooling(enc.get_embedding_dimension(), pooling_mode="mean"),
                                             Normalize()], device="cpu")
    pooler = getattr(model[0].auto_model, "pooler", None)
    if pooler is not None:
        pooler.requires_grad_(False)

    gather = world > 1 and not args.local_negatives
    if args.cached:
        loss = CachedMultipleNegativesRankingLoss(model, scale=args.scale, mini_batch_size=args.mini_batch_size,
                                                  gather_across_devices=gather)
    else:
        loss = MultipleNegativesRankingLoss(model, scale=args.scale, gather_across_devices=gather)

    def sequential(dataset, batch_size, drop_last, valid_label_columns=None, generator=None, seed=0):
        return DefaultBatchSampler(torch.utils.data.SequentialSampler(dataset), batch_size=batch_size,
                                   drop_last=drop_last, valid_label_columns=valid_label_columns,
                                   generator=generator, seed=seed)

    targs = SentenceTransformerTrainingArguments(
        output_dir=os.path.join(args.run_dir, "trainer"), max_steps=steps,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, weight_decay=args.weight_decay,
        lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=0.0, optim=args.optim, use_cpu=True, seed=42,
        ddp_backend="gloo" if world > 1 else None, ddp_find_unused_parameters=False if world > 1 else None,
        batch_sampler=sequential, dataloader_drop_last=True, save_strategy="no", eval_strategy="no",
        logging_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0)

    clock = {}

    class Timer(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            if state.global_step == args.warmup:
                clock["start"] = time.perf_counter()
            clock["end"] = time.perf_counter()

    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=train_ds, loss=loss,
                                         callbacks=[Timer()])
    out = trainer.train()
    timed = clock["end"] - clock["start"]
    import accelerate
    import tokenizers
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "accelerate": accelerate.__version__, "sentence_transformers": sentence_transformers.__version__,
                "datasets": datasets.__version__, "tokenizers": tokenizers.__version__}
    trainable = sum(q.numel() for q in model.parameters() if q.requires_grad)
    result = {"row": "single" if world == 1 else "ddp", "rank": rank, "world_size": world,
              "threads_per_rank": torch.get_num_threads(), "pinned": world > 1 and not args.no_pin,
              "steps": steps, "warmup": args.warmup,
              "samples_per_s": global_batch * (steps - args.warmup) / timed if rank == 0 else 0.0,
              "train_loss": out.training_loss, "peak_rss_mb": rss_mb(), "trainable_params": trainable,
              "versions": versions,
              "loss": "cached_mnrl" if args.cached else "mnrl", "scale": args.scale,
              "batch_per_rank": args.batch_size, "global_batch": global_batch, "max_seq_len": args.max_seq_len,
              "rows": args.rows, "gather_across_devices": gather,
              "mini_batch_size": args.mini_batch_size if args.cached else None}
    os.makedirs(args.run_dir, exist_ok=True)
    with open(os.path.join(args.run_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


def main():
    p, args = parse_args()
    if args.collect:
        return collect(args.collect)
    if args.cached and args.mini_batch_size < 1:
        p.error("--mini-batch-size must be >= 1")
    under_launcher = "WORLD_SIZE" in os.environ
    if not under_launcher and min(args.steps, args.rows // (args.batch_size * args.nproc)) <= args.warmup:
        p.error(f"--rows {args.rows} give {args.rows // (args.batch_size * args.nproc)} steps of global batch "
                f"{args.batch_size * args.nproc} (at most --steps {args.steps}): none left after --warmup "
                f"{args.warmup}; raise --rows or --steps")
    tmp = None
    if args.out_dir:
        args.run_dir = args.out_dir
        if not under_launcher and os.path.isdir(args.out_dir):  # a stale rank file must not be merged
            for name in os.listdir(args.out_dir):
                if name.startswith("rank") and name.endswith(".json"):
                    os.remove(os.path.join(args.out_dir, name))
    else:
        if under_launcher:
            p.error("under a launcher, give --out-dir (each rank writes its rank<r>.json there)")
        tmp = args.run_dir = tempfile.mkdtemp(prefix="st-peer-")
    try:
        if under_launcher:
            return train(args, p)
        if args.nproc > 1:
            return launch(args)
        with contextlib.redirect_stdout(sys.stderr):  # the Trainer's own prints; stdout is the JSON line
            rc = train(args, p)
        return rc or collect(args.run_dir)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
