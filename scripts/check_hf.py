#!/usr/bin/env python3
"""Cross-checks an ft checkpoint against Hugging Face (run by scripts/check-hf.sh).

    .venv-hf/bin/python scripts/check_hf.py --ft build/bin/ft CKPT [LORA_CKPT]

Each check prints one line: its name, the max abs difference (or the number of
mismatching examples) and PASS or FAIL. Exit 1 when any check fails.

1. predict   AutoModelForSequenceClassification + pipeline("text-classification",
             top_k=None) vs `ft predict --checkpoint CKPT --logits`: probabilities
             and logits within 1e-5, the same top label; for problem_type
             multi_label_classification the sigmoids and the labels at 0.5, for
             regression the score (the pipeline with function_to_apply="none").
             For a token-classification checkpoint (config.json architectures
             ...ForTokenClassification) instead: pipeline("token-classification",
             aggregation_strategy="simple") vs `ft predict --checkpoint CKPT`, one
             {"text", "entities": [{entity_group, score, word, start, end}]} line
             per text (CoNLL-2003 sentences of data/ner-4types and texts written
             for it): the same entities in number, group, start and end (code-point
             offsets into the text), word == text[start:end], scores within 1e-5.
2. tokenize  AutoTokenizer.from_pretrained(CKPT) vs `ft tokenize --checkpoint CKPT
             --max-length N` (singles and TAB-separated pairs, N = 128 and 32):
             input_ids and token_type_ids equal.
3. embed     for a sentence-transformers checkpoint (modules.json beside config.json,
             as ft run --task sentence-embedding saves it, with or without LoRA) instead of 1:
             SentenceTransformer(CKPT).encode(texts) vs `ft predict --checkpoint CKPT`,
             one {"text", "embedding"} line per text (halves of data/imdb-pairs/test.jsonl
             reviews, the texts written for these checks, one word and one text longer than
             the model's max_seq_length and its 512 positions, which both cut there):
             embeddings within 1e-5 (max abs), the same dimension and text; the BertModel
             in it loads with no key missing but the pooler's (which ft does not
             train: mean pooling never reads it) and none unexpected; with a LoRA
             adapter, PeftModel.from_pretrained(BertModel, CKPT) finds every adapter key
             and its lora_B are not all zero. SKIPPED (not failed) when
             sentence-transformers is not installed.
4. lora      PeftModel.from_pretrained(base, LORA_CKPT) vs `ft predict --checkpoint
             LORA_CKPT --logits`, logits within 1e-5 (LORA_CKPT may also hold a
             PROMPT_TUNING or PREFIX_TUNING adapter), with base = adapter_config.json's
             base_model_name_or_path and base = LORA_CKPT's own model.safetensors; then
             AutoModelForSequenceClassification.from_pretrained(LORA_CKPT), which
             attaches the adapter itself (transformers' PEFT integration; LoRA only:
             it cannot attach prompt learning). Each also lists the keys PEFT would
             save that adapter_model.safetensors lacks.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

# Everything is local: never ask the Hub (there may be no network at all).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

from safetensors import safe_open  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    pipeline,
)
from transformers.utils import logging as hf_logging  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMDB = os.path.join(REPO, "data", "imdb", "train.jsonl")
IMDB_PAIRS_TEST = os.path.join(REPO, "data", "imdb-pairs", "test.jsonl")
NER_TEST = os.path.join(REPO, "data", "ner-4types", "test.jsonl")
WEIBO = os.path.join(os.path.dirname(REPO), "shared", "data", "weibo-emotion", "train.json")
TOL = 1e-5

# Rows that neither the fixtures (tests/data/hf) nor a `take: first` run reads:
# the last reviews of each label.
IMDB_ROWS = list(range(24993, 25000)) + list(range(49993, 50000))
# Written for this check: accents, case, punctuation, digits, CJK, an emoji
# and a control-free unknown symbol, so that normalisation paths are hit.
OWN_TEXTS = [
    "A wonderful, heart-warming film; I'd watch it again!!",
    "Terrible acting... the plot made NO sense whatsoever (2/10).",
    "Café crème brûlée — naïve résumé, Ünïcödé façade.",
    "東京 and 北京 are cities ✓ with 😀 fans at 10:30pm",
    "don't can't won't it's 3.14159 e-mail U.S.A. $100",
    "   leading and trailing spaces   ",
]

# For token classification: names, places and organisations in running text,
# with accents (which an uncased tokenizer strips), CJK, an emoji outside the
# BMP (code-point offsets), runs of spaces and punctuation glued to names.
NER_OWN_TEXTS = [
    "Angela Merkel met Emmanuel Macron in Paris on Tuesday, a European Commission spokesman said.",
    "José Müller of Société Générale flew from São Paulo to Zürich with Ångström Ltd. staff.",
    "東京 and 北京 fans 😀 cheered Usain Bolt at the Olympic Stadium in London.",
    "Apple Inc. hired Tim Cook's cousin in Cupertino, Calif., for $1,000,000 (U.S.A.).",
    "Barack  Obama   visited Berlin and the   Reichstag with Chancellor Kohl.",
]

failures = []
skips = []


def report(name, detail, ok):
    print(f"{name}: {detail} {'PASS' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)


def clean(text):
    # ft reads one text per line (a TAB splits a pair): fold those characters.
    return " ".join(text.replace("\t", " ").splitlines()).strip()


def check_texts():
    texts = []
    if os.path.exists(IMDB):
        with open(IMDB, encoding="utf-8") as f:
            lines = f.readlines()
        texts += [clean(json.loads(lines[i])["text"]) for i in IMDB_ROWS if i < len(lines)]
    texts += OWN_TEXTS[:2]
    return texts


def tokenizer_texts():
    texts = check_texts() + [clean(t) for t in OWN_TEXTS[2:]]
    if os.path.exists(WEIBO):
        with open(WEIBO, encoding="utf-8") as f:
            texts += [clean(r[0]) for r in json.load(f)[:8]]
    return [t for t in texts if t]


def ner_texts():
    """Sentences of data/ner-4types/test.jsonl (words joined by spaces), one text of ten
    of them that runs past the checkpoint's max length, and NER_OWN_TEXTS."""
    sents = []
    if os.path.exists(NER_TEST):
        with open(NER_TEST, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        sents = [" ".join(r["tokens"]) for r in rows if len(r["tokens"]) >= 6][:16]
    texts = sents[:12] + ([" ".join(sents[:10])] if len(sents) >= 10 else []) + NER_OWN_TEXTS
    return [clean(t) for t in texts if clean(t)]


def sentence_texts():
    """Texts of many lengths for an embedding model: halves of reviews from
    data/imdb-pairs/test.jsonl (the split no ft check trains on; without it, the
    IMDB rows of check_texts), OWN_TEXTS, one word, and (appended by the check)
    one text past max_seq_length."""
    texts = []
    if os.path.exists(IMDB_PAIRS_TEST):
        with open(IMDB_PAIRS_TEST, encoding="utf-8") as f:
            rows = [json.loads(line) for _, line in zip(range(6), f)]
        for i, r in enumerate(rows):
            texts.append(r["anchor"] if i % 2 == 0 else r["positive"])
            if i < 2:  # a review's first sentence or two
                texts.append(r["anchor"][:120].rsplit(" ", 1)[0])
    else:
        texts += check_texts()[:7]
    texts += OWN_TEXTS + ["Fine."]
    return [clean(t) for t in texts if clean(t)]


def is_sentence_transformers(ckpt):
    return os.path.isfile(os.path.join(ckpt, "modules.json"))


def base_model_dir(ckpt):
    """The directory the checkpoint was fine-tuned from (training_state/run.yaml's
    model.weights, else model.config), when it is a local model directory."""
    path = os.path.join(ckpt, "training_state", "run.yaml")
    if not os.path.isfile(path):
        return None
    try:
        import yaml

        with open(path, encoding="utf-8") as f:
            model = (yaml.safe_load(f) or {}).get("model") or {}
    except Exception:  # an unreadable run.yaml only loses the informative number
        return None
    for name in (model.get("weights"), model.get("config")):
        if not name:
            continue
        for cand in (name, os.path.join(REPO, name)):
            if os.path.isfile(os.path.join(cand, "config.json")):
                return cand
    return None


def check_sentence_embedding(ft, ckpt):
    name = "predict embeddings (sentence-embedding)"
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print(f"{name}: SKIPPED: sentence-transformers is not installed in this env (scripts/hf-env.sh)", flush=True)
        skips.append(name)
        return
    from transformers import AutoModel

    model = SentenceTransformer(ckpt, device="cpu")
    max_len = model.max_seq_length
    texts = sentence_texts()
    # One text past max_seq_length (and past the 512 positions): both sides must cut it there.
    long_text = " ".join(texts)
    while len(model.tokenizer(long_text)["input_ids"]) <= max(2 * max_len, 600):
        long_text += " " + long_text
    texts.append(long_text)
    lengths = [len(model.tokenizer(t)["input_ids"]) for t in texts]
    over = sum(n > max_len for n in lengths)
    try:
        got = run_ft(ft, ["predict", "--checkpoint", ckpt], texts)
    except Exception as exc:  # the failure is the result
        report(name, f"ft predict failed ({exc})", False)
        return
    ref = model.encode(texts, convert_to_tensor=True).to(torch.float64)
    problems = []
    bad_text = sum(g.get("text") != t for g, t in zip(got, texts))
    if bad_text:
        problems.append(f"{bad_text} lines print another text")
    dims = sorted({len(g.get("embedding") or []) for g in got})
    if dims != [ref.shape[1]]:
        report(name, f"ft's embeddings have {dims} dimensions, sentence-transformers' {ref.shape[1]}", False)
        return
    d = max_diff([g["embedding"] for g in got], ref)
    _, info = AutoModel.from_pretrained(ckpt, output_loading_info=True)
    missing = sorted(k for k in info["missing_keys"] if not k.startswith("pooler."))
    unexpected = sorted(info["unexpected_keys"])
    if missing:
        problems.append(f"config.json's BertModel lacks keys: {short(missing)}")
    if unexpected:
        problems.append(f"keys the BertModel does not know: {short(unexpected)}")
    # A LoRA checkpoint: PEFT over the bare BertModel must find every adapter key (a
    # name it lacks leaves that adapter at its init, silently), with the trained values.
    if os.path.isfile(os.path.join(ckpt, "adapter_config.json")):
        from peft import PeftModel
        with warnings.catch_warnings(record=True) as caught, tempfile.TemporaryDirectory() as tmp:
            warnings.simplefilter("always")
            # The base alone: AutoModel on the checkpoint would attach the adapter itself first.
            peft_model = PeftModel.from_pretrained(AutoModel.from_pretrained(base_from_checkpoint(ckpt, tmp)), ckpt)
        lost = [str(w.message)[:200] for w in caught if "missing adapter keys" in str(w.message)]
        if lost:
            problems.append(f"PeftModel over the BertModel: {lost[0]}")
        trained = sum(float(p.abs().sum()) for n, p in peft_model.named_parameters() if "lora_B" in n)
        if trained == 0:
            problems.append("PeftModel over the BertModel: every lora_B is zero (the adapter did not load)")
    # How far fine-tuning moved the embeddings, so that a pass means something.
    moved = ""
    base = base_model_dir(ckpt)
    if base:
        start = SentenceTransformer(base, device="cpu")
        start.max_seq_length = max_len
        effect = max_diff([g["embedding"] for g in got], start.encode(texts, convert_to_tensor=True))
        moved = f"; fine-tuning moved them by up to {effect:.3e} from {os.path.relpath(base, REPO)}"
    modules = ", ".join(type(m).__name__ for m in model)
    report(name, f"{len(texts)} texts of {min(lengths)} to {max(lengths)} tokens, {over} longer than "
                 f"max_seq_length {max_len}; modules [{modules}], dimension {ref.shape[1]}; max abs diff {d:.3e} "
                 f"(tol {TOL:g}){'; ' + '; '.join(problems) if problems else ''}{moved}",
           d <= TOL and not problems)


def is_token_classification(ckpt):
    with open(os.path.join(ckpt, "config.json"), encoding="utf-8") as f:
        archs = json.load(f).get("architectures") or []
    return any(a.endswith("ForTokenClassification") for a in archs)


def run_ft(ft, args, lines):
    proc = subprocess.run([ft, *args], input="".join(line + "\n" for line in lines),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join([ft, *args])} exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-800:]}")
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    if len(out) != len(lines):
        raise RuntimeError(f"{' '.join([ft, *args])}: {len(out)} JSON lines for {len(lines)} inputs")
    return out


