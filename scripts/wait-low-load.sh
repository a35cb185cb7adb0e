# Sourced by the benchmark scripts (bench-peer.sh, bench-docs.sh, bench-ab.sh): numbers
# from a busy machine are worthless.
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
