#!/usr/bin/env bash
# Cross-checks an ft checkpoint against Hugging Face transformers/PEFT:
# probabilities and logits (pipeline), or for a token-classification checkpoint
# the entities, their offsets and scores (pipeline "token-classification"), for
# a sentence-transformers checkpoint (ft run --task sentence-embedding) the
# embeddings (SentenceTransformer(CKPT).encode against ft predict),
# tokenizer ids (AutoTokenizer, singles and pairs) and, with a second
# argument, an ft LoRA checkpoint loaded by PEFT.
# One line per check with its max abs difference and PASS/FAIL.
#
#   scripts/check-hf.sh CKPT [LORA_CKPT]
#   FT=/path/to/ft scripts/check-hf.sh CKPT      another ft binary
#
# Exit 0 all passed, 1 a check failed, 77 (one SKIPPED line) when the env
# (scripts/hf-env.sh) or the ft binary is missing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$repo/.venv-hf/bin/python"
ft="${FT:-$repo/build/bin/ft}"

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: scripts/check-hf.sh CKPT [LORA_CKPT]" >&2
  exit 2
fi
if [[ ! -x "$py" ]]; then
  echo "SKIPPED: needs .venv-hf (scripts/hf-env.sh)"
  exit 77
fi
if [[ ! -x "$ft" ]]; then
  echo "SKIPPED: no ft binary at $ft (scripts/setup.sh builds it)"
  exit 77
fi
for d in "$@"; do
  [[ -f "$d/config.json" ]] || { echo "check-hf: $d is not a checkpoint (no config.json)" >&2; exit 2; }
done
exec "$py" "$repo/scripts/check_hf.py" --ft "$ft" "$@"
