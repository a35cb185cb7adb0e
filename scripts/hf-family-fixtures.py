#!/usr/bin/env python3
"""Writes tests/data/hf/families/<family>/: a tiny random-init model of each
encoder family, built and trained by transformers itself.

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/hf-family-fixtures.py [--only roberta] [--out DIR]

Inputs: data/imdb/train.jsonl, ../shared/data/weibo-emotion/train.json and the
committed tokenizer fixtures (tests/data/hf/tokenizers/). Only token ids and
numbers are written, never text. tests/data/hf/README.md describes the files.

Deterministic: torch.manual_seed(0) before each model is built, one intra-op
thread, fp32 on the CPU, dropout 0 in every config.
"""
import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig, AutoModelForMaskedLM, AutoModelForSequenceClassification)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_fixture_common import (  # noqa: E402
    IMDB, IMDB_REL, REPO, WEIBO, WEIBO_REL, one_key, read_imdb, read_weibo, sha256_file)
from hf_fixture_trainer import tiny_trainer_losses, write_ref_losses  # noqa: E402

TOKENIZERS = os.path.join(REPO, "tests", "data", "hf", "tokenizers")
MAX_LEN = 64
# Logits and one step's gradients: 16 negative, 16 positive reviews and 16 posts.
EVAL_IMDB = list(range(0, 16)) + list(range(25000, 25016))
EVAL_WEIBO = list(range(0, 16))
# The Trainer run: 64 negative and 64 positive reviews, interleaved.
TRAIN_ROWS = [r for pair in zip(range(1000, 1064), range(26000, 26064)) for r in pair]

# Each family: its config (transformers' own class and defaults, made tiny),
# and the committed tokenizer whose ids it reads.
FAMILIES = {
    "roberta": {
        "model_type": "roberta", "tokenizer": "roberta-bpe",
        # As roberta-base ships: one token type, LayerNorm eps 1e-5.
        "config": {"type_vocab_size": 1, "layer_norm_eps": 1e-5},
    },
    "xlm-roberta": {
        "model_type": "xlm-roberta", "tokenizer": "xlmr-unigram",
        "config": {"type_vocab_size": 1, "layer_norm_eps": 1e-5},
    },
    # Embeddings half as wide as the layers, as electra-small (128 / 256):
    # electra.embeddings_project widens them.
    "electra": {
        "model_type": "electra", "tokenizer": "wordend-bpe", "pad": "[PAD]",
        "config": {"embedding_size": 16},
    },
    # DistilBertConfig names its keys otherwise (dim, hidden_dim, dropout, ...);
    # the BERT names in TINY that it maps (hidden_size -> dim, ...) apply, the rest are set here.
    "distilbert": {
        "model_type": "distilbert", "tokenizer": "wordend-bpe", "pad": "[PAD]", "mask": "[MASK]",
        "mlm_bias": "vocab_projector.bias",
        "config": {"hidden_dim": 64, "dropout": 0.0, "attention_dropout": 0.0, "seq_classif_dropout": 0.0},
    },
    # DeBERTa-v3's settings (no absolute positions, no token types, shared
    # relative-position keys, a LayerNorm on the position table), with 16
    # position buckets: distances past 8 fall into log-spaced buckets, so the
    # 64-token rows exercise both halves of the bucket function.
    "deberta-v2": {
        "model_type": "deberta-v2", "tokenizer": "deberta-unigram", "mlm_bias": "cls.predictions.bias",
        "config": {"relative_attention": True, "position_buckets": 16, "max_relative_positions": -1,
                   "pos_att_type": "p2c|c2p", "share_att_key": True, "norm_rel_ebd": "layer_norm",
                   "position_biased_input": False, "type_vocab_size": 0, "layer_norm_eps": 1e-7,
                   "pooler_dropout": 0.0, "pooler_hidden_size": 32},
    },
    # ModernBERT as ModernBERT-base ships it (no biases, mean pooling, layer 0
    # global and layer 1 local), with a 16-token window: 8 tokens each way,
    # so the 64-token rows reach past it.
    "modernbert": {
        "model_type": "modernbert", "tokenizer": "modern-bpe", "mlm_bias": "decoder.bias",
        "config": {"local_attention": 16, "global_attn_every_n_layers": 3, "classifier_pooling": "mean",
                   "bos_token_id": 0, "cls_token_id": 0, "eos_token_id": 2, "sep_token_id": 2,
                   "embedding_dropout": 0.0, "mlp_dropout": 0.0, "attention_dropout": 0.0,
                   "classifier_dropout": 0.0},
    },
}
# initializer_range 0.2 (not 0.02): at hidden 32 the default gives logits near
# zero and a loss that stays at ln 2, and a flat trajectory checks nothing.
TINY = dict(initializer_range=0.2, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2,
            id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})


