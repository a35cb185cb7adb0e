#!/usr/bin/env bash
# Makes the git-ignored Python virtualenv .venv-hf/ at the repo root with the
# Hugging Face stack that the reference fixtures (scripts/hf-fixtures.py) and
# the cross-checks (scripts/check-hf.sh) run in. ft itself never needs it.
#
#   scripts/hf-env.sh            create/complete the env, print the versions
#   PYTHON=/usr/bin/python3 scripts/hf-env.sh   build it on another interpreter
#
# Idempotent: .venv-hf/.pins holds the pins it was installed with; when it
# matches the list below, nothing is fetched again. The torch wheel from PyPI
# is large (it pulls the NVIDIA runtime wheels too): minutes on first run.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv-hf"
stamp="$venv/.pins"
py="${PYTHON:-python3}"

# Exact versions, checked to install together (pip's resolver, Python 3.11).
pins=(
  torch==2.15.0
  numpy==2.4.6
  safetensors==0.8.0
  tokenizers==0.23.3
  transformers==5.24.0
  sentencepiece==0.2.3                    # transformers reads spm.model with these (tokenizer fixtures)
  protobuf==7.36.2
  accelerate==1.15.0
  peft==0.21.2
  deepspeed==0.19.8
  sentence-transformers==6.2.0            # scripts/st-fixtures.py (the sentence-embedding fixtures)
  datasets==5.2.0                         # SentenceTransformerTrainer's train_dataset
  scikit-learn==1.9.1                     # scripts/metrics-fixture.py (reference scores); also an mlflow dependency
  mlflow==3.17.2                          # tests/mlflow/check-mlflow.sh (the tracking server that `ft run` reports to)
  onnx==1.23.2                            # the ONNX import checks: scripts/onnx-fixtures.py exports,
  onnxruntime==1.32.0                     # scripts/check-onnx.py runs the export as the reference
)
want="$(printf '%s\n' "${pins[@]}")"

print_versions() {
  "$venv/bin/python" - <<'EOF'
import importlib
for name in ("torch", "numpy", "safetensors", "tokenizers", "transformers",
             "sentencepiece", "google.protobuf", "accelerate", "peft", "deepspeed",
             "sentence_transformers", "datasets", "sklearn", "mlflow", "onnx", "onnxruntime"):
    try:
        mod = importlib.import_module(name)
        print(f"hf-env: {name} {mod.__version__}")
    except Exception as exc:  # report, do not hide, a broken package
        print(f"hf-env: {name} NOT IMPORTABLE ({type(exc).__name__}: {exc})")
EOF
}

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "hf-env: $venv is up to date"
  print_versions
  exit 0
fi

sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
if ! command -v "$py" >/dev/null; then
  echo "hf-env: installing python3"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3 >/dev/null
fi
# Debian ships venv (and the ensurepip it needs) separately.
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  ver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  echo "hf-env: installing python3-venv"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3-venv "python$ver-venv" >/dev/null 2>&1 \
    || DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3-venv >/dev/null
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "hf-env: creating $venv with $("$py" --version)"
  "$py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
rm -f "$stamp"
"${pip[@]}" install -q --upgrade pip setuptools wheel
# Everything but DeepSpeed first: its setup.py imports torch, so it is built
# afterwards without build isolation, and without compiling any op (no CUDA
# toolkit here; ops that are needed are JIT-built at run time).
noneds=(); for p in "${pins[@]}"; do [[ $p == deepspeed==* ]] || noneds+=("$p"); done
echo "hf-env: installing ${noneds[*]}"
"${pip[@]}" install -q "${noneds[@]}"
for p in "${pins[@]}"; do
  if [[ $p == deepspeed==* ]]; then
    echo "hf-env: installing $p (DS_BUILD_OPS=0)"
    DS_BUILD_OPS=0 DS_SKIP_CUDA_CHECK=1 "${pip[@]}" install -q --no-build-isolation "${pins[@]}"
  fi
done
"${pip[@]}" check
printf '%s\n' "${pins[@]}" >"$stamp"
print_versions
