"""The real peers of ft: Hugging Face Trainer, accelerate FSDP, DeepSpeed, peft.

Runs in the env of scripts/hf-env.sh (.venv-hf: torch, transformers, accelerate,
deepspeed, peft from PyPI) on ft's pre-tokenized rows (a safetensors file with
input_ids, attention_mask, token_type_ids, labels). Driven by
scripts/bench-hf-peers.sh, which starts it under the launcher each row needs:

  row           launcher                          what the library does
  single        python                            Trainer, one process
  ddp           torchrun --nproc_per_node N       Trainer, DDP over gloo
  ddp_amp       torchrun --nproc_per_node N       the same with bf16=True
  fsdp_full     accelerate launch (FSDP config)   FULL_SHARD, BertLayer auto-wrap
  fsdp_grad_op  accelerate launch (FSDP config)   SHARD_GRAD_OP
  ds_zero1/2/3  torchrun --nproc_per_node N       Trainer(deepspeed={zero stage k}), CPU accelerator, gloo
  lora          python                            peft LoRA r=8 (query, value; classifier trained) under Trainer
  gbl           python                            Trainer(train_sampling_strategy="group_by_length")
                                                  (transformers 5's name for group_by_length=True)

Rows and order are ft's: global batch s = rows [G s, G s + G), rank r of N
takes the r-th contiguous G/N of them (accelerate's batch-sampler sharding of
a sequential sampler gives exactly that); `gbl` uses HF's LengthGroupedSampler
instead, as ft's data.group_by_length replaces its order. Padding: `longest`
pads each rank's batch to its longest row, `max_length` keeps the file's width.
AdamW (torch), constant LR, no clipping, no evaluation, no checkpoints.

Every rank writes <out-dir>/rank<r>.json: samples/s over the steps after the
warm-up (rank 0's clock; 0 on other ranks), its peak RSS (ru_maxrss) and the
versions. `--collect DIR` merges them into one JSON line for the driver.
`--tokenize` writes the MiniLM workload's rows (IMDB, model's tokenizer).
"""
import argparse
import glob
import json
import os
import resource
import sys
import time


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def collect(out_dir):
    ranks = sorted(glob.glob(os.path.join(out_dir, "rank*.json")))
    if not ranks:
        print(json.dumps({"error": "no rank wrote a result"}))
        return 1
    rows = [json.load(open(p)) for p in ranks]
    rows.sort(key=lambda r: r["rank"])
    out = dict(rows[0])
    out.pop("rank", None)
    out.pop("peak_rss_mb", None)
    out["peak_rss_mb"] = [round(r["peak_rss_mb"], 1) for r in rows]
    print(json.dumps(out))
    return 0


def tokenize(args):
    """IMDB reviews -> the MiniLM workload's pre-tokenized rows (seeded draw; padded to max_len)."""
    import random

    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    rows = [json.loads(line) for line in open(args.tokenize, encoding="utf-8")]
    random.Random(123).shuffle(rows)  # the file is sorted by label
    if args.fill:
        # Long inputs: consecutive reviews joined into one text until it has
        # max_len tokens (each row's label is its first review's).
        lengths = [len(e.ids) for e in tok.encode_batch([r["text"] for r in rows])]
        joined, i = [], 0
        while len(joined) < args.rows:
            if i >= len(rows):
                raise SystemExit(f"hf-peer: {args.tokenize} has too few reviews for {args.rows} rows of {args.max_len}")
            first, text, count = rows[i], [], 0
            while count < args.max_len and i < len(rows):
                text.append(rows[i]["text"])
                count += lengths[i]
                i += 1
            joined.append({"text": "\n\n".join(text), "label": first["label"]})
        rows = joined
    tok.enable_truncation(args.max_len)
    tok.enable_padding(length=args.max_len, pad_id=0)
    rows = rows[: args.rows]
    labels = {"neg": 0, "pos": 1}
    enc = tok.encode_batch([r["text"] for r in rows])
    t = {
        "input_ids": torch.tensor([e.ids for e in enc], dtype=torch.int64),
        "attention_mask": torch.tensor([e.attention_mask for e in enc], dtype=torch.int64),
        "token_type_ids": torch.tensor([e.type_ids for e in enc], dtype=torch.int64),
        "labels": torch.tensor([labels.get(r["label"], r["label"]) if isinstance(r["label"], str) else int(r["label"])
                                for r in rows], dtype=torch.int64),
    }
    save_file(t, args.out)
    real = t["attention_mask"].sum().item() / t["attention_mask"].numel()
    print(f"hf-peer: wrote {args.out}: {len(rows)} rows x {args.max_len} tokens, {100 * real:.0f} % real tokens")
    return 0


