#!/usr/bin/env python3
"""Writes tests/data/st/: sentence-transformers reference fixtures for the
sentence-embedding task (tests/data/st/README.md describes every file).

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/st-fixtures.py [--out DIR] [--data DIR]

--data is where scripts/fetch-data.sh put the data (default: data/ at the
repository root); it needs imdb/train.jsonl and all-minilm-l6-v2/ with its
sentence-transformers files (modules.json, 1_Pooling/).

  tiny-mean-norm/, tiny-cls/, tiny-max-dense/, tiny-meansqrt/
      a tiny BERT SentenceTransformer in four pooling variants, each a
      directory that SentenceTransformer(dir) loads, saved by
      SentenceTransformer.save (the same seeded encoder in all four)
  embeddings.safetensors       the four variants' sentence embeddings of 16 reviews
  minilm-embeddings.safetensors  SentenceTransformer(all-MiniLM-L6-v2).encode of 32 reviews
  train-<loss>/                8 steps of SentenceTransformerTrainer from
                               tiny-mean-norm with one loss each, in file order

The tiny vocabulary is the all-MiniLM-L6-v2 WordPiece pieces that occur in
the texts used here (at most VOCAB_SIZE - 5 of them, the most frequent),
after [PAD] [UNK] [CLS] [SEP] [MASK]. Pairs are cut from IMDB reviews by the
fixed rules in halves() and score_pairs(). Only token ids and numbers are
written, never text.

Deterministic: one intra-op thread, torch.use_deterministic_algorithms(True),
torch.manual_seed before each initialisation, fp32 on the CPU, dropout 0,
no shuffling (the trainer's batch sampler is sequential); the safetensors
metadata is one sorted-JSON `fixture` key. Two runs write byte-identical files.
"""
import argparse
import collections
import json
import math
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import datasets  # noqa: E402
import numpy  # noqa: E402
import safetensors  # noqa: E402
import sentence_transformers  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer  # noqa: E402
from sentence_transformers import SentenceTransformerTrainingArguments  # noqa: E402
from sentence_transformers.base.modules import Dense, Normalize, Transformer  # noqa: E402
from sentence_transformers.base.sampler import DefaultBatchSampler  # noqa: E402
from sentence_transformers.sentence_transformer import losses  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402
from torch.utils.data import SequentialSampler  # noqa: E402
from transformers import AutoTokenizer, BertConfig, BertModel, BertTokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_fixture_common import IMDB_REL, REPO, one_key, read_imdb, sha256_file  # noqa: E402

MINILM_REL = "data/all-minilm-l6-v2"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB_SIZE = 1024          # the 5 specials + the 1019 most frequent pieces
MAX_SEQ = 64               # the tiny models' max_seq_length (sentence_bert_config.json)
TRAIN_MAX_LEN = 32         # the training texts' max_length
HIDDEN = 32
DENSE_OUT = 16

# embeddings.safetensors: 8 negative, 8 positive reviews; minilm-embeddings.safetensors: 16 and 16.
EMB_ROWS = list(range(0, 8)) + list(range(25000, 25008))
MINILM_ROWS = list(range(0, 16)) + list(range(25000, 25016))
# train-*: 64 negative and 64 positive reviews, interleaved (every batch of 16 holds 8 of each).
TRAIN_ROWS = [r for pair in zip(range(1000, 1064), range(26000, 26064)) for r in pair]

# The tiny encoder: BERT's shape at hidden 32; initializer_range 0.2 as the
# family fixtures use (at 0.02 every text gets nearly the same embedding).
TINY = dict(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            initializer_range=0.2, type_vocab_size=2, pad_token_id=0)

# name: (pooling_mode, dense, normalize)
VARIANTS = {
    "tiny-mean-norm": ("mean", False, True),
    "tiny-cls": ("cls", False, False),
    "tiny-max-dense": ("max", True, True),
    "tiny-meansqrt": ("mean_sqrt_len_tokens", False, False),
}

HP = dict(optim="adamw_torch", learning_rate=1e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999,
          adam_epsilon=1e-8, lr_scheduler_type="linear", warmup_steps=2, max_steps=8, max_grad_norm=1.0,
          per_device_train_batch_size=16, gradient_accumulation_steps=1, seed=0)

HALVES_RULE = ("words = text.split() (Python's whitespace split of the review exactly as in the file); "
               "h = len(words) // 2; first half = ' '.join(words[:h]), second half = ' '.join(words[h:])")