def hf_logits(model, tok, texts):
    rows = []
    with torch.no_grad():
        for t in texts:  # one at a time: no padding, as ft predict
            enc = tok(t, truncation=True, return_tensors="pt")
            rows.append(model(**enc).logits[0].to(torch.float64))
    return torch.stack(rows)


def max_diff(a, b):
    return (torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max().item()


def check_predict(ft, ckpt):
    texts = check_texts()
    try:
        got = run_ft(ft, ["predict", "--checkpoint", ckpt, "--logits"], texts)
    except Exception as exc:  # the failure is the result
        report("predict probabilities", f"ft predict failed ({exc})", False)
        return
    model = AutoModelForSequenceClassification.from_pretrained(ckpt).eval()
    tok = AutoTokenizer.from_pretrained(ckpt)
    problem = model.config.problem_type or "single_label_classification"
    if problem == "regression":
        # The pipeline's default for one label is a sigmoid; ft predicts the score itself.
        clf = pipeline("text-classification", model=model, tokenizer=tok, top_k=None, device="cpu",
                       function_to_apply="none")
        ref = clf(texts, truncation=True)
        d = max_diff([g.get("score", float("nan")) for g in got], [r[0]["score"] for r in ref])
        report("predict score (regression)", f"{len(texts)} texts, max abs diff {d:.3e} (tol {TOL:g})", d <= TOL)
    else:
        # Multi-label: the pipeline applies a sigmoid per label, as ft does; single-label a softmax.
        clf = pipeline("text-classification", model=model, tokenizer=tok, top_k=None, device="cpu")
        ref = clf(texts, truncation=True)
        names = [model.config.id2label[i] for i in range(model.config.num_labels)]
        p_ft, p_hf, label_bad, missing = [], [], 0, set()
        for g, r in zip(got, ref):
            hf = {d["label"]: d["score"] for d in r}
            missing |= set(names) - set(g.get("probabilities", {}))
            p_ft.append([g.get("probabilities", {}).get(n, float("nan")) for n in names])
            p_hf.append([hf[n] for n in names])
            if problem == "multi_label_classification":
                label_bad += sorted(g.get("labels", [])) != sorted(n for n in names if hf[n] >= 0.5)
            elif g.get("label") != max(hf, key=hf.get):
                label_bad += 1
        d = max_diff(p_ft, p_hf)
        ok = not missing and d <= TOL and label_bad == 0
        extra = f", ft lacks labels {sorted(missing)}" if missing else ""
        report(f"predict probabilities ({problem})",
               f"{len(texts)} texts, labels {names}, max abs diff {d:.3e} (tol {TOL:g}), "
               f"predicted labels differ on {label_bad}{extra}", ok)
    if any("logits" not in g for g in got):
        report("predict logits", "ft predict printed no \"logits\" (needs --logits)", False)
        return
    ref_logits = hf_logits(model, tok, texts)
    d = max_diff([g["logits"] for g in got], ref_logits)
    report("predict logits", f"{len(texts)} texts, max abs diff {d:.3e} (tol {TOL:g})", d <= TOL)


def entity_key(e):
    return (e.get("start"), e.get("end"), e.get("entity_group"))


def compare_entities(text, got, ref):
    """What differs between ft's line for TEXT and the pipeline's entities: a
    list of strings, empty when they agree; and the max score difference."""
    problems, worst = [], 0.0
    if got.get("text") != text:
        problems.append(f"text printed as {got.get('text')!r}")
    ents = got.get("entities")
    if not isinstance(ents, list):
        return problems + ['no "entities" list'], float("inf")
    if not all(isinstance(e, dict) for e in ents):
        return problems + ["an entity that is not an object"], float("inf")
    for e in ents:
        s, t = e.get("start"), e.get("end")
        if not (isinstance(s, int) and isinstance(t, int) and 0 <= s < t <= len(text)):
            problems.append(f"offsets {s}..{t} outside the text")
        elif e.get("word") != text[s:t]:
            problems.append(f"word {e.get('word')!r} is not text[{s}:{t}] {text[s:t]!r}")

    def pos(e):
        return tuple(v if isinstance(v, int) else -1 for v in (e.get("start"), e.get("end")))

    ft_ents = sorted(ents, key=pos)
    hf_ents = sorted(ref, key=lambda e: (e["start"], e["end"]))
    if len(ft_ents) != len(hf_ents):
        problems.append(f"{len(ft_ents)} entities, transformers {len(hf_ents)}")
    for f, h in zip(ft_ents, hf_ents):
        if entity_key(f) != entity_key(h):
            problems.append(f"{f.get('entity_group')} {f.get('start')}..{f.get('end')} where transformers has "
                            f"{h['entity_group']} {h['start']}..{h['end']} {text[h['start']:h['end']]!r}")
        else:
            score = f.get("score")
            d = abs(float(score) - float(h["score"])) if isinstance(score, (int, float)) else float("inf")
            worst = max(worst, d)
    return problems, worst


def check_token_classification(ft, ckpt):
    texts = ner_texts()
    name = "predict entities (token-classification)"
    try:
        got = run_ft(ft, ["predict", "--checkpoint", ckpt], texts)
    except Exception as exc:  # the failure is the result
        report(name, f"ft predict failed ({exc})", False)
        return
    model = AutoModelForTokenClassification.from_pretrained(ckpt).eval()
    tok = AutoTokenizer.from_pretrained(ckpt)
    ner = pipeline("token-classification", model=model, tokenizer=tok, aggregation_strategy="simple", device="cpu")
    ref = ner(texts)
    n_ref = sum(len(r) for r in ref)
    bad, worst, first = 0, 0.0, ""
    for text, g, r in zip(texts, got, ref):
        problems, d = compare_entities(text, g, r)
        worst = max(worst, d)
        if problems:
            bad += 1
            if not first:
                first = f"; first: {text[:50]!r}: {'; '.join(problems[:3])}"
    groups = sorted({e["entity_group"] for r in ref for e in r})
    # A model that finds nothing would pass vacuously.
    none = "" if n_ref else "; transformers finds no entity at all, so nothing was compared"
    report(name, f"{len(texts)} texts, {n_ref} entities from transformers ({', '.join(groups)}), "
                 f"{bad} texts differ, max score diff {worst:.3e} (tol {TOL:g}){first}{none}",
           bad == 0 and worst <= TOL and n_ref > 0)


def check_tokenize(ft, ckpt):
    tok = AutoTokenizer.from_pretrained(ckpt)
    texts = tokenizer_texts()
    pairs = [(texts[i], texts[i + 1]) for i in range(len(texts) - 1)]
    for kind, items in (("singles", [(t, None) for t in texts]), ("pairs", pairs)):
        for n in (128, 32):
            lines = [a if b is None else f"{a}\t{b}" for a, b in items]
            name = f"tokenize {kind} max_length={n}"
            try:
                got = run_ft(ft, ["tokenize", "--checkpoint", ckpt, "--max-length", str(n)], lines)
            except Exception as exc:
                report(name, f"ft tokenize failed ({exc})", False)
                continue
            bad, worst, first = 0, 0, None
            for (a, b), g in zip(items, got):
                # RoBERTa-style tokenizers leave type ids out unless asked; ft prints them always.
                enc = tok(a, b, truncation=True, max_length=n, return_token_type_ids=True) if b is not None else \
                    tok(a, truncation=True, max_length=n, return_token_type_ids=True)
                want = (list(enc["input_ids"]), list(enc["token_type_ids"]))
                have = (g.get("input_ids"), g.get("token_type_ids"))
                if want != have:
                    bad += 1
                    if have[0] and len(have[0]) == len(want[0]):
                        worst = max(worst, max(abs(x - y) for x, y in zip(have[0], want[0])))
                    else:
                        worst = float("inf")
                    if first is None:
                        first = f"; first: {a[:40]!r}{' | ' + b[:40] if b else ''} hf {want[0][:12]}.. " \
                                f"ft {(have[0] or [])[:12]}.."
            report(name, f"{len(items)} examples, {bad} differ, max abs id diff {worst}{first or ''}",
                   bad == 0)


def peft_expected_vs_saved(base_model, lora_ckpt):
    """Keys PEFT's save format has for this adapter config vs those in ft's file."""
    from peft import PeftConfig, get_peft_model, get_peft_model_state_dict

    fresh = get_peft_model(base_model, PeftConfig.from_pretrained(lora_ckpt))
    want = set(get_peft_model_state_dict(fresh).keys())
    with safe_open(os.path.join(lora_ckpt, "adapter_model.safetensors"), "pt") as f:
        have = set(f.keys())
    return sorted(want - have), sorted(have - want)


def short(keys):
    return f"{keys[:6]}" + (f" (+{len(keys) - 6})" if len(keys) > 6 else "")


def resolve_base(name, lora_ckpt):
    if not name:
        return None
    for cand in (name, os.path.join(REPO, name), os.path.join(lora_ckpt, name)):
        if cand and os.path.isfile(os.path.join(cand, "config.json")):
            return cand
    return None


def base_from_checkpoint(lora_ckpt, tmp):
    """A directory with only the checkpoint's config.json and model.safetensors:
    loading LORA_CKPT itself would make transformers attach the adapter too."""
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(lora_ckpt, name)), os.path.join(tmp, name))
    return tmp


