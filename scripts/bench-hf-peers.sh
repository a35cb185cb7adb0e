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
#   deberta a random-init DeBERTa-v3-shaped classifier (xsmall: 12 x 384, 256
#           position buckets; transformers runs it eager, it has no SDPA) on
#           2 048 IMDB reviews tokenized with the committed deberta-unigram
#           tokenizer.json (256 tokens), padding longest. Not in "all"; rows
#           single and ddp are the ones it is meant for (ROWS="single ddp").
#   modernbert-long  the modernbert classifier on long inputs: for each length
#           of LENGTHS (default "512 2048 8192"), 64 rows of consecutive IMDB
#           reviews joined until each has that many tokens (no padding), global
#           batch 16 / 4 / 2 (GLOBAL to override), STEPS=4 WARMUP=1 unless set.
#           Not in "all"; ROWS="single ddp".
#   modernbert  a random-init classifier with ModernBERT-base's settings
#           (12 x 384, 6 heads, 128-token windows, every third layer global,
#           mean pooling) on the same 2 048 reviews tokenized with the
#           committed modern-bpe tokenizer.json (256 tokens), padding
#           longest. Not in "all"; ROWS="single ddp" as for deberta.
#
# Usage: scripts/bench-hf-peers.sh [minilm|mini|weibo|deberta|modernbert|modernbert-long|all]
#   env: STEPS=20 WARMUP=2 ROUNDS=3 ROWS="single ddp ..." BUILD=build
#        QUIET_BUSY=0.1 QUIET_TIMEOUT=1800 (seconds to wait until under a tenth of the cores is busy)
#        FT2=build-torch2 (also time the ft of that build: scripts/build-torch2.sh) FT2_ROWS="single ..." (default: all rows)
#        OUT=file.md OUT_DIR=bench-out/hf-peers
# Not a test: the full run takes hours on 2 cores. Numbers from a loaded machine are worthless.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
which_workloads="${1:-all}"
if [[ "$which_workloads" == modernbert-long ]]; then
  steps="${STEPS:-4}" warmup="${WARMUP:-1}"
else
  steps="${STEPS:-20}" warmup="${WARMUP:-2}"
fi
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

# Quiet means no other process keeps the cores busy (busy_now, wait_quiet).
source "$repo/scripts/wait-low-load.sh"

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

# ftrun <ft binary> <ft row> <overrides...>: one run; prints ft's summary line (or {"error": ...}).
ftrun() {
  local bin="$1" row="$2"; shift 2
  local s="$row" n=$nproc_dist extra=() log="$out_dir/logs/ft-$row-$(basename "$(dirname "$(dirname "$bin")")").log"
  case "$row" in
    single) n=1 ;;
    lora) s=single; n=1; extra+=(--set lora.rank=8) ;;
    gbl) s=single; n=1; extra+=(--set data.group_by_length=true --set data.padding=longest --set train.shuffle=true) ;;
  esac
  [[ "$s" == ddp_amp ]] || extra+=(--precision fp32)
  rm -f "$out_dir/ft.jsonl"
  if "$bin" run --config configs/bench-mini.yaml --strategy "$s" --nproc "$n" --threads $((cores / n)) \
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

# record <label> <json>: one run's result appended to $out_dir/<label>.{sps,rss}, or its error to <label>.err.
record() {
  if [[ "$2" == *'"error"'* ]]; then echo "$2" | field error >"$out_dir/$1.err"; else
    echo "$2" | field samples_per_s >>"$out_dir/$1.sps"; echo "$2" | field peak_rss_mb >>"$out_dir/$1.rss"
  fi
}

# ft_column <label> <binary> <row> <overrides...>: one ft run, recorded under <label>.
ft_column() {
  local label="$1" bin="$2" row="$3"; shift 3
  echo "bench-hf-peers: $row: $label" >&2
  record "$label" "$(ftrun "$bin" "$row" "$@")"
}