PAIRS_RULE = ("row i of the file uses IMDB review r = imdb_rows[i]: anchor = first half of r, "
              "positive = second half of r, negative = second half of review r + 1 (a different review "
              "with the same label). For i < 126, r + 1 = imdb_rows[i + 2], so the negative of row i is the "
              "same text as the positive of row i + 2: in each batch of 16, 14 negatives duplicate an in-batch "
              "positive. " + HALVES_RULE)
SCORES_RULE = ("row i of the file uses IMDB review r = imdb_rows[i]: sentence1 = first half of r; i % 4 in "
               "{0, 2}: sentence2 = second half of r, score 1.0; i % 4 == 1: sentence2 = second half of "
               "review r - 25000 if r >= 25000 else r + 25000 (the other IMDB label), score 0.0; i % 4 == 3: "
               "sentence2 = second half of review r + 1 (the same label), score 0.5. " + HALVES_RULE)


def versions():
    return {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__, "tokenizers": tokenizers.__version__,
            "datasets": datasets.__version__, "safetensors": safetensors.__version__, "numpy": numpy.__version__}


def halves(text):
    words = text.split()
    h = len(words) // 2
    return " ".join(words[:h]), " ".join(words[h:])


def pair_columns(imdb):
    rows = {"anchor": [], "positive": [], "negative": []}
    for r in TRAIN_ROWS:
        first, second = halves(imdb[r][0])
        rows["anchor"].append(first)
        rows["positive"].append(second)
        rows["negative"].append(halves(imdb[r + 1][0])[1])
    return rows


def score_pairs(imdb):
    s1, s2, score, partner = [], [], [], []
    for i, r in enumerate(TRAIN_ROWS):
        if i % 4 in (0, 2):
            other, y = r, 1.0
        elif i % 4 == 1:
            other, y = (r - 25000 if r >= 25000 else r + 25000), 0.0
        else:
            other, y = r + 1, 0.5
        if (imdb[other][1] == imdb[r][1]) != (y != 0.0):
            raise SystemExit(f"row {i}: the partner's label does not follow the rule")
        s1.append(halves(imdb[r][0])[0])
        s2.append(halves(imdb[other][0])[1])
        score.append(y)
        partner.append(other)
    return {"sentence1": s1, "sentence2": s2, "score": score}, partner


# --------------------------------------------------------------------- vocabulary
def tiny_vocab(minilm_tok, imdb):
    """The specials, then the MiniLM pieces that occur in this script's texts
    (as the MiniLM tokenizes them, at the lengths they are used with): the
    VOCAB_SIZE - 5 most frequent, ties to the lower MiniLM id, kept in MiniLM id order."""
    texts = [(imdb[r][0], MAX_SEQ) for r in EMB_ROWS]
    pairs, scores = pair_columns(imdb), score_pairs(imdb)[0]
    for col in (pairs["anchor"], pairs["positive"], pairs["negative"], scores["sentence2"]):
        texts += [(t, TRAIN_MAX_LEN) for t in col]
    special_ids = set(minilm_tok.all_special_ids)
    count = collections.Counter()
    for text, n in texts:
        count.update(i for i in minilm_tok(text, truncation=True, max_length=n)["input_ids"] if i not in special_ids)
    ranked = sorted(count, key=lambda i: (-count[i], i))
    keep = sorted(ranked[:VOCAB_SIZE - len(SPECIALS)])
    pieces = minilm_tok.convert_ids_to_tokens(keep)
    vocab = SPECIALS + pieces
    covered = sum(count[i] for i in keep) / sum(count.values())
    return vocab, {"distinct_pieces": len(count), "kept": len(keep), "token_coverage": round(covered, 6)}