# The generated workloads' models: (committed tokenizer, config keys).
MADE_MODELS = {
    # DeBERTa-v3's settings at xsmall's shape (12 x 384, 256 position buckets).
    "deberta": ("deberta-unigram", dict(
        model_type="deberta-v2", hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
        intermediate_size=1536, max_position_embeddings=512, relative_attention=True, position_buckets=256,
        max_relative_positions=-1, pos_att_type="p2c|c2p", share_att_key=True, norm_rel_ebd="layer_norm",
        position_biased_input=False, type_vocab_size=0, layer_norm_eps=1e-7)),
    # ModernBERT-base's settings (no biases, 128-token windows, every third
    # layer global, mean pooling) at 12 x 384: 256-token rows reach past the windows.
    "modernbert": ("modern-bpe", dict(
        model_type="modernbert", hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
        intermediate_size=576, max_position_embeddings=8192, local_attention=128, global_attn_every_n_layers=3,
        classifier_pooling="mean")),
}


def make_model(kind, out):
    """A generated workload's random-init classifier, with its committed tokenizer, saved to `out`."""
    import shutil

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForSequenceClassification

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tokenizer, keys = MADE_MODELS[kind]
    tok_file = os.path.join(repo, "tests", "data", "hf", "tokenizers", tokenizer + ".tokenizer.json")
    tok = Tokenizer.from_file(tok_file)
    keys = dict(keys)
    cfg = AutoConfig.for_model(keys.pop("model_type"), vocab_size=tok.get_vocab_size(),
                               pad_token_id=tok.token_to_id("<pad>"), num_labels=2, **keys)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(cfg, attn_implementation="eager")
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    shutil.copy(tok_file, os.path.join(out, "tokenizer.json"))
    print(f"hf-peer: wrote {out}: {kind}, {cfg.num_hidden_layers} x {cfg.hidden_size}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--row", choices=["single", "ddp", "ddp_amp", "fsdp_full", "fsdp_grad_op", "ds_zero1", "ds_zero2",
                                     "ds_zero3", "lora", "gbl"])
    p.add_argument("--data", help="pre-tokenized rows (safetensors)")
    p.add_argument("--model", help="HF model directory (weights loaded) or a directory/config.json (random init)")
    p.add_argument("--padding", choices=["longest", "max_length"], default="longest")
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per rank; 0 = cores / ranks")
    p.add_argument("--no-pin", action="store_true", help="do not pin each local rank to its own CPUs")
    p.add_argument("--optim", default="adamw_torch", help="TrainingArguments.optim (non-DeepSpeed rows)")
    p.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa (default) or eager")
    p.add_argument("--out-dir", help="where each rank writes rank<r>.json")
    p.add_argument("--collect", metavar="DIR", help="merge DIR/rank*.json into one JSON line and exit")
    p.add_argument("--tokenize", metavar="JSONL", help="write the MiniLM workload's rows from IMDB JSON Lines")
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--out", help="--tokenize: the safetensors file to write")
    p.add_argument("--fill", action="store_true",
                   help="--tokenize: join consecutive reviews until each row has --max-len tokens (long inputs)")
    p.add_argument("--make", nargs=2, metavar=("KIND", "DIR"),
                   help="write a generated workload's random-init classifier (KIND: deberta, a DeBERTa-v3-xsmall "
                        "shape; modernbert, ModernBERT's settings at 12 x 384) with its committed tokenizer to DIR, "
                        "and exit")
    args = p.parse_args()
    if args.collect:
        return collect(args.collect)
    if args.make:
        return make_model(*args.make)
    if args.tokenize:
        return tokenize(args)
    for need in ("row", "data", "model", "out-dir"):
        if getattr(args, need.replace("-", "_")) is None:
            p.error(f"--{need} is required")
    return train(args)