# cell <label>: the median samples/s of that column, or its error.
cell() {
  if [[ -s "$out_dir/$1.err" ]]; then echo "failed: $(cat "$out_dir/$1.err")"; else median <"$out_dir/$1.sps" | xargs printf '%.3g'; fi
}

bench_workload() {  # bench_workload <name> <data> <model> <padding> <lr> <max_len>
  local name="$1" data="$2" model="$3" padding="$4" lr="$5" maxlen="$6"
  [[ -f "$data" ]] || { echo "bench-hf-peers: $data is missing" >&2; exit 1; }
  local ftover=(--set "model.config=$model" --set "data.train=$data" --set "data.padding=$padding"
                --set "data.max_seq_len=$maxlen" --set "train.lr=$lr")
  local peerover=(--data "$data" --model "$model" --padding "$padding" --lr "$lr")
  local ft2_head="" ft2_rule=""
  if [[ -n "$ft2" ]]; then ft2_head=" ft LibTorch $ft2_version samples/s | ft 2.x / peer |"; ft2_rule="---:|---:|"; fi
  echo
  echo "### $name: $data, model $model, padding $padding, global batch $global, $steps steps ($warmup warm-up excluded), median of $rounds"
  echo
  echo "| ft row | peer row | ranks x threads | peer samples/s | ft samples/s | ft / peer |$ft2_head peer peak RSS/rank MB | ft peak RSS/rank MB | cores busy before each round |"
  echo "|---|---|---|---:|---:|---:|$ft2_rule---:|---:|---|"
  local row p r
  for row in $rows; do
    local n=$nproc_dist
    case "$row" in single | lora | gbl) n=1 ;; esac
    local peer_list; peer_list="$(peers_of "$row")"
    local c
    for c in $peer_list ft ft2; do : >"$out_dir/$c.sps"; : >"$out_dir/$c.rss"; : >"$out_dir/$c.err"; done
    local busy=""
    for ((r = 0; r < rounds; r++)); do
      wait_quiet bench-hf-peers
      busy+="$last_busy "
      for p in $peer_list; do
        echo "bench-hf-peers: $name $row: peer $p, round $((r + 1))/$rounds" >&2
        local j; j="$(peer "$p" "${peerover[@]}")"
        record "$p" "$j"
        [[ "$j" == *'"error"'* ]] || echo "$j" >"$out_dir/peer-versions.json"
      done
      ft_column ft "$ft" "$row" "${ftover[@]}"
      [[ -z "$ft2" || " ${FT2_ROWS:-$rows} " != *" $row "* ]] || ft_column ft2 "$ft2" "$row" "${ftover[@]}"
    done
    local ff ff2="" frss
    ff="$(cell ft)"; frss="$(median <"$out_dir/ft.rss" | xargs printf '%.0f')"
    [[ -z "$ft2" ]] || ff2="$( [[ -s "$out_dir/ft2.sps" || -s "$out_dir/ft2.err" ]] && cell ft2 || echo "–")"
    for p in $peer_list; do
      local ps prss
      ps="$(median <"$out_dir/$p.sps")"; prss="$(median <"$out_dir/$p.rss")"
      [[ -s "$out_dir/$p.err" ]] && { ps="**failed**: \`$(cat "$out_dir/$p.err")\`"; prss="–"; }
      awk -v row="$row" -v p="$p" -v n="$n" -v t=$((cores / n)) -v ps="$ps" -v ff="$ff" -v ff2="$ff2" -v two="$ft2" \
          -v prss="$prss" -v frss="$frss" -v busy="$busy" 'BEGIN {
        r1 = (ff + 0 > 0 && ps + 0 > 0) ? sprintf("**%.2fx**", ff / ps) : "–"
        col2 = ""
        if (two != "") col2 = sprintf(" %s | %s |", ff2, (ff2 + 0 > 0 && ps + 0 > 0) ? sprintf("%.2fx", ff2 / ps) : "–")
        pcell = (ps + 0 > 0) ? sprintf("%.3g", ps) : ps
        rcell = (prss + 0 > 0) ? sprintf("%.0f", prss) : prss
        printf "| %s | %s | %d x %d | %s | %s | %s |%s %s | %s | %s|\n", row, p, n, t, pcell, ff, r1, col2, rcell, frss, busy }'
    done
  done
}