# --------------------------------------------------------------------- the model directories
def build_variants(out, vocab):
    """Saves each variant with SentenceTransformer.save; returns their directories."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "bert")
        tok = BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True, model_max_length=MAX_SEQ)
        torch.manual_seed(0)
        bert = BertModel(BertConfig(vocab_size=len(vocab), **TINY))
        bert.save_pretrained(src)
        tok.save_pretrained(src)
        dirs = {}
        for name, (mode, dense, norm) in VARIANTS.items():
            modules = [Transformer(src, max_seq_length=MAX_SEQ), Pooling(HIDDEN, pooling_mode=mode)]
            if dense:
                torch.manual_seed(1)
                modules.append(Dense(HIDDEN, DENSE_OUT, activation_function=torch.nn.Tanh()))
            if norm:
                modules.append(Normalize())
            model = SentenceTransformer(modules=modules, device="cpu")
            d = os.path.join(out, name)
            shutil.rmtree(d, ignore_errors=True)
            model.save(d, create_model_card=False)
            # ST 6.2 keeps the length limit in tokenizer_config.json (model_max_length);
            # sentence_bert_config.json says it too, as older releases wrote it and the
            # MiniLM ships it (Transformer takes max_seq_length as a constructor argument).
            cfg_path = os.path.join(d, "sentence_bert_config.json")
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
            cfg["max_seq_length"] = MAX_SEQ
            cfg["do_lower_case"] = False
            with open(cfg_path, "w", encoding="utf-8") as f:
                json.dump(cfg, f, indent=4)
            with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
                f.write("".join(t + "\n" for t in vocab))
            dirs[name] = d
    return dirs


def load_st(d):
    model = SentenceTransformer(d, device="cpu")
    model.eval()
    return model


# --------------------------------------------------------------------- embeddings.safetensors
SHORT_RULE = "text k (k = 0..15) = the first 3 + 2 k words of review imdb_rows[k] (text.split(), joined by spaces)"


def embed_batch(name, model, texts):
    """ids, mask and model(features)['sentence_embedding'], checked against encode()."""
    features = model.preprocess(texts)
    if "token_type_ids" in features and features["token_type_ids"].any():
        raise SystemExit("non-zero token_type_ids")
    with torch.no_grad():
        emb = model({k: v for k, v in features.items()})["sentence_embedding"].detach().clone()
        enc = model.encode(texts, convert_to_tensor=True, batch_size=len(texts))
        alone = torch.cat([model.encode([t], convert_to_tensor=True) for t in texts])
    diff = (emb - enc).abs().max().item()
    unpadded = (emb - alone).abs().max().item()
    if diff > 1e-5 or unpadded > 1e-5:
        raise SystemExit(f"{name}: forward and encode differ by {diff}, padding-free by {unpadded}")
    return features["input_ids"].to(torch.int64), features["attention_mask"].to(torch.int64), emb, unpadded


def vocab_txt_check(d, tensors, prefix, texts):
    """vocab.txt read by tokenizers' own BERT WordPiece pipeline gives the stored ids."""
    tok = tokenizers.BertWordPieceTokenizer(os.path.join(d, "vocab.txt"), lowercase=True, strip_accents=None,
                                            clean_text=True, handle_chinese_chars=True)
    tok.enable_truncation(MAX_SEQ)
    for k, text in enumerate(texts):
        n = int(tensors[f"{prefix}attention_mask"][k].sum())
        if tok.encode(text).ids != tensors[f"{prefix}input_ids"][k, :n].tolist():
            raise SystemExit(f"{d}: vocab.txt tokenizes text {k} of {prefix or 'full'} otherwise")


