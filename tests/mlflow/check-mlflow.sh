#!/usr/bin/env bash
# ctest entry: `ft run` reporting to a real MLflow tracking server (the mlflow
# package of .venv-hf, scripts/hf-env.sh) over its REST API 2.0.
#
#   tests/mlflow/check-mlflow.sh FT_BINARY SOURCE_DIR
#
# Starts `mlflow server` on a free loopback port (SQLite backend store, the
# default artifact proxy into a temporary folder), writes ft's tiny test task
# (a 2-layer BERT of hidden size 16 on 96 good/bad sentences) and checks:
#   1. a 20-step run with runtime.report_to=[mlflow] exits 0, and the server
#      then holds experiment ft-check with one FINISHED run check-run: params
#      train.lr "0.005", strategy.name "single", train.batch_size "4"; metric
#      loss at steps 1..20, eval_loss and eval_accuracy at steps 5, 10, 15, 20;
#      artefacts report.html and config.yaml.
#   2. a 2000-step run (check-killed) whose server is killed (SIGKILL) once
#      the run's first loss point has arrived still exits 0 with its final
#      weights, and says so in exactly one `warning: mlflow` line. (200 steps
#      of the tiny task take about 1.5 s here: too short a window to see the
#      first point on the server and kill it before ft is done; 2000 take
#      seconds more.)
# Exit 77 (ctest: skipped) with a SKIP line when .venv-hf has no mlflow; on a
# failed check a FAIL line and the tail of ft's output, exit 1.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: tests/mlflow/check-mlflow.sh FT_BINARY SOURCE_DIR" >&2
  exit 2
fi
ft="$1"
src="$(cd "$2" && pwd)"
py="$src/.venv-hf/bin/python"
mlflow="$src/.venv-hf/bin/mlflow"
if [[ ! -x "$mlflow" ]]; then
  echo "SKIP: needs mlflow in $src/.venv-hf (scripts/hf-env.sh)"
  exit 77
