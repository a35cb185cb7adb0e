#!/usr/bin/env bash
# Inference speed: `ft predict` against the two things a user deploys a
# fine-tuned classifier with, on the same checkpoint, texts, threads and
# truncation, side by side in one run:
#   pipeline  transformers' pipeline("text-classification"), batch_size BATCH
#   ort       ONNX Runtime on `ft export --onnx` of the checkpoint (fp32,
#             ORT_ENABLE_ALL), batches sorted by length as ft runs them
# Per round, back to back: ft, pipeline, ort (machine noise hits all alike);
# the median of ROUNDS is reported. ft is timed as the whole process (start,
# load, tokenisation, inference, printing): its load is inside its number and
# outside the peers'. The peers run in the env of scripts/hf-env.sh.
#
#   scripts/bench-predict.sh [OUT_DIR [LABEL=FT ...]]
#   CKPT=runs/default/final N=2000 THREADS=2 BATCH=32 ROUNDS=3 scripts/bench-predict.sh
#   PEERS= scripts/bench-predict.sh runs/ab before=/tmp/old/bin/ft after=build/bin/ft
#
# LABEL=FT pairs time several ft binaries side by side (a change's before and
# after; a copied build runs from its own lib/); the default is ft=build/bin/ft.
# PEERS (default "pipeline ort") names the peers to run; empty runs none.
#
# The texts are the last N reviews of data/imdb/train.jsonl (the default run
# trains on its first rows), as {"text": ...} lines so a review's tabs are
# never read as a sentence pair. Also printed: how often the peers' labels
# agree with ft's, and the largest difference of the winning label's score.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="${1:-runs/bench-predict}"
shift || true
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("ft=$repo/build/bin/ft")
peers="${PEERS-pipeline ort}"
ckpt="${CKPT:-runs/default/final}"
n="${N:-2000}"
threads="${THREADS:-2}"
batch="${BATCH:-32}"
rounds="${ROUNDS:-3}"
py="$repo/.venv-hf/bin/python"
for v in "${variants[@]}"; do
  [ -x "${v#*=}" ] || { echo "bench-predict: ${v#*=} is not built; run scripts/setup.sh" >&2; exit 1; }
done
ft="${variants[0]#*=}"
[ -x "$py" ] || { echo "bench-predict: no env at .venv-hf; run scripts/hf-env.sh" >&2; exit 1; }
[ -d "$ckpt" ] || { echo "bench-predict: no checkpoint $ckpt; run scripts/run-default.sh (it saves runs/default/final)" >&2; exit 1; }
mkdir -p "$out"
max_len="$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("model_max_length", 128))' "$ckpt/tokenizer_config.json")"
tail -n "$n" data/imdb/train.jsonl | "$py" -c '
import json, sys
for line in sys.stdin:
    print(json.dumps({"text": json.loads(line)["text"]}, ensure_ascii=False))' > "$out/inputs.jsonl"
"$ft" export --onnx "$ckpt" "$out/model.onnx" > /dev/null
echo "bench-predict: $n texts, max_length $max_len, $threads threads, batch $batch, $rounds rounds; $(uptime)"

rm -f "$out/times.jsonl"
for r in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    label="${v%%=*}" bin="${v#*=}"
    start=$(date +%s.%N)
    LD_LIBRARY_PATH="$(dirname "$bin")/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" /usr/bin/time -f '%M' -o "$out/$label.rss" \
      "$bin" predict --checkpoint "$ckpt" --threads "$threads" --batch-size "$batch" < "$out/inputs.jsonl" > "$out/$label.jsonl"
    end=$(date +%s.%N)
    echo "{\"peer\": \"$label\", \"round\": $r, \"seconds\": $(echo "$end - $start" | bc), \"rss_kb\": $(cat "$out/$label.rss")}" >> "$out/times.jsonl"
  done
  for peer in $peers; do
    line="$(/usr/bin/time -f '%M' -o "$out/$peer.rss" \
      "$py" scripts/predict_peer_bench.py "$peer" "$ckpt" "$out/inputs.jsonl" "$max_len" "$threads" "$batch" \
      "$out/$peer.jsonl" "$out/model.onnx" | tail -n 1)"
    echo "$line" | "$py" -c 'import json,sys; d=json.load(sys.stdin); d.update(peer=sys.argv[1], round=int(sys.argv[2]), rss_kb=int(open(sys.argv[3]).read().split()[-1])); print(json.dumps(d))' \
      "$peer" "$r" "$out/$peer.rss" >> "$out/times.jsonl"
  done
done

labels=()
for v in "${variants[@]}"; do labels+=("${v%%=*}"); done
"$py" - "$out" "$n" "$ckpt" "$max_len" "${labels[@]}" $peers <<'EOF'
import json, statistics, sys
out, n, ckpt, max_len, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5:]
rows = [json.loads(l) for l in open(f"{out}/times.jsonl")]
tokens = next((r["tokens"] for r in rows if "tokens" in r), None)
if tokens is None:  # no peer ran: count the tokens as the peers do
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(ckpt).backend_tokenizer
    tok.enable_truncation(max_len)
    tok.no_padding()
    texts = [json.loads(l)["text"] for l in open(f"{out}/inputs.jsonl")]
    tokens = sum(len(e.ids) for e in tok.encode_batch(texts))
def median(peer):
    return statistics.median(r["seconds"] for r in rows if r["peer"] == peer)
def labels(name):
    recs = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    for r in recs:  # ft prints every label's probability; the peers the winner's score
        r.setdefault("score", r.get("probabilities", {}).get(r["label"]))
    return recs
first = labels(names[0])
print(f"| | seconds (median) | texts/s | tokens/s | peak RSS MB | {names[0]} ÷ | labels = {names[0]}'s | max score diff |")
print("|---|---|---|---|---|---|---|---|")
t_first = median(names[0])
for peer in names:
    t = median(peer)
    rss = max(r["rss_kb"] for r in rows if r["peer"] == peer) / 1024
    other = labels(peer)
    assert len(other) == n == len(first), (peer, len(other), len(first))
    same = sum(a["label"] == b["label"] for a, b in zip(first, other)) / n
    diff = max(abs(a["score"] - b["score"]) for a, b in zip(first, other))
    print(f"| {peer} | {t:.2f} | {n / t:.1f} | {tokens / t:.0f} | {rss:.0f} | {t / t_first:.2f}x | {same:.4f} | {diff:.1e} |")
EOF