def make_embeddings(out, dirs, imdb, vocab_info):
    """The reviews as they are (every one reaches MAX_SEQ tokens, so no padding),
    and the same reviews cut short (short.*: 16 lengths, padded)."""
    batches = {"": [imdb[r][0] for r in EMB_ROWS],
               "short.": [" ".join(imdb[r][0].split()[:3 + 2 * k]) for k, r in enumerate(EMB_ROWS)]}
    tensors, embs, unpadded = {}, {}, {}
    for name, d in dirs.items():
        model = load_st(d)
        if model.max_seq_length != MAX_SEQ:
            raise SystemExit(f"{name}: max_seq_length {model.max_seq_length}, expected {MAX_SEQ}")
        for prefix, texts in batches.items():
            ids, mask, emb, unpadded[f"{name}.{prefix.rstrip('.') or 'full'}"] = embed_batch(name, model, texts)
            for key, t in ((f"{prefix}input_ids", ids), (f"{prefix}attention_mask", mask)):
                if key in tensors and not torch.equal(tensors[key], t):
                    raise SystemExit(f"{name}: another tokenization than the first variant's")
                tensors[key] = t.contiguous()
            embs[f"{name}.{prefix}sentence_embedding"] = emb.contiguous()
        print(f"{name}: sentence_embedding {tuple(emb.shape)}")
    tensors.update(embs)
    check = {prefix.rstrip(".") or "full": pooling_check(dirs, tensors, prefix) for prefix in batches}
    for prefix, texts in batches.items():
        vocab_txt_check(dirs["tiny-mean-norm"], tensors, prefix, texts)
    unk = int((tensors["input_ids"] == SPECIALS.index("[UNK]")).sum())
    lengths = tensors["short.attention_mask"].sum(1).tolist()
    save_file(tensors, os.path.join(out, "embeddings.safetensors"), metadata=one_key({
        "imdb_file": IMDB_REL, "imdb_rows": EMB_ROWS, "max_length": MAX_SEQ, "padding": "longest",
        "short_rule": SHORT_RULE, "short_lengths": lengths,
        "tokenizer": "each variant's own (tokenizer.json), identical in all four", "unk_tokens": unk,
        "forward": "SentenceTransformer(dir) in eval mode, model(features)['sentence_embedding'], fp32, "
                   "token_type_ids all zero", "vocab": vocab_info,
        "independent_check_max_abs_diff": check,
        "one_text_at_a_time_max_abs_diff": {k: float(f"{v:.2g}") for k, v in unpadded.items()},
        **{f"version_{k}": v for k, v in versions().items()}}))
    print(f"embeddings: input_ids {tuple(tensors['input_ids'].shape)}, {unk} [UNK]; "
          f"short {tuple(tensors['short.input_ids'].shape)}, lengths {lengths}; check {check}")


def plain_bert(d):
    """The directory's BertModel without sentence-transformers: transformers' own
    class, eager attention (ST loads it with sdpa), weights from model.safetensors."""
    bert = BertModel(BertConfig.from_pretrained(d))
    bert.load_state_dict(load_file(os.path.join(d, "model.safetensors")))
    bert.config._attn_implementation = "eager"
    return bert


