#!/usr/bin/python3
"""The PyTorch peer of `ft bench`: PyTorch's own Python stack on ft's bench rows.

One run = one strategy, one thread setting, printed as one JSON line:
  single   one process
  ddp      torch.nn.parallel.DistributedDataParallel, gloo, N processes
  ddp_amp  the same under torch.autocast("cpu", bfloat16)
  zero1    DDP + torch.distributed.optim.ZeroRedundancyOptimizer(AdamW)

--device cuda runs the same rows on a GPU (scripts/gpu-bench.sh): --precision bf16
is torch.autocast("cuda", bfloat16), --attn sdpa is
F.scaled_dot_product_attention (the fused kernels), --config swaps in another
model shape (BERT-base's) over the fixture's rows.

The model is a BERT sequence classifier written here with the Hugging Face
architecture and initialisation scheme (normal(0, initializer_range) weights,
zero biases, LayerNorm (1, 0), zero padding row), sized by the fixture's
config.json. Rows, batch order and hyper-parameters are those of ft's bench
workloads: global batch s is rows [32s, 32s+32), rank r of N takes its
contiguous 32/N of them, AdamW over all parameters. Throughput leaves out the
first two steps, as ft's summary does.

Used by scripts/bench-peer.sh; needs Debian's python3-torch, nothing else.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"I64": torch.int64, "F32": torch.float32}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.heads = c["num_attention_heads"]
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out, self.attn_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.inter, self.out = nn.Linear(h, i), nn.Linear(i, h)
        self.out_norm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.drop = nn.Dropout(c["hidden_dropout_prob"])
        self.attn_drop = nn.Dropout(c["attention_probs_dropout_prob"])
        self.sdpa = c.get("_sdpa", False)

    def forward(self, x, mask):
        b, s, h = x.shape
        d = h // self.heads

        def split(t):
            return t.view(b, s, self.heads, d).permute(0, 2, 1, 3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        if self.sdpa:
            p = self.attn_drop.p if self.training else 0.0
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), dropout_p=p)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + mask
            ctx = torch.matmul(self.attn_drop(scores.softmax(-1)), v)
        ctx = ctx.permute(0, 2, 1, 3).reshape(b, s, h)
        a = self.attn_norm(self.drop(self.attn_out(ctx)) + x)
        return self.out_norm(self.drop(self.out(F.gelu(self.inter(a)))) + a)


class Bert(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.word = nn.Embedding(c["vocab_size"], h, padding_idx=c["pad_token_id"])
        self.pos = nn.Embedding(c["max_position_embeddings"], h)
        self.token_type = nn.Embedding(c["type_vocab_size"], h)
        self.norm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.drop = nn.Dropout(c["hidden_dropout_prob"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.pooler = nn.Linear(h, h)
        self.classifier = nn.Linear(h, c["num_labels"])
        std = c["initializer_range"]
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        with torch.no_grad():
            self.word.weight[c["pad_token_id"]].zero_()

    def forward(self, ids, mask, types):
        s = ids.shape[1]
        x = self.word(ids) + self.token_type(types) + self.pos(torch.arange(s, device=ids.device)).unsqueeze(0)
        x = self.drop(self.norm(x))
        additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, additive)
        return self.classifier(self.drop(torch.tanh(self.pooler(x[:, 0]))))


def batch_rows(data, step, rank, world, trim):
    per = 32 // world
    lo = 32 * step + per * rank
    ids, mask, types = (data[k][lo:lo + per] for k in ("input_ids", "attention_mask", "token_type_ids"))
    if trim:  # pad to the batch's longest row (ft's padding: longest)
        width = int(mask.sum(1).max())
        ids, mask, types = ids[:, :width], mask[:, :width], types[:, :width]
    return ids, mask, types, data["labels"][lo:lo + per]


def train(rank, args, result_path):
    world = args.nproc
    if args.pin and world > 1:
        cpus = sorted(os.sched_getaffinity(0))
        share = len(cpus) // world
        os.sched_setaffinity(0, cpus[share * rank:share * (rank + 1)])
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(args.port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    config = json.load(open(args.config or os.path.join(args.fixture, "config.json")))
    config["_sdpa"] = args.attn == "sdpa"
    data = read_safetensors(os.path.join(args.fixture, "data.safetensors"))
    device = torch.device(args.device)
    torch.manual_seed(42)
    model = Bert(config).to(device)
    params = list(model.parameters())
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    if args.strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=args.lr,
                                      weight_decay=args.weight_decay)
    else:
        opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    model.train()
    steps = min(args.steps, data["labels"].shape[0] // 32)
    bf16 = args.strategy == "ddp_amp" or args.precision == "bf16"
    timed, start = 0.0, None
    for step in range(steps):
        if step == args.warmup:
            start = time.perf_counter()
        rows = batch_rows(data, step, rank, world, args.padding == "longest")
        ids, mask, types, labels = (t.to(device, non_blocking=True) for t in rows)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(ids, mask, types).float(), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
    timed = time.perf_counter() - start
    if rank == 0:
        with open(result_path, "w") as f:
            result = {"samples_per_s": 32 * (steps - args.warmup) / timed, "steps": steps,
                      "threads": torch.get_num_threads(), "final_loss": loss.item()}
            if device.type == "cuda":  # as ft's summary: PyTorch's allocator peak, MiB
                result["peak_device_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
            json.dump(result, f)
    if world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fixture", required=True, help="../shared/fixtures/bench-mini or bench-weibo")
    p.add_argument("--strategy", choices=["single", "ddp", "ddp_amp", "zero1"], required=True)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per process; 0 = PyTorch's default")
    p.add_argument("--pin", action="store_true", help="pin each rank to its own CPUs")
    p.add_argument("--padding", choices=["longest", "max_length"], default="longest")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--port", type=int, default=29533)
    p.add_argument("--device", default="cpu", help="cpu, or cuda (one process)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast (ddp_amp implies it)")
    p.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    p.add_argument("--config", help="a config.json to use instead of the fixture's (same rows)")
    args = p.parse_args()
    if args.strategy != "single" and args.nproc < 2:
        p.error(f"--strategy {args.strategy} needs --nproc >= 2")
    result = os.path.join("/tmp", f"peer-bench-{os.getpid()}.json")
    if args.nproc > 1:
        mp.spawn(train, args=(args, result), nprocs=args.nproc)
    else:
        train(0, args, result)
    with open(result) as f:
        out = json.load(f)
    os.remove(result)
    out.update(strategy=args.strategy, nproc=args.nproc, pinned=args.pin)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
