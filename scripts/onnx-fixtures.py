#!/usr/bin/env python3
"""Writes tests/data/onnx/tiny-bert/: a tiny random-init BertModel exported to
ONNX the way torch.onnx's TorchScript exporter writes BERT graphs, with what
ONNX Runtime computes on it, for `ft import onnx` and `ft predict`.

Run in the env that scripts/hf-env.sh makes, from anywhere:

    .venv-hf/bin/python scripts/onnx-fixtures.py [--out DIR]

Outputs (tests/data/onnx/README.md describes them):
  tokenizer.json  a WordPiece tokenizer of ~200 entries built here
  model.onnx      BertModel exported with torch.onnx.export(dynamo=False, opset 14)
  expected.json   token ids and ORT's last_hidden_state of 4 texts, and the
                  config the importer must infer from the graph

Deterministic: torch.manual_seed(0), one thread in torch and in ORT.
"""
import argparse
import collections
import json
import os
import string
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
# The TorchScript exporter is chosen on purpose (see export()): its deprecation is no news.
warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*TorchScript-based ONNX export")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402
from transformers import BertConfig, BertModel  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "data", "onnx", "tiny-bert")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a an and or of to in on at is was were be it this that we you he she they i my your "
         "quick brown fox jump over lazy dog walk home clock start rain like good day movie film great "
         "bad not very with for time love story plot actor watch see make one two three all but from as by "
         "have has had no yes can will would so if then when what who how").split()
PIECES = "##s ##es ##ed ##ing ##ly ##er ##est ##n ##t ##y ##ness ##ful ##able".split()
# Full-width comma and stop too, so the Chinese sentence has no [UNK].
CJK = list("我你他们的是不了在有人这中大天气很好今去公园散步喜欢学习文和") + ["，", "。"]

# Every word of the first three is in the vocabulary or splits into its pieces;
# the last has a Latin word with no split (zebra) and a CJK character outside it (猫).
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "We were walking home at 5, and it started raining!",
    "今天天气很好，我们去公园散步。",
    "My zebra likes 猫 and dogs.",
]

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu")


def build_tokenizer():
    vocab = []
    for tok in SPECIALS + list(string.ascii_lowercase) + list(string.digits) + list(string.punctuation) \
            + WORDS + PIECES + CJK:
        if tok not in vocab:
            vocab.append(tok)
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="[UNK]", continuing_subword_prefix="##"))
    # As BERT's own tokenizer.json: the specials are added tokens too (same ids),
    # so "[SEP]" typed in a text stays one token.
    tok.add_special_tokens(SPECIALS)
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def randomise(model):
    """std 0.2 everywhere, biases and LayerNorms included: with transformers'
    zero biases and unit LayerNorms, a swapped bias or a LayerNorm weight read
    as its bias would leave the hidden states unchanged."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.2)
            if "LayerNorm.weight" in name:
                p.add_(1.0)


class LastHidden(BertModel):
    """Only last_hidden_state as output, as feature-extraction exports have
    it; a subclass, not a wrapper, so the tensors keep BertModel's own names
    (no "bert." prefix)."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state


def export(model, path, vocab_size, opset):
    """torch.onnx's TorchScript exporter (dynamo=False), which wrote the BERT
    exports in circulation; the torch.export-based default writes other graphs."""
    # Two rows, the second padded, so the trace takes the path a padded batch takes.
    ids = torch.randint(5, vocab_size, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    types = torch.zeros(2, 7, dtype=torch.long)
    axes = {0: "batch_size", 1: "sequence_length"}
    torch.onnx.export(model, (ids, mask, types), path, dynamo=False, opset_version=opset,
                      do_constant_folding=True, input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state"],
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                    "last_hidden_state": axes})