def versions():
    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "tokenizers": tokenizers.__version__, "transformers": transformers.__version__}


def encode(tok, texts, pad_id):
    """ids, mask, zero types [N, width]: truncated at MAX_LEN, padded to the longest."""
    tok.enable_truncation(MAX_LEN)
    encs = tok.encode_batch(texts)
    width = max(len(e.ids) for e in encs)
    ids = torch.full((len(encs), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(encs), width), dtype=torch.int64)
    for i, e in enumerate(encs):
        ids[i, :len(e.ids)] = torch.tensor(e.ids)
        mask[i, :len(e.ids)] = 1
    return ids, mask, torch.zeros_like(ids)


def tiny_config(spec, tok):
    """The family's tiny config for `tok`'s vocabulary, its pad token and MAX_LEN tokens."""
    pad_id = tok.token_to_id(spec.get("pad", "<pad>"))
    # RoBERTa's positions start after the padding index.
    return AutoConfig.for_model(spec["model_type"], vocab_size=tok.get_vocab_size(), pad_token_id=pad_id,
                                max_position_embeddings=MAX_LEN + pad_id + 1, **TINY, **spec["config"])


def build(spec, tok):
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(tiny_config(spec, tok), attn_implementation="eager")


def make_family(name, out, imdb, weibo):
    spec = FAMILIES[name]
    tok_file = os.path.join(TOKENIZERS, spec["tokenizer"] + ".tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(tok_file)
    pad_id = tok.token_to_id(spec.get("pad", "<pad>"))
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model = build(spec, tok)
    model.save_pretrained(d)

    # (a) logits in eval mode, and (b) one step's gradients, on the same batch.
    texts = [imdb[i][0] for i in EVAL_IMDB] + [weibo[i][0] for i in EVAL_WEIBO]
    labels = torch.tensor([imdb[i][1] for i in EVAL_IMDB] + [weibo[i][1] % 2 for i in EVAL_WEIBO])
    ids, mask, types = encode(tok, texts, pad_id)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
        extra = {}
        if getattr(model.config, "classifier_pooling", None) == "mean":  # ModernBERT: the other pooling too
            model.config.classifier_pooling = "cls"
            extra["logits_cls"] = model(input_ids=ids, attention_mask=mask).logits.contiguous()
            model.config.classifier_pooling = "mean"
    model.train()  # dropout is 0: train mode changes nothing but the mode
    model.zero_grad()
    out_ = model(input_ids=ids, attention_mask=mask, labels=labels)
    out_.loss.backward()
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": labels,
               "logits": logits.contiguous(), "loss": out_.loss.detach().reshape(1), **extra}
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.detach().clone().contiguous()
    save_file(tensors, os.path.join(d, "reference.safetensors"), metadata=one_key({
        "imdb_file": IMDB_REL, "imdb_rows": EVAL_IMDB, "weibo_file": WEIBO_REL, "weibo_rows": EVAL_WEIBO,
        "tokenizer": spec["tokenizer"], "tokenizer_sha256": sha256_file(tok_file),
        "labels": "IMDB label; Weibo label_id % 2", "loss": "mean cross-entropy (the model's own)",
        **{f"version_{k}": v for k, v in versions().items()}}))

    # (c) eight steps of transformers.Trainer from the saved weights.
    texts = [imdb[i][0] for i in TRAIN_ROWS]
    ids, mask, types = encode(tok, texts, pad_id)
    data = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
            "labels": torch.tensor([imdb[i][1] for i in TRAIN_ROWS], dtype=torch.int64)}
    save_file(data, os.path.join(d, "train.safetensors"), metadata=one_key({
        "imdb_file": IMDB_REL, "imdb_rows": TRAIN_ROWS, "tokenizer": spec["tokenizer"]}))
    model = AutoModelForSequenceClassification.from_pretrained(d, attn_implementation="eager")
    losses = tiny_trainer_losses(model, data, name)
    write_ref_losses(os.path.join(d, "ref_losses.json"),
                     f"transformers.Trainer, 8 steps of the tiny {spec['model_type']} classifier on "
                     "train.safetensors; global step s trains on rows [16 s, 16 s + 16) in file order",
                     losses, versions())
    print(f"{name}: logits {tuple(logits.shape)}, loss {out_.loss.item():.6f}, "
          f"Trainer {losses[0]:.6f} .. {losses[-1]:.6f}")


