#!/usr/bin/env bash
# ft against the real peers a user would pick (issue 27): Hugging Face
# Trainer, accelerate FSDP, DeepSpeed ZeRO, peft LoRA, from the env of
# scripts/hf-env.sh (.venv-hf: PyPI torch 2.x, transformers, accelerate,
# deepspeed, peft), on the same pre-tokenized rows, model, global batch (32)
# and steps as ft. Per ft row and round, back to back: each paired peer row,
# then ft, so machine noise hits both alike. Median of ROUNDS; the first
# WARMUP steps are left out of samples/s on both sides. Peak RSS is per rank
# (ru_maxrss for the peer, ft's summary for ft), the largest rank shown.
#
#   ft row       peer row(s)                                   ranks x threads
#   single       Trainer, one process                          1 x C
#   ddp          Trainer under torchrun (DDP, gloo)            N x C/N, pinned
#   ddp_amp      the same with bf16=True                       N x C/N, pinned
#   fsdp         accelerate launch, FSDP FULL_SHARD            N x C/N, pinned
#   zero1        Trainer(deepspeed=ZeRO-1), CPU accelerator    N x C/N, pinned
#   zero2        DeepSpeed ZeRO-2; accelerate FSDP SHARD_GRAD_OP
#   zero3        DeepSpeed ZeRO-3; accelerate FSDP FULL_SHARD
#   lora         peft LoRA r=8 (query, value) under Trainer   1 x C   (ft: lora.rank=8)
#   gbl          Trainer, group_by_length (padding longest)   1 x C   (ft: data.group_by_length)
# Every peer row runs with its best setting for this machine: C/N intra-op
# threads per rank (OMP_NUM_THREADS and torch.set_num_threads), ranks pinned
# to their own cores, SDPA attention, torch's default backends (oneDNN on).
# A peer row that fails is kept in the table with its error (full log under
# $OUT_DIR/logs/).
#
# Workloads:
#   minilm  all-MiniLM-L6-v2 (data/all-minilm-l6-v2, pretrained) on 2 048 IMDB
#           reviews tokenized here with its tokenizer (256 tokens), padding longest
#   mini    ../shared/fixtures/bench-mini (random-init mini BERT), padding longest
#   weibo   ../shared/fixtures/bench-weibo, padded to 128 as the seeds did
#           (the gbl row: padding longest + group_by_length, shuffled)
#
# Usage: scripts/bench-hf-peers.sh [minilm|mini|weibo|all]
#   env: STEPS=20 WARMUP=2 ROUNDS=3 ROWS="single ddp ..." BUILD=build
#        QUIET_LOAD=0.5 QUIET_TIMEOUT=1800 (seconds to wait for load < QUIET_LOAD; 0: don't wait)
#        OUT=file.md OUT_DIR=bench-out/hf-peers
# Not a test: the full run takes hours on 2 cores. Numbers from a loaded machine are worthless.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
which_workloads="${1:-all}"
steps="${STEPS:-20}"
warmup="${WARMUP:-2}"
rounds="${ROUNDS:-3}"
rows="${ROWS:-single ddp ddp_amp fsdp zero1 zero2 zero3 lora gbl}"
ft="${BUILD:-build}/bin/ft"
out_dir="${OUT_DIR:-bench-out/hf-peers}"
venv="$repo/.venv-hf"
py="$venv/bin/python"
cores="$(nproc)"
nproc_dist=2
global=32

[[ -x "$ft" ]] || { echo "bench-hf-peers: $ft not found: run scripts/setup.sh first (or set BUILD)" >&2; exit 1; }
[[ -x "$py" ]] || scripts/hf-env.sh
mkdir -p "$out_dir/logs"

