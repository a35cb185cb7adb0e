"""Reads a checkpoint's tokenizer files as transformers' BertTokenizer does
(json.load of tokenizer_config.json and special_tokens_map.json, init kwargs
by name, special tokens looked up in vocab.txt) and checks every key, type
and value. Run by tests/unit/test_hf_files.cpp; transformers itself is not
installed here, so its reading is spelled out.

Usage: check_tokenizer_files.py DIR MAX_LENGTH LOWERCASE(0|1)
Prints "ok" and exits 0, or prints each problem and exits 1.
"""
import json
import os
import sys

directory, want_max, want_lower = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
    cfg = json.load(f)
with open(os.path.join(directory, "special_tokens_map.json"), encoding="utf-8") as f:
    special = json.load(f)
with open(os.path.join(directory, "vocab.txt"), encoding="utf-8") as f:
    vocab = [line.rstrip("\n") for line in f]

want = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
        "mask_token": "[MASK]"}
check(cfg.get("tokenizer_class") == "BertTokenizer", "tokenizer_class is %r" % cfg.get("tokenizer_class"))
check(type(cfg.get("do_lower_case")) is bool and cfg["do_lower_case"] == want_lower,
      "do_lower_case is %r" % cfg.get("do_lower_case"))
check(type(cfg.get("model_max_length")) is int and cfg["model_max_length"] == want_max,
      "model_max_length is %r" % cfg.get("model_max_length"))
check("strip_accents" in cfg and cfg["strip_accents"] is None, "strip_accents is %r" % cfg.get("strip_accents"))
check(cfg.get("tokenize_chinese_chars") is True, "tokenize_chinese_chars is %r" % cfg.get("tokenize_chinese_chars"))
check(type(cfg.get("clean_up_tokenization_spaces")) is bool, "clean_up_tokenization_spaces missing")
for key, token in want.items():
    check(cfg.get(key) == token, "tokenizer_config %s is %r" % (key, cfg.get(key)))
    check(special.get(key) == token, "special_tokens_map %s is %r" % (key, special.get(key)))
    check(token in vocab, "%s %s is not in vocab.txt" % (key, token))
check(set(special) == set(want), "special_tokens_map has keys %r" % sorted(special))

if problems:
    print("\n".join(problems))
    sys.exit(1)
print("ok")