def make_masked_lm(name, out, imdb):
    """<family>-mlm/: the masked-LM model of the same config, and its logits at masked positions."""
    spec = FAMILIES[name]
    tok = tokenizers.Tokenizer.from_file(os.path.join(TOKENIZERS, spec["tokenizer"] + ".tokenizer.json"))
    pad_id, mask_id = tok.token_to_id(spec.get("pad", "<pad>")), tok.token_to_id(spec.get("mask", "<mask>"))
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(tiny_config(spec, tok), attn_implementation="eager")
    # A non-zero decoder bias, so that a bias read from the wrong tensor shows.
    with torch.no_grad():
        dict(model.named_parameters())[spec.get("mlm_bias", "lm_head.bias")].normal_(0.0, 0.5)
    d = os.path.join(out, name + "-mlm")
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    ids, mask, types = encode(tok, [imdb[i][0] for i in EVAL_IMDB[:3]], pad_id)
    # Every 10th real token from the second on becomes <mask> (few: the logits are [M, vocab]).
    masked = ids.clone()
    positions = []
    for r in range(ids.shape[0]):
        for c in range(1, int(mask[r].sum()) - 1, 10):
            masked[r, c] = mask_id
            positions.append(r * ids.shape[1] + c)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=masked, attention_mask=mask).logits
    flat = logits.reshape(-1, logits.shape[-1])[torch.tensor(positions)]
    save_file({"input_ids": masked, "attention_mask": mask, "token_type_ids": types,
               "mlm_positions": torch.tensor(positions, dtype=torch.int64), "logits": flat.contiguous()},
              os.path.join(d, "reference.safetensors"), metadata=one_key({
                  "imdb_file": IMDB_REL, "imdb_rows": EVAL_IMDB[:3], "tokenizer": spec["tokenizer"],
                  "masking": f"every 10th token from column 1, {spec.get('mask', '<mask>')}", **{f"version_{k}": v for k, v in versions().items()}}))
    print(f"{name}-mlm: {len(positions)} masked positions, logits {tuple(flat.shape)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "hf", "families"))
    ap.add_argument("--only", choices=sorted(FAMILIES), action="append")
    args = ap.parse_args()
    for path in (IMDB, WEIBO):
        if not os.path.exists(path):
            raise SystemExit(f"missing {path} (scripts/fetch-data.sh, ../shared)")
    imdb, weibo = read_imdb(), read_weibo()
    for name in args.only or sorted(FAMILIES):
        make_family(name, args.out, imdb, weibo)
        if name in ("roberta", "distilbert", "deberta-v2", "modernbert"):  # XLM-R's lm_head is RoBERTa's under another class name
            make_masked_lm(name, args.out, imdb)


if __name__ == "__main__":
    main()