load_now() { cut -d' ' -f1 /proc/loadavg; }
# Wait for a quiet machine: poll the 1-minute load until < QUIET_LOAD or QUIET_TIMEOUT.
wait_quiet() {
  local limit="${QUIET_TIMEOUT:-1800}" want="${QUIET_LOAD:-0.5}" waited=0
  while ! awk -v l="$(load_now)" -v w="$want" 'BEGIN {exit !(l < w)}'; do
    if ((waited >= limit)); then
      echo "bench-hf-peers: load still $(load_now) after ${limit}s: measuring anyway (the table says so)" >&2
      return 0
    fi
    ((waited == 0)) && echo "bench-hf-peers: waiting for the load average to drop below $want ($(load_now))" >&2
    sleep 10
    waited=$((waited + 10))
  done
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
field() { "$py" -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); v=d.get(sys.argv[1]); print(max(v) if isinstance(v, list) else v)' "$1"; }

port() { echo $((29500 + RANDOM % 2000)); }

# peer <peer row> <workload args...>: one run; prints the merged JSON line (or {"error": ...}).
peer() {
  local row="$1"; shift
  local dir="$out_dir/run" log="$out_dir/logs/peer-$row.log" n=1 launch
  rm -rf "$dir"
  case "$row" in single | lora | gbl) n=1 ;; *) n=$nproc_dist ;; esac
  local args=(scripts/hf_peer_bench.py --row "$row" --steps "$steps" --warmup "$warmup" --global-batch "$global"
              --out-dir "$dir" "$@")
  if ((n == 1)); then
    launch=("$py")
  elif [[ "$row" == fsdp_* ]]; then
    local strat=FULL_SHARD
    [[ "$row" == fsdp_grad_op ]] && strat=SHARD_GRAD_OP
    cat >"$out_dir/accelerate-$row.yaml" <<EOF
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_machines: 1
num_processes: $n
machine_rank: 0
main_process_port: $(port)
mixed_precision: 'no'
use_cpu: true
rdzv_backend: static
same_network: true
fsdp_config:
  fsdp_version: 1
  fsdp_sharding_strategy: $strat
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_forward_prefetch: false
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_use_orig_params: true
  fsdp_sync_module_states: false
  fsdp_cpu_ram_efficient_loading: false
  fsdp_offload_params: false
EOF
    # fsdp_sync_module_states: false: true stops accelerate 1.15 on CPU ("There are currently
    # no available devices found, must be one of 'XPU', 'CUDA', ..."); every rank builds the
    # same seeded model anyway.
    launch=("$venv/bin/accelerate" launch --config_file "$out_dir/accelerate-$row.yaml")
  else
    launch=("$venv/bin/torchrun" --nproc_per_node "$n" --master_port "$(port)")
  fi
  # DeepSpeed: its CPU accelerator (gloo when oneCCL is absent); no CUDA here.
  if DS_ACCELERATOR=cpu OMP_NUM_THREADS=$((cores / n)) TOKENIZERS_PARALLELISM=false \
      "${launch[@]}" "${args[@]}" >"$log" 2>&1; then
    "$py" scripts/hf_peer_bench.py --collect "$dir"
  else
    local err
    err="$(grep -E '(Error|Exception): ' "$log" | grep -v ChildFailedError | head -1 | sed 's/^\[rank[0-9]*\]: //' | cut -c1-300)"
    [[ -n "$err" ]] || err="$(tail -1 "$log" | cut -c1-300)"
    "$py" -c 'import json,sys; print(json.dumps({"error": sys.argv[1]}))' "$err"
  fi
}

# ftrun <ft row> <overrides...>: one run; prints ft's summary line (or {"error": ...}).
ftrun() {
  local row="$1"; shift
  local s="$row" n=$nproc_dist extra=() log="$out_dir/logs/ft-$row.log"
  case "$row" in
    single) n=1 ;;
    lora) s=single; n=1; extra+=(--set lora.rank=8) ;;
    gbl) s=single; n=1; extra+=(--set data.group_by_length=true --set data.padding=longest --set train.shuffle=true) ;;
  esac
  [[ "$s" == ddp_amp ]] || extra+=(--precision fp32)
  rm -f "$out_dir/ft.jsonl"
  if "$ft" run --config configs/bench-mini.yaml --strategy "$s" --nproc "$n" --threads $((cores / n)) \
      --max-steps "$steps" --set train.batch_size=$((global / n)) --metrics-out "$out_dir/ft.jsonl" \
      "$@" "${extra[@]}" >"$log" 2>&1; then
    grep '"event":"summary"' "$out_dir/ft.jsonl"
  else
    "$py" -c 'import json,sys; print(json.dumps({"error": sys.argv[1]}))' "$(grep -m1 -i error "$log" | cut -c1-300)"
  fi
}

peers_of() {
  case "$1" in
    single) echo single ;; ddp) echo ddp ;; ddp_amp) echo ddp_amp ;; fsdp) echo fsdp_full ;;
    zero1) echo ds_zero1 ;; zero2) echo "ds_zero2 fsdp_grad_op" ;; zero3) echo "ds_zero3 fsdp_full" ;;
    lora) echo lora ;; gbl) echo gbl ;;
  esac
}

