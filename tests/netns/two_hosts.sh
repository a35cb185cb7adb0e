#!/usr/bin/env bash
# Two "hosts" in network namespaces of the test's own, joined by a veth pair
# with private addresses: 2 nodes x 2 ranks of ddp and zero3 with --nnodes 2
# --node-rank R --master-addr, losses equal to the single-host 4-rank run
# within 1e-6; then the link is cut mid-run: every rank on both hosts exits
# within --timeout + 10 s, each launcher prints one line, no process is left
# in either namespace; with --max-restarts 1 and the link restored, the job
# completes. Needs root and iproute2; prints "SKIPPED: ..." and exits 77
# (ctest: skipped) where namespaces are not allowed.
#
#   tests/netns/two_hosts.sh BUILD_DIR
set -u
build="$(cd "${1:?usage: two_hosts.sh BUILD_DIR}" && pwd)"
ft="$build/bin/ft"
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; status=1; }
status=0

[[ "$(id -u)" == 0 ]] || skip "needs root for ip netns"
command -v ip >/dev/null || skip "needs iproute2 (ip)"
command -v python3 >/dev/null || skip "needs python3 to compare the metrics"

id=$$
A="ftA$id" B="ftB$id" VA="vA$id" VB="vB$id"
ADDR_A=10.231.7.1 ADDR_B=10.231.7.2
tmp="$(mktemp -d "${TMPDIR:-/tmp}/ft-netns.XXXXXX")"

