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
#   scripts/bench-predict.sh [OUT_DIR]
#   CKPT=runs/default/final N=2000 THREADS=2 BATCH=32 ROUNDS=3 scripts/bench-predict.sh
#
# The texts are the last N reviews of data/imdb/train.jsonl (the default run
# trains on its first rows), as {"text": ...} lines so a review's tabs are
# never read as a sentence pair. Also printed: how often the peers' labels
# agree with ft's, and the largest difference of the winning label's score.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="${1:-runs/bench-predict}"
ckpt="${CKPT:-runs/default/final}"
n="${N:-2000}"
threads="${THREADS:-2}"
batch="${BATCH:-32}"
rounds="${ROUNDS:-3}"
py="$repo/.venv-hf/bin/python"
ft="$repo/build/bin/ft"
[ -x "$ft" ] || { echo "bench-predict: $ft is not built; run scripts/setup.sh" >&2; exit 1; }
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

for r in $(seq 1 "$rounds"); do
  start=$(date +%s.%N)
  /usr/bin/time -f '%M' -o "$out/ft.rss" \
    "$ft" predict --checkpoint "$ckpt" --threads "$threads" --batch-size "$batch" < "$out/inputs.jsonl" > "$out/ft.jsonl"
  end=$(date +%s.%N)
  echo "{\"peer\": \"ft\", \"round\": $r, \"seconds\": $(echo "$end - $start" | bc), \"rss_kb\": $(cat "$out/ft.rss")}" >> "$out/times.jsonl"
  for peer in pipeline ort; do
    line="$(/usr/bin/time -f '%M' -o "$out/$peer.rss" \
      "$py" scripts/predict_peer_bench.py "$peer" "$ckpt" "$out/inputs.jsonl" "$max_len" "$threads" "$batch" \
      "$out/$peer.jsonl" "$out/model.onnx" | tail -n 1)"
    echo "$line" | "$py" -c 'import json,sys; d=json.load(sys.stdin); d.update(peer=sys.argv[1], round=int(sys.argv[2]), rss_kb=int(open(sys.argv[3]).read().split()[-1])); print(json.dumps(d))' \
      "$peer" "$r" "$out/$peer.rss" >> "$out/times.jsonl"
  done
done

"$py" - "$out" "$n" <<'EOF'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(f"{out}/times.jsonl")]
tokens = next(r["tokens"] for r in rows if "tokens" in r)
def median(peer):
    return statistics.median(r["seconds"] for r in rows if r["peer"] == peer)
def labels(name):
    recs = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    for r in recs:  # ft prints every label's probability; the peers the winner's score
        r.setdefault("score", r.get("probabilities", {}).get(r["label"]))
    return recs
ft = labels("ft")
print(f"| | seconds (median) | texts/s | tokens/s | peak RSS MB | ft ÷ | labels = ft's | max score diff |")
print("|---|---|---|---|---|---|---|---|")
t_ft = median("ft")
for peer in ["ft", "pipeline", "ort"]:
    t = median(peer)
    rss = max(r["rss_kb"] for r in rows if r["peer"] == peer) / 1024
    other = labels(peer)
    assert len(other) == n == len(ft), (peer, len(other), len(ft))
    same = sum(a["label"] == b["label"] for a, b in zip(ft, other)) / n
    diff = max(abs(a["score"] - b["score"]) for a, b in zip(ft, other))
    print(f"| {peer} | {t:.2f} | {n / t:.1f} | {tokens / t:.0f} | {rss:.0f} | {t / t_ft:.2f}x | {same:.4f} | {diff:.1e} |")
EOF