def train(args):
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

    import torch
    torch.set_num_threads(threads)
    import transformers
    from safetensors.torch import load_file
    from transformers import (AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification, Trainer,
                              TrainerCallback, TrainingArguments)

    transformers.logging.set_verbosity_error()
    data = load_file(args.data)
    n_labels = int(data["labels"].max()) + 1
    lengths = data["attention_mask"].sum(1).tolist()
    longest = args.padding == "longest" or args.row == "gbl"
    width = data["input_ids"].shape[1]

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return data["labels"].shape[0]

        def __getitem__(self, i):
            n = lengths[i] if longest else width
            return {"input_ids": data["input_ids"][i, :n], "attention_mask": data["attention_mask"][i, :n],
                    "token_type_ids": data["token_type_ids"][i, :n], "labels": data["labels"][i]}

    def collate(items):
        n = max(x["input_ids"].shape[0] for x in items)
        out = {}
        for k in ("input_ids", "attention_mask", "token_type_ids"):
            t = torch.zeros(len(items), n, dtype=torch.int64)
            for j, x in enumerate(items):
                t[j, :x[k].shape[0]] = x[k]
            out[k] = t
        out["labels"] = torch.stack([x["labels"] for x in items])
        return out

    torch.manual_seed(42)
    model_dir = args.model if os.path.isdir(args.model) else os.path.dirname(args.model)
    has_weights = any(os.path.exists(os.path.join(model_dir, f)) for f in ("model.safetensors", "pytorch_model.bin"))
    if has_weights:
        try:
            model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=n_labels,
                                                                       attn_implementation=args.attn)
        except ValueError as e:  # a family without SDPA (DeBERTa-v2): its own, eager, attention
            if "attn_implementation" not in str(e) and "does not support" not in str(e):
                raise
            model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=n_labels,
                                                                       attn_implementation="eager")
    else:
        cfg_path = args.model if args.model.endswith(".json") else os.path.join(model_dir, "config.json")
        cfg = BertConfig.from_json_file(cfg_path)
        cfg.num_labels = max(cfg.num_labels, n_labels)
        cfg._attn_implementation = args.attn
        model = BertForSequenceClassification(cfg)
    if args.row == "lora":
        from peft import LoraConfig, TaskType, get_peft_model
        model = get_peft_model(model, LoraConfig(task_type=TaskType.SEQ_CLS, r=8, lora_alpha=16, lora_dropout=0.0,
                                                 target_modules=["query", "value"]))

    ds_config = None
    if args.row.startswith("ds_zero"):
        ds_config = {
            "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "steps_per_print": 10 ** 9, "wall_clock_breakdown": False,
            "zero_optimization": {"stage": int(args.row[-1])},
            "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                      "weight_decay": "auto", "torch_adam": True, "adam_w_mode": True}},
            "bf16": {"enabled": False}, "fp16": {"enabled": False},
        }

    steps = min(args.steps, data["labels"].shape[0] // args.global_batch)
    targs = TrainingArguments(
        output_dir=os.path.join(args.out_dir, "trainer"), max_steps=steps,
        per_device_train_batch_size=args.global_batch // world, learning_rate=args.lr,
        weight_decay=args.weight_decay, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=0.0,
        optim=args.optim, bf16=args.row == "ddp_amp", use_cpu=True, seed=42, ddp_backend="gloo" if world > 1 else None,
        # Trainer's default for a PreTrainedModel is find_unused_parameters=True (one more autograd
        # traversal per step); every parameter is used here, so the peer's best setting is False.
        ddp_find_unused_parameters=False if world > 1 else None,
        train_sampling_strategy="group_by_length" if args.row == "gbl" else "sequential",
        save_strategy="no", eval_strategy="no", logging_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, remove_unused_columns=False, deepspeed=ds_config)

    clock = {}

    class Timer(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            if state.global_step == args.warmup:
                clock["start"] = time.perf_counter()
            clock["end"] = time.perf_counter()

    trainer = Trainer(model=model, args=targs, train_dataset=Rows(), data_collator=collate, callbacks=[Timer()])
    out = trainer.train()
    timed = clock["end"] - clock["start"]
    import accelerate
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "accelerate": accelerate.__version__}
    for mod in ("deepspeed", "peft"):
        if mod in sys.modules:
            versions[mod] = sys.modules[mod].__version__
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    result = {"row": args.row, "rank": rank, "world_size": world, "threads_per_rank": torch.get_num_threads(),
              "pinned": world > 1 and not args.no_pin, "steps": steps, "warmup": args.warmup,
              "samples_per_s": args.global_batch * (steps - args.warmup) / timed if rank == 0 else 0.0,
              "train_loss": out.training_loss, "peak_rss_mb": rss_mb(), "trainable_params": trainable,
              "versions": versions}
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    # An explicit teardown: left to interpreter exit, a bf16 DDP rank of torch 2.15 sometimes
    # aborted ("terminate called without an active exception") after training had finished.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