bench_workload() {  # bench_workload <name> <data> <model> <padding> <lr> <max_len>
  local name="$1" data="$2" model="$3" padding="$4" lr="$5" maxlen="$6"
  [[ -f "$data" ]] || { echo "bench-hf-peers: $data is missing" >&2; exit 1; }
  local ftover=(--set "model.config=$model" --set "data.train=$data" --set "data.padding=$padding"
                --set "data.max_seq_len=$maxlen" --set "train.lr=$lr")
  local peerover=(--data "$data" --model "$model" --padding "$padding" --lr "$lr")
  echo
  echo "### $name: $data, model $model, padding $padding, global batch $global, $steps steps ($warmup warm-up excluded), median of $rounds"
  echo
  echo "| ft row | peer row | ranks x threads | peer samples/s | ft samples/s | ft / peer | peer peak RSS/rank MB | ft peak RSS/rank MB | load |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---|"
  local row p r
  for row in $rows; do
    local n=$nproc_dist
    case "$row" in single | lora | gbl) n=1 ;; esac
    local peer_list; peer_list="$(peers_of "$row")"
    for p in $peer_list; do : >"$out_dir/$p.sps"; : >"$out_dir/$p.rss"; : >"$out_dir/$p.err"; done
    : >"$out_dir/ft.sps"; : >"$out_dir/ft.rss"; : >"$out_dir/ft.err"
    local loads=""
    for ((r = 0; r < rounds; r++)); do
      wait_quiet
      loads+="$(load_now) "
      for p in $peer_list; do
        echo "bench-hf-peers: $name $row: peer $p, round $((r + 1))/$rounds (load $(load_now))" >&2
        local j; j="$(peer "$p" "${peerover[@]}")"
        if [[ "$j" == *'"error"'* ]]; then echo "$j" | field error >"$out_dir/$p.err"; else
          echo "$j" | field samples_per_s >>"$out_dir/$p.sps"; echo "$j" | field peak_rss_mb >>"$out_dir/$p.rss"
          echo "$j" >"$out_dir/peer-versions.json"
        fi
      done
      echo "bench-hf-peers: $name $row: ft, round $((r + 1))/$rounds (load $(load_now))" >&2
      local f; f="$(ftrun "$row" "${ftover[@]}")"
      if [[ "$f" == *'"error"'* ]]; then echo "$f" | field error >"$out_dir/ft.err"; else
        echo "$f" | field samples_per_s >>"$out_dir/ft.sps"; echo "$f" | field peak_rss_mb >>"$out_dir/ft.rss"
      fi
    done
    local ff frss
    ff="$(median <"$out_dir/ft.sps" | xargs printf '%.1f')"; frss="$(median <"$out_dir/ft.rss" | xargs printf '%.0f')"
    [[ -s "$out_dir/ft.err" ]] && ff="ft failed: $(cat "$out_dir/ft.err")"
    for p in $peer_list; do
      local ps prss
      ps="$(median <"$out_dir/$p.sps")"; prss="$(median <"$out_dir/$p.rss")"
      if [[ -s "$out_dir/$p.err" ]]; then
        echo "| $row | $p | $n x $((cores / n)) | **failed**: \`$(cat "$out_dir/$p.err")\` | $ff | – | – | $frss | $loads|"
      else
        awk -v row="$row" -v p="$p" -v n="$n" -v t=$((cores / n)) -v ps="$ps" -v ff="$ff" -v prss="$prss" \
            -v frss="$frss" -v loads="$loads" 'BEGIN {
          ratio = (ff + 0 > 0 && ps + 0 > 0) ? sprintf("**%.2fx**", ff / ps) : "–"
          printf "| %s | %s | %d x %d | %.1f | %s | %s | %.0f | %s | %s|\n", row, p, n, t, ps, ff, ratio, prss, frss, loads }'
      fi
    done
  done
}

minilm_data="$out_dir/imdb-minilm.safetensors"
if [[ "$which_workloads" == minilm || "$which_workloads" == all ]] && [[ ! -f "$minilm_data" ]]; then
  "$py" scripts/hf_peer_bench.py --tokenize data/imdb/train.jsonl --model data/all-minilm-l6-v2 \
    --rows 2048 --max-len 256 --out "$minilm_data" >&2
fi

load0="$(load_now)"
wait_quiet
{
  echo "ft ($(git rev-parse --short HEAD)) vs Hugging Face peers ($("$py" -c 'import torch, transformers, accelerate, deepspeed, peft; print(f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}, deepspeed {deepspeed.__version__}, peft {peft.__version__}")' 2>/dev/null | tail -1)), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u '+%Y-%m-%d %H:%M UTC'), load at start $load0 then $(load_now) after waiting; the load column is the 1-minute load before each round"
  if [[ "$which_workloads" == minilm || "$which_workloads" == all ]]; then
    bench_workload minilm "$minilm_data" data/all-minilm-l6-v2 longest 1e-4 256
  fi
  if [[ "$which_workloads" == mini || "$which_workloads" == all ]]; then
    bench_workload mini ../shared/fixtures/bench-mini/data.safetensors ../shared/fixtures/bench-mini/config.json longest 2e-5 128
  fi
  if [[ "$which_workloads" == weibo || "$which_workloads" == all ]]; then
    bench_workload weibo ../shared/fixtures/bench-weibo/data.safetensors ../shared/fixtures/bench-weibo/config.json max_length 3e-5 128
  fi
} | tee "${OUT:-/dev/null}"