minilm_data="$out_dir/imdb-minilm.safetensors"
if [[ "$which_workloads" == minilm || "$which_workloads" == all ]] && [[ ! -f "$minilm_data" ]]; then
  "$py" scripts/hf_peer_bench.py --tokenize data/imdb/train.jsonl --model data/all-minilm-l6-v2 \
    --rows 2048 --max-len 256 --out "$minilm_data" >&2
fi

# The generated workloads: a random-init model of the family, and IMDB rows
# tokenized with its tokenizer.
if [[ "$which_workloads" == deberta || "$which_workloads" == modernbert || "$which_workloads" == modernbert-long ]]; then
  kind="${which_workloads%-long}"
  made_model="$out_dir/$kind-model"
  made_data="$out_dir/imdb-$kind.safetensors"
  if [[ ! -f "$made_model/config.json" ]]; then
    "$py" scripts/hf_peer_bench.py --make "$kind" "$made_model" >&2
  fi
  if [[ "$which_workloads" == modernbert-long ]]; then
    for len in ${LENGTHS:-512 2048 8192}; do
      [[ -f "$out_dir/imdb-long-$len.safetensors" ]] || "$py" scripts/hf_peer_bench.py --tokenize data/imdb/train.jsonl \
        --model "$made_model" --rows 64 --max-len "$len" --fill --out "$out_dir/imdb-long-$len.safetensors" >&2
    done
  elif [[ ! -f "$made_data" ]]; then
    "$py" scripts/hf_peer_bench.py --tokenize data/imdb/train.jsonl --model "$made_model" \
      --rows 2048 --max-len 256 --out "$made_data" >&2
  fi
fi

ft2="${FT2:+$FT2/bin/ft}"
ft2_version=""
if [[ -n "$ft2" ]]; then
  [[ -x "$ft2" ]] || { echo "bench-hf-peers: $ft2 not found: run scripts/build-torch2.sh first" >&2; exit 1; }
  ft2_version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
fi
busy0="$(busy_now)"
wait_quiet bench-hf-peers
{
  echo "ft ($(git rev-parse --short HEAD)) vs Hugging Face peers ($("$py" -c 'import torch, transformers, accelerate, deepspeed, peft; print(f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}, deepspeed {deepspeed.__version__}, peft {peft.__version__}")' 2>/dev/null | tail -1)), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u '+%Y-%m-%d %H:%M UTC'), cores busy at start $busy0, then $last_busy after waiting (the share of both cores busy over 3 s, from /proc/stat)"
  if [[ "$which_workloads" == minilm || "$which_workloads" == all ]]; then
    bench_workload minilm "$minilm_data" data/all-minilm-l6-v2 longest 1e-4 256
  fi
  if [[ "$which_workloads" == mini || "$which_workloads" == all ]]; then
    bench_workload mini ../shared/fixtures/bench-mini/data.safetensors ../shared/fixtures/bench-mini/config.json longest 2e-5 128
  fi
  if [[ "$which_workloads" == weibo || "$which_workloads" == all ]]; then
    bench_workload weibo ../shared/fixtures/bench-weibo/data.safetensors ../shared/fixtures/bench-weibo/config.json max_length 3e-5 128
  fi
  if [[ "$which_workloads" == deberta || "$which_workloads" == modernbert ]]; then
    bench_workload "$which_workloads" "$made_data" "$made_model" longest 2e-5 256
  fi
  if [[ "$which_workloads" == modernbert-long ]]; then
    for len in ${LENGTHS:-512 2048 8192}; do
      case "$len" in 512) global=16 ;; 2048) global=4 ;; *) global=2 ;; esac
      global="${GLOBAL:-$global}"
      bench_workload "modernbert-$len" "$out_dir/imdb-long-$len.safetensors" "$made_model" longest 2e-5 "$len"
    done
  fi
} | tee "${OUT:-/dev/null}"