fi
[[ "$ft" == */* ]] && ft="$(cd "$(dirname "$ft")" && pwd)/$(basename "$ft")"
if [[ ! -x "$ft" ]]; then
  echo "FAIL: no ft binary at $ft"
  exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ft-check-mlflow.XXXXXX")"
server_pid=""  # the server's process group leader (setsid): uvicorn and its workers die with it
ft_pid=""
cleanup() {
  set +e  # every step, whatever fails
  if [[ -n "$ft_pid" ]]; then kill -TERM "$ft_pid" 2>/dev/null; fi  # timeout(1), which passes it on to ft
  if [[ -n "$server_pid" ]]; then kill -KILL -- "-$server_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM  # ctest's time-out: still stop the server

ft_log=""  # the output of the ft run that a FAIL line shows
fail() {
  echo "FAIL: $*"
  if [[ -n "$ft_log" && -f "$ft_log" ]]; then
    echo "--- last lines of ft's output ($(basename "$ft_log")):"
    tail -n 25 "$ft_log"
  fi
  exit 1
}

# ft's tiny task (tests/support/ft_tiny_task.h), with the training data as dev
# set too, evaluated every 5 steps.
printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]' good bad film plot the very was a '##s' '!' >"$tmp/vocab.txt"
cat >"$tmp/config.json" <<'EOF'
{"architectures":["BertForSequenceClassification"],"model_type":"bert","vocab_size":15,"hidden_size":16,
 "num_hidden_layers":2,"num_attention_heads":2,"intermediate_size":32,"hidden_act":"gelu",
 "hidden_dropout_prob":0.1,"attention_probs_dropout_prob":0.1,"max_position_embeddings":32,"type_vocab_size":2,
 "initializer_range":0.02,"layer_norm_eps":1e-12,"pad_token_id":0,"num_labels":2,
 "id2label":{"0":"neg","1":"pos"},"label2id":{"neg":0,"pos":1}}
EOF
good=("the film was good" "very good plot" "good good film !" "a good film"
  "the plot was very good" "good films" "a very good plot !" "the good film")
bad=("the film was bad" "very bad plot" "bad bad film !" "a bad film"
  "the plot was very bad" "bad films" "a very bad plot !" "the bad film")
for ((i = 0; i < 48; i++)); do
  printf '{"text": "%s", "label": "pos"}\n{"text": "%s", "label": "neg"}\n' "${good[i % 8]}" "${bad[(i * 3) % 8]}"
done >"$tmp/train.jsonl"
cat >"$tmp/run.yaml" <<EOF
model: {config: $tmp/config.json}
data: {train: $tmp/train.jsonl, dev: $tmp/train.jsonl, labels: [neg, pos], vocab: $tmp/vocab.txt, dev_fraction: 0, max_seq_len: 12}
train: {epochs: 1000, batch_size: 4, lr: 5.0e-3, warmup_steps: 5, log_every: 1, seed: 11, eval_every: 5}
strategy: {name: single, precision: fp32}
runtime: {device: cpu, threads: 1}
EOF

# The REST queries (urllib and json only), one subcommand each:
#   health URL SECONDS SERVER_PID   wait for GET /health; 1 on time-out or a dead server
#   check URL EXPERIMENT RUN        case 1's assertions; prints a summary, or FAIL: and exits 1
#   wait-loss URL EXPERIMENT RUN SECONDS FT_PID
#                                   wait until RUN has a loss point (0); 1 on time-out, 2 when FT_PID exited first
cat >"$tmp/rest.py" <<'PY'
import json, os, sys, time, urllib.error, urllib.parse, urllib.request

API = "/api/2.0/mlflow"


class Fail(Exception):
    pass


def call(base, path, query=None, body=None, timeout=10):
    url = base + path + ("?" + urllib.parse.urlencode(query) if query else "")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        raise Fail(f"{req.method} {path} {query or body or ''}: HTTP {e.code}: {e.read().decode()[:300]}")
    return json.loads(text) if text.strip() else {}


def experiment_id(base, name):
    return call(base, API + "/experiments/get-by-name", {"experiment_name": name})["experiment"]["experiment_id"]


def runs_named(base, exp_id, run_name):
    """The runs of the experiment tagged mlflow.runName = run_name, active or deleted."""
    quoted = run_name.replace("'", "\\'")
    found = call(base, API + "/runs/search", body={
        "experiment_ids": [exp_id], "filter": f"tags.mlflow.runName = '{quoted}'",
        "run_view_type": "ALL", "max_results": 50})
    return found.get("runs", [])


def history(base, run_id, key):
    points = []
    token = None
    while True:
        query = {"run_id": run_id, "metric_key": key, "max_results": 1000}
        if token:
            query["page_token"] = token
        page = call(base, API + "/metrics/get-history", query)
        points += page.get("metrics", [])  # a key never logged gives {}
        token = page.get("next_page_token")
        if not token:
            return points


def check(base, exp_name, run_name):
    exp_id = experiment_id(base, exp_name)
    runs = runs_named(base, exp_id, run_name)
    if len(runs) != 1:
        raise Fail(f"experiment {exp_name} has {len(runs)} runs named {run_name}, not 1")
    info, data = runs[0]["info"], runs[0]["data"]
    run_id = info["run_id"]
    if info.get("run_name") != run_name:
        raise Fail(f"run {run_id}: run_name {info.get('run_name')!r}, not {run_name!r}")
    if info.get("status") != "FINISHED":
        raise Fail(f"run {run_name}: status {info.get('status')}, not FINISHED")
    if info.get("lifecycle_stage") != "active":
        raise Fail(f"run {run_name}: lifecycle_stage {info.get('lifecycle_stage')}, not active")
    start, end = int(info.get("start_time", 0)), int(info.get("end_time", 0))
    if start <= 0 or end < start:
        raise Fail(f"run {run_name}: start_time {start}, end_time {end} (ms since the epoch, end >= start > 0)")

    params = {p["key"]: p["value"] for p in data.get("params", [])}
    for key, want in (("train.lr", "0.005"), ("strategy.name", "single"), ("train.batch_size", "4")):
        if params.get(key) != want:
            raise Fail(f"run {run_name}: param {key} = {params.get(key)!r}, not {want!r} "
                       f"({len(params)} params: {', '.join(sorted(params)[:12])}...)")

    counts = {}
    for key, want in (("loss", list(range(1, 21))), ("eval_loss", [5, 10, 15, 20]),
                      ("eval_accuracy", [5, 10, 15, 20])):
        points = history(base, run_id, key)
        steps = sorted(int(p.get("step", 0)) for p in points)
        if steps != want:
            raise Fail(f"run {run_name}: metric {key} has {len(steps)} points at steps {steps}, not {want}")
        for p in points:
            v = p.get("value")
            if not isinstance(v, (int, float)) or v != v or int(p.get("timestamp", 0)) <= 0:
                raise Fail(f"run {run_name}: metric {key} point {p}: value not a finite number, or no timestamp")
        counts[key] = len(points)

    listed = call(base, API + "/artifacts/list", {"run_id": run_id}).get("files", [])
    sizes = {f["path"]: int(f.get("file_size", 0)) for f in listed if not f.get("is_dir")}
    for name in ("report.html", "config.yaml"):
        if sizes.get(name, 0) <= 0:
            raise Fail(f"run {run_name}: artefact {name} missing or empty (artifacts/list: {sorted(sizes)})")

    print(f"mlflow: experiment {exp_name} (id {exp_id}): run {run_name} FINISHED; params train.lr=0.005 "
          f"strategy.name=single train.batch_size=4 (of {len(params)}); metrics loss x{counts['loss']} "
          f"(steps 1..20), eval_loss x{counts['eval_loss']} and eval_accuracy x{counts['eval_accuracy']} "
          f"(steps 5,10,15,20); artefacts report.html ({sizes['report.html']} B), "
          f"config.yaml ({sizes['config.yaml']} B)")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def main():
    cmd, base = sys.argv[1], sys.argv[2].rstrip("/")
    if cmd == "health":
        deadline, server = time.monotonic() + float(sys.argv[3]), int(sys.argv[4])
        while time.monotonic() < deadline:
            if not alive(server):
                print("the server exited")
                return 1
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return 0
            except OSError:
                pass
            time.sleep(0.5)
        print(f"no answer from {base}/health in {sys.argv[3]} s")
        return 1
    if cmd == "check":
        try:
            check(base, sys.argv[3], sys.argv[4])
        except Fail as e:
            print(f"FAIL: {e}")
            return 1
        return 0
    if cmd == "wait-loss":
        exp_name, run_name = sys.argv[3], sys.argv[4]
        deadline, ft_pid = time.monotonic() + float(sys.argv[5]), int(sys.argv[6])
        while time.monotonic() < deadline:
            try:
                for run in runs_named(base, experiment_id(base, exp_name), run_name):
                    if history(base, run["info"]["run_id"], "loss"):
                        return 0
            except (Fail, OSError, KeyError, ValueError):
                pass  # no experiment or run yet
            if not alive(ft_pid):
                return 2
            time.sleep(0.1)
        return 1
    raise SystemExit(f"rest.py: unknown command {cmd}")


sys.exit(main())
PY

# A free loopback port: bound to port 0 and released (another process could
# take it before the server does, but that is unlikely within a second).
port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
# One worker and no job runner (its huey consumers): lighter on a small
# machine, and every process is in the server's own process group.
command -v setsid >/dev/null || fail "setsid (util-linux) is needed to kill the server with its workers"
(cd "$tmp" && exec env MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$mlflow" server --host 127.0.0.1 \
  --port "$port" --workers 1 --backend-store-uri "sqlite:///$tmp/mlflow.db" --artifacts-destination "$tmp/artifacts" \
  >"$tmp/server.log" 2>&1 </dev/null) &
server_pid=$!
if ! why="$("$py" "$tmp/rest.py" health "$url" 120 "$server_pid")"; then
  echo "--- last lines of the server's log:"
  tail -n 20 "$tmp/server.log"
  fail "mlflow server on $url did not come up: $why"
fi
# setsid made the server its own process group's leader (it forks only when
# already one), so that kill -- -PID reaches uvicorn's workers too.
[[ "$(ps -o pgid= -p "$server_pid" | tr -d ' ')" == "$server_pid" ]] \
  || fail "mlflow server (pid $server_pid) is not the leader of its own process group"
echo "check-mlflow: mlflow $("$py" -c 'import importlib.metadata as m; print(m.version("mlflow"))') server up on $url"

# Case 1: a 20-step run reports its params, metrics and artefacts, then FINISHED.
ft_log="$tmp/ft1.log"
rc=0
MLFLOW_TRACKING_URI="$url" MLFLOW_EXPERIMENT_NAME=ft-check timeout 300 "$ft" run --config "$tmp/run.yaml" \
  --max-steps 20 --output-dir "$tmp/out" --set 'runtime.report_to=[mlflow]' --set runtime.run_name=check-run \
  >"$ft_log" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || fail "ft run (case 1, check-run) exited $rc$([[ $rc -eq 124 ]] && echo ' (timed out after 300 s)')"
if grep -q 'warning: mlflow' "$ft_log"; then
  fail "ft run (case 1) warned about mlflow with the server up: $(grep -m1 'warning: mlflow' "$ft_log")"
fi
summary="$("$py" "$tmp/rest.py" check "$url" ft-check check-run)" || fail "${summary#FAIL: }"
echo "check-mlflow: case 1: $summary"

# Case 2: the server dies (SIGKILL) while ft is training; ft must finish anyway,
# with its weights and one warning line.
ft_log="$tmp/ft2.log"
MLFLOW_TRACKING_URI="$url" MLFLOW_EXPERIMENT_NAME=ft-check timeout 300 "$ft" run --config "$tmp/run.yaml" \
  --max-steps 2000 --output-dir "$tmp/out2" --set 'runtime.report_to=[mlflow]' --set runtime.run_name=check-killed \
  >"$ft_log" 2>&1 &
ft_pid=$!
wait_rc=0
"$py" "$tmp/rest.py" wait-loss "$url" ft-check check-killed 240 "$ft_pid" || wait_rc=$?
case $wait_rc in
  0) ;;
  2) fail "ft run (case 2) exited before its first loss point reached the server, so the server could not be killed midway" ;;
  *) fail "no loss point of run check-killed on the server within 240 s" ;;
esac
kill -0 "$ft_pid" 2>/dev/null || fail "ft run (case 2) had finished before the server could be killed (a longer run is needed)"
kill -KILL -- "-$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""
echo "check-mlflow: case 2: server killed after the first loss point of check-killed"
rc=0
wait "$ft_pid" || rc=$?
ft_pid=""
[[ $rc -eq 0 ]] || fail "ft run (case 2, server killed) exited $rc$([[ $rc -eq 124 ]] && echo ' (timed out after 300 s)')"
[[ -f "$tmp/out2/final/model.safetensors" ]] || fail "ft run (case 2) left no $tmp/out2/final/model.safetensors"
warnings="$(grep -c 'warning: mlflow' "$ft_log" || true)"
[[ "$warnings" -eq 1 ]] || fail "ft run (case 2) printed $warnings lines matching 'warning: mlflow', not 1"
echo "check-mlflow: case 2: ft exited 0 with final/model.safetensors and one warning: $(grep -m1 'warning: mlflow' "$ft_log")"
echo "check-mlflow: PASS"