def describe(path):
    """Prints what the importer has to read: op counts, initializer names, the query's reshape."""
    m = onnx.load(path)
    g = m.graph
    ops = collections.Counter(n.op_type for n in g.node)
    print(f"onnx-fixtures: opset {m.opset_import[0].version}, {len(g.node)} nodes: "
          + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
    print(f"onnx-fixtures: {len(g.initializer)} initializers: "
          + ", ".join(f"{t.name}{list(t.dims)}" for t in g.initializer))
    # The query's Reshape to [batch, seq, heads, head_dim]: which entries are constants.
    consts = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t).tolist()
              for n in g.node if n.op_type == "Constant"}
    producer = {o: n for n in g.node for o in n.output}
    for n in g.node:
        if n.op_type == "Reshape" and "layer.0/attention/self/query" in n.input[0]:
            shape = producer.get(n.input[1])
            parts = [consts.get(i, producer[i].op_type if i in producer else i) for i in shape.input] \
                if shape is not None and shape.op_type == "Concat" else consts.get(n.input[1])
            print(f"onnx-fixtures: layer 0's query is reshaped to {parts}")


def compact_json(obj):
    """One line per key, one per text: small, and a diff still shows which text moved."""
    lines = []
    for key, value in obj.items():
        if key == "texts":
            items = ",\n  ".join(json.dumps(t, ensure_ascii=False, separators=(",", ":")) for t in value)
            lines.append(f' "{key}": [\n  {items}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def sig7(x):
    return float(f"{x:.7g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    # 14, torch 2.0's default: LayerNorm decomposed (ReduceMean, Pow, Sqrt), as
    # the exports of that era are; from 17 on the exporter writes LayerNormalization.
    ap.add_argument("--opset", type=int, default=14)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tok = build_tokenizer()
    tok.save(os.path.join(args.out, "tokenizer.json"))
    vocab_size = tok.get_vocab_size()

    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        pad_token_id=0, initializer_range=0.2, attn_implementation="eager", **TINY)
    model = LastHidden(config).eval()
    randomise(model)
    onnx_path = os.path.join(args.out, "model.onnx")
    export(model, onnx_path, vocab_size, args.opset)
    onnx.checker.check_model(onnx_path)
    describe(onnx_path)

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    rows, worst = [], 0.0
    for text in TEXTS:
        enc = tok.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        (hidden,) = sess.run(["last_hidden_state"], feeds)
        with torch.no_grad():
            ref = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).numpy()
        worst = max(worst, float(np.abs(hidden - ref).max()))
        print(f"onnx-fixtures: {text!r}: {enc.tokens}")
        rows.append({"text": text, "input_ids": enc.ids,
                     "last_hidden_state": [[sig7(v) for v in tokvec] for tokvec in hidden[0].tolist()]})
    print(f"onnx-fixtures: max |ORT - transformers| over {len(TEXTS)} texts: {worst:.3g}")

    # The texts again as one padded batch: the exported mask and dynamic axes
    # must give each text's tokens what it got alone.
    encs = tok.encode_batch(TEXTS)
    width = max(len(e.ids) for e in encs)
    ids = np.array([e.ids + [0] * (width - len(e.ids)) for e in encs], dtype=np.int64)
    mask = np.array([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encs], dtype=np.int64)
    (batched,) = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                                  "token_type_ids": np.zeros_like(ids)})
    gap = max(float(np.abs(batched[i, :len(e.ids)] - np.array(r["last_hidden_state"])).max())
              for i, (e, r) in enumerate(zip(encs, rows)))
    print(f"onnx-fixtures: max |ORT batched - ORT alone| (7 digits) over the real tokens: {gap:.3g}")

    expected = {
        "made_by": "scripts/onnx-fixtures.py",
        "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                     "onnx": onnx.__version__, "onnxruntime": ort.__version__},
        "config": {"num_hidden_layers": TINY["num_hidden_layers"], "hidden_size": TINY["hidden_size"],
                   "num_attention_heads": TINY["num_attention_heads"],
                   "intermediate_size": TINY["intermediate_size"], "layer_norm_eps": TINY["layer_norm_eps"],
                   "vocab_size": vocab_size, "max_position_embeddings": TINY["max_position_embeddings"],
                   "type_vocab_size": TINY["type_vocab_size"], "hidden_act": "gelu", "pad_token_id": 0},
        "texts": rows,
    }
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        f.write(compact_json(expected))
    for name in ("tokenizer.json", "model.onnx", "expected.json"):
        print(f"onnx-fixtures: {name}: {os.path.getsize(os.path.join(args.out, name))} bytes")


if __name__ == "__main__":
    sys.exit(main())