cleanup() {
  for ns in "$A" "$B"; do
    pids="$(ip netns pids "$ns" 2>/dev/null)"
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$VA" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$A" 2>/dev/null || skip "ip netns add is not permitted on this machine"
ip netns add "$B" || skip "ip netns add is not permitted on this machine"
ip link add "$VA" type veth peer name "$VB" 2>/dev/null || skip "cannot create a veth pair here"
ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" || skip "cannot move the veth ends into the namespaces"
ip -n "$A" addr add "$ADDR_A/24" dev "$VA"
ip -n "$B" addr add "$ADDR_B/24" dev "$VB"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up
link_up() { ip -n "$A" link show "$VA" | grep -q LOWER_UP && ip -n "$B" link show "$VB" | grep -q LOWER_UP; }
for _ in $(seq 50); do link_up && break; sleep 0.1; done
link_up || skip "the veth link does not come up"

# The tiny task (tests/support/ft_tiny_task.h's, smaller): a 2-layer BERT of
# hidden size 16 on good/bad sentences, dropout on.
cat >"$tmp/vocab.txt" <<'EOF'
[PAD]
[UNK]
[CLS]
[SEP]
[MASK]
good
bad
film
plot
the
very
was
a
EOF
cat >"$tmp/config.json" <<'EOF'
{"model_type": "bert", "vocab_size": 13, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 32, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
 "max_position_embeddings": 32, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
 "pad_token_id": 0, "num_labels": 2, "id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}}
EOF
for i in $(seq 64); do
  echo '{"text": "the film was very good", "label": "pos"}'
  echo '{"text": "a bad plot", "label": "neg"}'
done >"$tmp/train.jsonl"
cat >"$tmp/run.yaml" <<EOF
model:
  config: $tmp/config.json
data:
  train: $tmp/train.jsonl
  labels: [neg, pos]
  vocab: $tmp/vocab.txt
  dev_fraction: 0
  max_seq_len: 12
train:
  epochs: 1000
  batch_size: 4
  lr: 5.0e-3
  log_every: 1
runtime:
  threads: 1
  progress: false
EOF

port=29631
# node R of a 2 x 2 job in its namespace, in the background (its pid: $!);
# stdout+stderr to $tmp/$name.R.log.
start_node() {
  local ns="$1" rank="$2" name="$3"; shift 3
  ip netns exec "$ns" "$ft" run --config "$tmp/run.yaml" --nproc 2 --nnodes 2 --node-rank "$rank" \
    --master-addr "$ADDR_A" --master-port "$port" --no-pin "$@" >"$tmp/$name.$rank.log" 2>&1 &
}

same_losses() {  # reference.jsonl other.jsonl
  python3 - "$1" "$2" <<'EOF'
import json, sys
def losses(p):
    return [e["loss"] for e in map(json.loads, open(p)) if e.get("event") == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))
print(f"  {len(a)} steps, max |loss difference| {worst:.3g}")
sys.exit(0 if len(a) == len(b) and len(a) > 0 and worst <= 1e-6 else 1)
EOF
}

for strategy in ddp zero3; do
  echo "== $strategy: 2 hosts x 2 ranks against 1 host x 4 ranks"
  "$ft" run --config "$tmp/run.yaml" --strategy "$strategy" --nproc 4 --no-pin --max-steps 8 \
    --metrics-out "$tmp/$strategy.ref.jsonl" >"$tmp/$strategy.ref.log" 2>&1 || fail "$strategy: single-host run: $(tail -1 "$tmp/$strategy.ref.log")"
  start_node "$A" 0 "$strategy" --strategy "$strategy" --max-steps 8 --timeout 20 --metrics-out "$tmp/$strategy.jsonl"
a=$!
  start_node "$B" 1 "$strategy" --strategy "$strategy" --max-steps 8 --timeout 20
b=$!
  wait "$a" || fail "$strategy: node 0: $(tail -1 "$tmp/$strategy.0.log")"
  wait "$b" || fail "$strategy: node 1: $(tail -1 "$tmp/$strategy.1.log")"
  same_losses "$tmp/$strategy.ref.jsonl" "$tmp/$strategy.jsonl" || fail "$strategy: losses differ from the single-host run"
  port=$((port + 1))
done

echo "== the link cut mid-run (ddp, --timeout 5)"
start_node "$A" 0 cut --strategy ddp --max-steps 1000000 --timeout 5 --metrics-out "$tmp/cut.jsonl"
a=$!
start_node "$B" 1 cut --strategy ddp --max-steps 1000000 --timeout 5
b=$!
for _ in $(seq 300); do [[ -s "$tmp/cut.jsonl" ]] && break; sleep 0.1; done
[[ -s "$tmp/cut.jsonl" ]] || fail "the cut job never trained: $(tail -2 "$tmp/cut.0.log")"
ip -n "$A" link set "$VA" down
t0=$(date +%s.%N)
wait "$a"; rc_a=$?
wait "$b"; rc_b=$?
elapsed=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
echo "  both launchers exited ${elapsed} s after the cut (codes $rc_a, $rc_b)"
python3 -c "import sys; sys.exit(0 if $elapsed <= 15 else 1)" || fail "exits took ${elapsed} s, more than --timeout + 10"
for r in 0 1; do
  errors=$(grep -c '^ft: error: ' "$tmp/cut.$r.log")
  echo "  node $r: $(grep '^ft: error: ' "$tmp/cut.$r.log" | head -1)"
  [[ "$errors" == 1 ]] || fail "node $r printed $errors error lines"
  grep -q '^ft: error: .*rank' "$tmp/cut.$r.log" || fail "node $r's line names no rank"
done
[[ $rc_a != 0 && $rc_b != 0 ]] || fail "a launcher exited 0 after the cut"
for ns in "$A" "$B"; do
  [[ -z "$(ip netns pids "$ns")" ]] || fail "processes left in $ns: $(ip netns pids "$ns" | tr '\n' ' ')"
done

echo "== the link cut and restored under --max-restarts 1"
ip -n "$A" link set "$VA" up
port=$((port + 1))
rm -rf "$tmp/out"
start_node "$A" 0 restart --strategy ddp --max-steps 1500 --timeout 5 --max-restarts 1 --set train.save_every=20 \
  --output-dir "$tmp/out" --metrics-out "$tmp/restart.jsonl"
a=$!
# One output directory: a real multi-host job needs a shared file system for resume too.
start_node "$B" 1 restart --strategy ddp --max-steps 1500 --timeout 5 --max-restarts 1 --set train.save_every=20 \
  --output-dir "$tmp/out"
b=$!
for _ in $(seq 300); do grep -q '"step":25' "$tmp/restart.jsonl" 2>/dev/null && break; sleep 0.1; done
ip -n "$A" link set "$VA" down
for _ in $(seq 300); do
  grep -q '^ft: restart 1/1' "$tmp/restart.0.log" && grep -q '^ft: restart 1/1' "$tmp/restart.1.log" && break
  sleep 0.1
done
ip -n "$A" link set "$VA" up
wait "$a" || fail "restart: node 0: $(tail -1 "$tmp/restart.0.log")"
wait "$b" || fail "restart: node 1: $(tail -1 "$tmp/restart.1.log")"
for r in 0 1; do grep '^ft: restart' "$tmp/restart.$r.log" | sed "s/^/  node $r: /"; done
grep -q '^done: ddp' "$tmp/restart.0.log" || fail "restart: the job did not complete"
grep -q '^resumed from ' "$tmp/restart.0.log" || fail "restart: the job did not resume from a checkpoint"

[[ $status == 0 ]] && echo "two_hosts: all passed"
exit $status