def check_lora(ft, lora_ckpt):
    from peft import PeftModel

    with open(os.path.join(lora_ckpt, "adapter_config.json"), encoding="utf-8") as f:
        acfg = json.load(f)
    texts = check_texts()
    try:
        got = run_ft(ft, ["predict", "--checkpoint", lora_ckpt, "--logits"], texts)
    except Exception as exc:
        report("lora logits", f"ft predict failed ({exc})", False)
        return
    if any("logits" not in g for g in got):
        report("lora logits", "ft predict printed no \"logits\" (needs --logits)", False)
        return
    ft_logits = [g["logits"] for g in got]
    config = AutoConfig.from_pretrained(lora_ckpt)
    labels = dict(num_labels=config.num_labels, id2label=config.id2label, label2id=config.label2id)
    tok = AutoTokenizer.from_pretrained(lora_ckpt)
    base_name = acfg.get("base_model_name_or_path") or ""
    peft_type = acfg.get("peft_type", "LORA")
    tag = {"LORA": "lora", "PROMPT_TUNING": "prompt", "PREFIX_TUNING": "prefix"}.get(peft_type, peft_type.lower())
    shape = (f"r={acfg.get('r')} alpha={acfg.get('lora_alpha')} targets={acfg.get('target_modules')}"
             if peft_type == "LORA" else f"num_virtual_tokens={acfg.get('num_virtual_tokens')}")
    print(f"{tag}: {lora_ckpt}: {peft_type} {shape} modules_to_save={acfg.get('modules_to_save')} "
          f"base_model_name_or_path={base_name!r}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        bases = [("base_model_name_or_path", resolve_base(base_name, lora_ckpt), base_name),
                 ("the checkpoint's model.safetensors as base",
                  base_from_checkpoint(lora_ckpt, tmp), "model.safetensors")]
        for label, base, shown in bases:
            name = f"{tag} PeftModel.from_pretrained ({label})"
            if base is None:
                report(name, f"base_model_name_or_path {shown!r} is not a local model directory "
                             f"(looked in {os.getcwd()}, {REPO}, {lora_ckpt})", False)
                continue
            torch.manual_seed(0)
            missing, unexpected = peft_expected_vs_saved(
                AutoModelForSequenceClassification.from_pretrained(base, **labels), lora_ckpt)
            keys = ""
            if missing:
                keys += f"; adapter_model.safetensors lacks keys PEFT saves: {short(missing)}"
            if unexpected:
                keys += f"; keys PEFT does not know: {short(unexpected)}"
            torch.manual_seed(0)
            base_model = AutoModelForSequenceClassification.from_pretrained(base, **labels)
            try:
                peft_model = PeftModel.from_pretrained(base_model, lora_ckpt).eval()
            except Exception as exc:
                report(name, f"PEFT cannot load it ({type(exc).__name__}: {exc}){keys}", False)
                continue
            d = max_diff(ft_logits, hf_logits(peft_model, tok, texts))
            report(name, f"{len(texts)} texts, base {shown}, max abs diff {d:.3e} (tol {TOL:g}){keys}",
                   d <= TOL and not missing and not unexpected)
    # transformers' own PEFT integration: from_pretrained on the directory loads
    # its config.json + model.safetensors and attaches adapter_model.safetensors.
    # It injects layers, which prompt learning has none of: PEFT refuses ("does not
    # support prompt learning"), so such a directory is read through PeftModel as above.
    name = f"{tag} AutoModelForSequenceClassification.from_pretrained(CKPT)"
    if peft_type != "LORA":
        print(f"{name}: not applicable: transformers attaches only adapters that inject layers; "
              f"{peft_type} loads with PeftModel.from_pretrained over the checkpoint's own weights (above)", flush=True)
        return
    try:
        model = AutoModelForSequenceClassification.from_pretrained(lora_ckpt).eval()
    except Exception as exc:
        report(name, f"transformers cannot load it ({type(exc).__name__}: {exc})", False)
        return
    attached = bool(getattr(model, "_hf_peft_config_loaded", False))
    d = max_diff(ft_logits, hf_logits(model, tok, texts))
    # How much the adapter moves the logits, so that a pass means something.
    with tempfile.TemporaryDirectory() as tmp:
        plain = AutoModelForSequenceClassification.from_pretrained(
            base_from_checkpoint(lora_ckpt, tmp)).eval()
        effect = max_diff(ft_logits, hf_logits(plain, tok, texts))
    report(name, f"{len(texts)} texts, adapter attached: {attached}, max abs diff {d:.3e} "
                 f"(tol {TOL:g}); the adapter itself moves the logits by up to {effect:.3e}",
           attached and d <= TOL)