def pooled(bert, ids, mask, mode="mean", dense=None, normalize=True):
    """The README's formulas, written out: pooling over the attended tokens, then Dense(tanh), then L2."""
    h = bert(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
    m = mask.unsqueeze(-1).to(h.dtype)
    n = m.sum(1)
    if mode == "mean":
        e = (h * m).sum(1) / n
    elif mode == "mean_sqrt_len_tokens":
        e = (h * m).sum(1) / n.sqrt()
    elif mode == "cls":
        e = h[:, 0]
    elif mode == "max":
        e = h.masked_fill(m == 0, float("-inf")).max(1).values
    if dense is not None:
        e = torch.tanh(e @ dense["linear.weight"].T + dense["linear.bias"])
    return torch.nn.functional.normalize(e, dim=-1) if normalize else e


def pooling_check(dirs, tensors, prefix):
    """Each variant's embeddings of the batch `prefix` recomputed without sentence-transformers."""
    diffs = {}
    ids, mask = tensors[f"{prefix}input_ids"], tensors[f"{prefix}attention_mask"]
    for name, d in dirs.items():
        mode, dense, norm = VARIANTS[name]
        dense_w = load_file(os.path.join(d, "2_Dense", "model.safetensors")) if dense else None
        with torch.no_grad():
            e = pooled(plain_bert(d).eval(), ids, mask, mode, dense_w, norm)
        diff = (e - tensors[f"{name}.{prefix}sentence_embedding"]).abs().max().item()
        if diff > 1e-5:
            raise SystemExit(f"{name}: the written-out pooling differs from ST's by {diff}")
        diffs[name] = float(f"{diff:.2g}")
    return diffs


# --------------------------------------------------------------------- minilm-embeddings.safetensors
def make_minilm(out, minilm_dir, imdb):
    model = load_st(minilm_dir)
    texts = [imdb[r][0] for r in MINILM_ROWS]
    features = model.preprocess(texts)
    with torch.no_grad():
        emb = model.encode(texts, convert_to_tensor=True, batch_size=32)
        fwd = model({k: v for k, v in features.items()})["sentence_embedding"]
    diff = (emb - fwd).abs().max().item()
    norms = emb.norm(dim=1)
    if diff > 1e-5 or (norms - 1).abs().max().item() > 1e-5:
        raise SystemExit(f"minilm: encode vs forward {diff}, norms {norms.min().item()}..{norms.max().item()}")
    if "token_type_ids" in features and features["token_type_ids"].any():
        raise SystemExit("non-zero token_type_ids")
    modules = [type(m).__name__ for m in model]
    tensors = {"input_ids": features["input_ids"].to(torch.int64).contiguous(),
               "attention_mask": features["attention_mask"].to(torch.int64).contiguous(),
               "sentence_embedding": emb.contiguous()}
    save_file(tensors, os.path.join(out, "minilm-embeddings.safetensors"), metadata=one_key({
        "imdb_file": IMDB_REL, "imdb_rows": MINILM_ROWS, "model": MINILM_REL,
        "model_sha256": sha256_file(os.path.join(minilm_dir, "model.safetensors")),
        "max_seq_length": model.max_seq_length, "padding": "longest", "modules": modules,
        "encode": "SentenceTransformer(model).encode(texts, convert_to_tensor=True, batch_size=32), fp32, eval",
        "forward_vs_encode_max_abs_diff": float(f"{diff:.3g}"),
        **{f"version_{k}": v for k, v in versions().items()}}))
    print(f"minilm: {tuple(tensors['input_ids'].shape)} ids, modules {modules}, |encode - forward| {diff:.1e}")


# --------------------------------------------------------------------- train-*/
class FileOrderTrainer(SentenceTransformerTrainer):
    """SentenceTransformerTrainer with the rows in file order: the batch
    sampler is ST's DefaultBatchSampler over a SequentialSampler (ST 6.2's
    default wraps a seeded RandomSampler), so global step s trains on rows
    [16 s, 16 s + 16). Per step it keeps the exact loss, the LR that step's
    update uses and the gradient norm before clipping, and checks that the
    batch the collator built is those rows of train.safetensors."""

    def __init__(self, *args, expect=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.expect = expect
        self.exact_losses, self.step_lrs, self.grad_norms, self.widths = [], [], [], []

    def get_batch_sampler(self, dataset, batch_size, drop_last, valid_label_columns=None, generator=None, seed=0):
        return DefaultBatchSampler(SequentialSampler(dataset), batch_size=batch_size, drop_last=drop_last,
                                   valid_label_columns=valid_label_columns, generator=generator, seed=seed)

    def check_batch(self, inputs):
        s = len(self.exact_losses)
        rows = slice(16 * s, 16 * s + 16)
        widths = {}
        for key, ref in self.expect.items():
            if key == "score":
                if not torch.equal(inputs["label"].to(torch.float32), ref[rows]):
                    raise SystemExit(f"step {s}: labels are not rows {rows} of the file")
                continue
            col, what = key.split(".")
            got = inputs[f"{col}_{what}"]
            w = got.shape[1]
            widths[col] = w
            if not (torch.equal(got.to(torch.int64), ref[rows, :w]) and not ref[rows, w:].any()):
                raise SystemExit(f"step {s}: {col}_{what} is not rows {rows} of the file")
        self.widths.append(widths)

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        if model.training:
            self.check_batch(inputs)
        result = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        loss = result[0] if return_outputs else result
        if model.training:
            self.exact_losses.append(loss.detach().item())
            self.step_lrs.append(self.optimizer.param_groups[0]["lr"])
        return result

    def training_step(self, model, inputs, *args, **kwargs):
        out = super().training_step(model, inputs, *args, **kwargs)
        grads = [p.grad.detach().double().norm() for p in model.parameters() if p.grad is not None]
        self.grad_norms.append(torch.stack(grads).norm().item())
        return out


LOSSES = {
    "train-mnrl": {
        "columns": ["anchor", "positive"],
        "make": lambda m: losses.MultipleNegativesRankingLoss(m, scale=20.0),
        "formula": "s_ij = 20 * cos(a_i, c_j) over the candidates c = [p_1..p_B] (cos of the L2-normalised "
                   "embeddings, util.cos_sim); loss = mean_i (logsumexp_j s_ij - s_ii): cross-entropy of each "
                   "anchor against all positives in the batch, the own positive the target; B = 16",
        "reduction": "mean over the batch's 16 anchors",
    },
    "train-mnrl-neg": {
        "columns": ["anchor", "positive", "negative"],
        "make": lambda m: losses.MultipleNegativesRankingLoss(m, scale=20.0),
        "formula": "as train-mnrl with the candidates c = [p_1..p_B, n_1..n_B] (every positive, then every "
                   "negative of the batch: 2B = 32 columns); loss = mean_i (logsumexp_j s_ij - s_ii); each "
                   "negative is a candidate for every anchor, not only its own row's",
        "reduction": "mean over the batch's 16 anchors",
    },
    "train-mnrl-sym": {
        "columns": ["anchor", "positive"],
        "make": lambda m: losses.MultipleNegativesSymmetricRankingLoss(m, scale=20.0),
        "formula": "s_ij = 20 * cos(a_i, p_j); loss = mean_i (0.5 * (logsumexp_j s_ij + logsumexp_j s_ji) - s_ii) "
                   "(ST 6.2: MultipleNegativesRankingLoss with directions (query_to_doc, doc_to_query) and "
                   "partition_mode per_direction; the class is kept, deprecated, as that subclass). "
                   "Equal to the mean of the anchor->positive and positive->anchor cross-entropies",
        "reduction": "mean over the batch's 16 rows",
    },
    "train-cosent": {
        "columns": ["sentence1", "sentence2", "score"],
        "make": lambda m: losses.CoSENTLoss(m, scale=20.0),
        "formula": "s_i = 20 * cos(u_i, v_i) (util.pairwise_cos_sim: dot of the L2-normalised embeddings); "
                   "loss = log(1 + sum over pairs (i, j) with y_i < y_j of exp(s_i - s_j)) (rows with equal "
                   "scores form no pair), computed as one logsumexp over [0, s_i - s_j ...]",
        "reduction": "none: one log-sum-exp over all ordered pairs of the batch, not divided by the batch size",
    },
    "train-cosine": {
        "columns": ["sentence1", "sentence2", "score"],
        "make": lambda m: losses.CosineSimilarityLoss(m),
        "formula": "loss = mean_i (cos(u_i, v_i) - y_i)^2 (torch.cosine_similarity, eps 1e-8, then nn.MSELoss; "
                   "no scale)",
        "reduction": "mean over the batch's 16 rows (MSELoss reduction mean)",
    },
}


def tokenize_columns(model, columns):
    """Each text column with the model's tokenizer at TRAIN_MAX_LEN (as the
    trainer's collator calls it), padded to the longest row in the file."""
    enc = {c: model.preprocess(texts) for c, texts in columns.items()}
    width = max(e["input_ids"].shape[1] for e in enc.values())
    out = {}
    for c, e in enc.items():
        pad = width - e["input_ids"].shape[1]
        out[f"{c}.input_ids"] = torch.nn.functional.pad(e["input_ids"].to(torch.int64), (0, pad)).contiguous()
        out[f"{c}.attention_mask"] = torch.nn.functional.pad(e["attention_mask"].to(torch.int64), (0, pad)).contiguous()
        if "token_type_ids" in e and e["token_type_ids"].any():
            raise SystemExit("non-zero token_type_ids")
    return out


def make_trajectory(name, out, start_dir, imdb):
    spec = LOSSES[name]
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model = SentenceTransformer(start_dir, device="cpu")
    model.max_seq_length = TRAIN_MAX_LEN
    if "score" in spec["columns"]:
        cols, partners = score_pairs(imdb)
        rule = SCORES_RULE
    else:
        cols, partners = pair_columns(imdb), None
        rule = PAIRS_RULE
    cols = {c: cols[c] for c in spec["columns"]}
    texts = {c: v for c, v in cols.items() if c != "score"}
    data = tokenize_columns(model, texts)
    if "score" in cols:
        data["score"] = torch.tensor(cols["score"], dtype=torch.float32)
    meta = {"imdb_file": IMDB_REL, "imdb_rows": TRAIN_ROWS, "columns": spec["columns"], "rule": rule,
            "max_length": TRAIN_MAX_LEN, "padding": "longest in the file",
            "tokenizer": "tiny-mean-norm/tokenizer.json", **{f"version_{k}": v for k, v in versions().items()}}
    if partners is not None:
        meta["sentence2_imdb_rows"] = partners
    save_file(data, os.path.join(d, "train.safetensors"), metadata=one_key(meta))

    bert = model[0].auto_model
    names = {id(p): n for n, p in bert.named_parameters()}
    init = {n: p.detach().clone() for n, p in bert.state_dict().items()}
    loss = spec["make"](model)
    train = datasets.Dataset.from_dict(cols)
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp, report_to=[], use_cpu=True, save_strategy="no", logging_steps=1, disable_tqdm=True,
            dataloader_num_workers=0, dataloader_drop_last=False, **HP)
        trainer = FileOrderTrainer(model=model, args=args, train_dataset=train, loss=loss, expect=data)
        trainer.train()
    if len(trainer.exact_losses) != 8 or not all(math.isfinite(v) for v in trainer.exact_losses):
        raise SystemExit(f"{name}: expected 8 finite losses, got {trainer.exact_losses}")
    decay, no_decay = [], []
    for group in trainer.optimizer.param_groups:
        for p in group["params"]:
            (decay if group["weight_decay"] > 0 else no_decay).append(names[id(p)])
    final = {n: t.detach().clone().contiguous() for n, t in bert.state_dict().items()}
    unchanged = sorted(n for n in final if torch.equal(final[n], init[n]))
    save_file(final, os.path.join(d, "final.safetensors"), metadata=one_key({
        "what": f"the BertModel state dict after the 8 steps of {name} (keys as tiny-mean-norm/model.safetensors)",
        **{f"version_{k}": v for k, v in versions().items()}}))
    logged = [{k: e[k] for k in ("step", "loss", "grad_norm", "learning_rate") if k in e}
              for e in trainer.state.log_history if "loss" in e]
    if [e["loss"] for e in logged] != trainer.exact_losses:
        raise SystemExit(f"{name}: the trainer logged other losses than compute_loss returned")
    check = replay(name, start_dir, data, spec["columns"], decay, no_decay, trainer.exact_losses, final)
    ref = {
        "what": f"sentence_transformers.SentenceTransformerTrainer, 8 steps of tiny-mean-norm "
                f"({type(loss).__name__}) on train.safetensors; global step s trains on rows [16 s, 16 s + 16) "
                "in file order",
        "data": {"imdb_file": IMDB_REL, "imdb_rows": TRAIN_ROWS, "columns": spec["columns"], "rule": rule,
                 "tokenized": f"tiny-mean-norm's tokenizer, truncation at {TRAIN_MAX_LEN} tokens ([CLS] and [SEP] "
                              "included), token_type_ids all zero (not stored)",
                 "batch_widths": "the trainer's collator pads each column of a batch to that column's longest row "
                                 "(never wider than the file)"},
        "loss": {"class": f"sentence_transformers.sentence_transformer.losses.{type(loss).__name__}",
                 "config": json.loads(json.dumps(loss.get_config_dict(), default=str)),
                 "formula": spec["formula"], "reduction": spec["reduction"],
                 "recorded": "loss.item() in compute_loss before that step's update (full float precision); "
                             "the value the trainer backpropagates and logs (trainer_log.loss)"},
        "init": "tiny-mean-norm/ (SentenceTransformer(dir): Transformer, mean Pooling, Normalize) with "
                f"max_seq_length set to {TRAIN_MAX_LEN}; every trajectory starts from the same weights",
        "hyperparameters": {**HP, "precision": "fp32", "device": "cpu", "processes": 1, "global_batch": 16,
                            "dropout": 0.0, "torch_threads": 1,
                            "sampler": "DefaultBatchSampler(SequentialSampler(dataset)) (get_batch_sampler override)"},
        "lr_schedule": "linear: lr * s / 2 for s < 2, then lr * (8 - s) / 6 (the LR used at step s)",
        "weight_decay_params": decay,
        "no_weight_decay_params": no_decay,
        "unchanged_params": unchanged,
        "losses": trainer.exact_losses,
        "lrs": trainer.step_lrs,
        "grad_norms_before_clip": trainer.grad_norms,
        "trainer_log": logged,
        "independent_check": check,
        "versions": versions(),
    }
    with open(os.path.join(d, "ref_losses.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
    print(f"{name}: losses {' '.join(f'{v:.6f}' for v in trainer.exact_losses)}; "
          f"grad norms {min(trainer.grad_norms):.3f}..{max(trainer.grad_norms):.3f}; unchanged {unchanged}")


def replay_loss(name, emb, y):
    """LOSSES[name]["formula"], written out."""
    if name in ("train-mnrl", "train-mnrl-neg", "train-mnrl-sym"):
        a, c = emb[0], torch.cat(emb[1:])
        s = 20.0 * (torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(c, dim=-1).T)
        pos = s[:, :a.shape[0]].diagonal()
        if name == "train-mnrl-sym":
            return (0.5 * (torch.logsumexp(s, 1) + torch.logsumexp(s, 0)) - pos).mean()
        return (torch.logsumexp(s, 1) - pos).mean()
    cos = torch.nn.functional.cosine_similarity(emb[0], emb[1])
    if name == "train-cosine":
        return ((cos - y) ** 2).mean()
    s = 20.0 * cos
    diff = s[:, None] - s[None, :]
    return torch.logsumexp(torch.cat([diff.new_zeros(1), diff[y[:, None] < y[None, :]]]), 0)


def replay(name, start_dir, data, columns, decay, no_decay, losses_ref, final_ref):
    """The same 8 steps without sentence-transformers or the Trainer: the plain
    BertModel (eager attention) on train.safetensors at its full width, the
    written-out loss, torch AdamW with the recorded decay groups, the linear
    schedule, clipping at 1.0. Checks the documented recipe, and measures how
    far a faithful reimplementation lands."""
    bert = plain_bert(start_dir).train()
    params = dict(bert.named_parameters())
    opt = torch.optim.AdamW([{"params": [params[n] for n in decay], "weight_decay": HP["weight_decay"]},
                             {"params": [params[n] for n in no_decay], "weight_decay": 0.0}],
                            lr=HP["learning_rate"], betas=(HP["adam_beta1"], HP["adam_beta2"]), eps=HP["adam_epsilon"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / 2 if s < 2 else (8 - s) / 6)
    text_cols = [c for c in columns if c != "score"]
    losses_ = []
    for s in range(8):
        rows = slice(16 * s, 16 * s + 16)
        emb = [pooled(bert, data[f"{c}.input_ids"][rows], data[f"{c}.attention_mask"][rows]) for c in text_cols]
        loss = replay_loss(name, emb, data["score"][rows] if "score" in data else None)
        losses_.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in bert.parameters() if p.grad is not None], HP["max_grad_norm"])
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    dl = max(abs(a - b) for a, b in zip(losses_, losses_ref))
    state = bert.state_dict()
    dw = {k: (state[k] - v).abs().max().item() for k, v in final_ref.items()}
    rest = max(v for k, v in dw.items() if not k.endswith("attention.self.key.bias"))
    key_bias = max(v for k, v in dw.items() if k.endswith("attention.self.key.bias"))
    if dl > 1e-5 or rest > 1e-4:
        raise SystemExit(f"{name}: the written-out recipe gives losses {dl} / weights {rest} away")
    return {"what": "the same 8 steps in plain torch (BertModel with eager attention on train.safetensors at its "
                    "full width, the written-out formula, torch AdamW with these decay groups, the linear schedule, "
                    "clip_grad_norm_ 1.0), compared with this run",
            "max_abs_loss_diff": float(f"{dl:.2g}"),
            "max_abs_final_weight_diff": float(f"{rest:.2g}"),
            "max_abs_final_key_bias_diff": float(f"{key_bias:.2g}"),
            "key_bias_note": "attention.self.key.bias gets a gradient that is exactly zero in exact arithmetic "
                             "(softmax over keys ignores a per-query constant q.b), so its fp32 gradient is "
                             "rounding noise that AdamW normalises into lr-sized steps: the final key biases of two "
                             "faithful implementations differ by up to about the sum of the LRs (4e-3)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "st"))
    ap.add_argument("--data", default=os.path.join(REPO, "data"), help="fetch-data.sh's directory (default data/)")
    args = ap.parse_args()
    imdb_path = os.path.join(args.data, "imdb", "train.jsonl")
    minilm_dir = os.path.join(args.data, "all-minilm-l6-v2")
    for path in (imdb_path, os.path.join(minilm_dir, "modules.json"), os.path.join(minilm_dir, "1_Pooling")):
        if not os.path.exists(path):
            raise SystemExit(f"missing {path} (scripts/fetch-data.sh)")
    os.makedirs(args.out, exist_ok=True)
    imdb = read_imdb(imdb_path)
    minilm_tok = AutoTokenizer.from_pretrained(minilm_dir)
    vocab, vocab_info = tiny_vocab(minilm_tok, imdb)
    print(f"vocab: {len(vocab)} entries; {vocab_info}")
    dirs = build_variants(args.out, vocab)
    make_embeddings(args.out, dirs, imdb, vocab_info)
    make_minilm(args.out, minilm_dir, imdb)
    for name in LOSSES:
        make_trajectory(name, args.out, dirs["tiny-mean-norm"], imdb)


if __name__ == "__main__":
    main()
