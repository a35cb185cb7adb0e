# Sourced by the benchmark scripts (bench-peer.sh, bench-docs.sh, bench-ab.sh, bench-hf-peers.sh,
# bench-st-peer.sh, bench-st-memory.sh): numbers from a busy machine are worthless.
#
# wait_low_load NAME: waits (up to 5 min) for the 1-minute load average to drop
# below 0.5, saying so once on stderr as NAME; leaves the last reading in
# $load_before for the table header.
wait_low_load() {
  local name="$1" i
  for ((i = 0; i < 60; i++)); do
    load_before="$(cut -d' ' -f1 /proc/loadavg)"
    awk -v l="$load_before" 'BEGIN {exit !(l < 0.5)}' && return 0
    ((i == 0)) && echo "$name: waiting for the load average to drop below 0.5 ($load_before)" >&2
    sleep 5
  done
}

# The share of all cores busy over a 3-second window, from /proc/stat (the
# 1-minute load average would still count a benchmark's own previous run for a
# minute or more, so between interleaved runs this is the measure to wait on).
busy_now() {
  local u1 n1 s1 i1 w1 q1 sq1 st1 u2 n2 s2 i2 w2 q2 sq2 st2
  read -r _ u1 n1 s1 i1 w1 q1 sq1 st1 _ </proc/stat
  sleep 3
  read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ </proc/stat
  local busy=$(((u2 + n2 + s2 + q2 + sq2 + st2) - (u1 + n1 + s1 + q1 + sq1 + st1))) idle=$(((i2 + w2) - (i1 + w1)))
  awk -v b="$busy" -v i="$idle" 'BEGIN {printf "%.2f", ((b + i) > 0 ? b / (b + i) : 0)}'
}

# wait_quiet NAME: waits until busy_now < QUIET_BUSY (default 0.1), at most
# QUIET_TIMEOUT seconds (default 1800; then it measures anyway and says so on
# stderr as NAME); leaves the last reading in $last_busy for the table.
wait_quiet() {
  local name="$1" limit="${QUIET_TIMEOUT:-1800}" want="${QUIET_BUSY:-0.1}" waited=0 b
  while b="$(busy_now)"; ! awk -v b="$b" -v w="$want" 'BEGIN {exit !(b < w)}'; do
    if ((waited >= limit)); then
      echo "$name: cores still $b busy after ${limit}s: measuring anyway (the table says so)" >&2
      break
    fi
    ((waited == 0)) && echo "$name: waiting for the cores to go idle (busy $b, want < $want)" >&2
    sleep 7
    waited=$((waited + 10))
  done
  last_busy="$b"
}