def main():
    ap = argparse.ArgumentParser(description="cross-check an ft checkpoint against Hugging Face")
    ap.add_argument("--ft", default=os.path.join(REPO, "build", "bin", "ft"))
    ap.add_argument("checkpoint")
    ap.add_argument("lora_checkpoint", nargs="?")
    args = ap.parse_args()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    # Library chatter that says nothing about the comparison.
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*base_model_name_or_path.*was renamed")
    # PEFT resolves a relative base_model_name_or_path from the working
    # directory; ft runs from the repository root, so do the same.
    args.checkpoint = os.path.abspath(args.checkpoint)
    if args.lora_checkpoint:
        args.lora_checkpoint = os.path.abspath(args.lora_checkpoint)
    os.chdir(REPO)
    if is_sentence_transformers(args.checkpoint):
        check_sentence_embedding(args.ft, args.checkpoint)
    elif is_token_classification(args.checkpoint):
        check_token_classification(args.ft, args.checkpoint)
    else:
        check_predict(args.ft, args.checkpoint)
    check_tokenize(args.ft, args.checkpoint)
    if args.lora_checkpoint and is_token_classification(args.lora_checkpoint):
        print("lora: SKIPPED: token-classification adapters are not checked yet", flush=True)
    elif args.lora_checkpoint:
        check_lora(args.ft, args.lora_checkpoint)
    skipped = f" (skipped: {', '.join(skips)})" if skips else ""
    print(f"check-hf: {'FAILED: ' + ', '.join(failures) if failures else 'all checks passed'}{skipped}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
