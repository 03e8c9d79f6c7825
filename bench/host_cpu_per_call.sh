#!/usr/bin/env bash
# Host CPU per Rank call, by server thread, at a fixed open-loop rate:
#   bench/host_cpu_per_call.sh SERVER_BIN [SERVER_BIN ...]
# Starts each server in turn (ROUNDS times, alternating, so that A/B builds
# see the same machine state), drives it with jagrank-loadgen --rate RATE for
# MEASURE_S seconds, and reads the server's per-thread CPU time and context
# switches (/proc/PID/task/*/stat and status) before and after the measured
# run. Prints one line per run: calls, QPS, p50, the server's CPU us and
# context switches per call (the CPU also by thread name) and the loadgen's
# CPU us per call; appends the same, with switches by thread name, as JSON
# lines to $OUT/host_cpu_per_call.jsonl.
# At a fixed rate both builds do the same work per second, so CPU per call
# compares what each costs on the host: gRPC, parsing, batching, hand-overs
# between threads, finishing. The default model here is a tiny one
# (bench/host_cpu_model.yaml: d = 8, same feature layout and history limit as
# the default model), so that the CPU backend's compute (thread jr-compute)
# does not drown the rest; requests keep the h1024 workload's shape (history
# median 100 up to 1024, 50-500 candidates).
# Environment: LOADGEN (default: jagrank-loadgen beside the first server),
# RATE (1500 calls/s), MEASURE_S (10), ROUNDS (2), DEVICE (cpu), MODEL_CONFIG,
# SERVER_EXTRA_FLAGS, LOADGEN_EXTRA_FLAGS, PORT (18700), OUT (.).
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: host_cpu_per_call.sh SERVER_BIN [SERVER_BIN ...]" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
LOADGEN=${LOADGEN:-$(dirname "$1")/jagrank-loadgen}
[ -x "$LOADGEN" ] || { echo "no loadgen at $LOADGEN (set LOADGEN)" >&2; exit 2; }
RATE=${RATE:-1500}
MEASURE_S=${MEASURE_S:-10}
ROUNDS=${ROUNDS:-2}
DEVICE=${DEVICE:-cpu}
MODEL_CONFIG=${MODEL_CONFIG:-$HERE/host_cpu_model.yaml}
PORT=${PORT:-18700}
OUT=${OUT:-.}
mkdir -p "$OUT"
# The CPU backend's GEMMs go through OpenBLAS, whose idle workers spin in
# sched_yield and would be counted against every call.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null' EXIT

thread_cpu() {  # thread_cpu PID: {"cpu": {name: CPU seconds}, "switches": {name: context switches}}, summed by thread name
  python3 - "$1" <<'PY'
import glob, json, os, sys
tick = os.sysconf("SC_CLK_TCK")
cpu, switches = {}, {}
for stat in glob.glob(f"/proc/{sys.argv[1]}/task/*/stat"):
    try:
        text = open(stat).read()
        status = open(stat[:-len("stat")] + "status").read()
    except OSError:
        continue  # the thread ended meanwhile
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    cpu[name] = cpu.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    # voluntary (went to sleep) + involuntary (preempted)
    n = sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)
    switches[name] = switches.get(name, 0) + n
print(json.dumps({"cpu": cpu, "switches": switches}))
PY
}

run_one() {  # run_one SERVER_BIN
  local server=$1 log="$OUT/host_cpu_server.log" json="$OUT/host_cpu_loadgen.json"
  # shellcheck disable=SC2086
  "$server" --grpc-address "127.0.0.1:$PORT" --metrics-address "" --device "$DEVICE" --cpu-threads 1 \
    --model-config "$MODEL_CONFIG" ${SERVER_EXTRA_FLAGS:-} > "$log" 2>&1 &
  SERVER_PID=$!
  local pid=$SERVER_PID
  for _ in $(seq 600); do
    grep -q "jagrank-server ready" "$log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  local load=(--address "127.0.0.1:$PORT" --rate "$RATE")
  # shellcheck disable=SC2206
  load+=(${LOADGEN_EXTRA_FLAGS:-})
  "$LOADGEN" "${load[@]}" --duration-s 2 --warmup-s 1 > /dev/null 2>&1  # warm: first batches, allocator, connections
  local before after
  before=$(thread_cpu "$pid")
  local TIMEFORMAT="%U %S"  # bash's time: the loadgen's user and system CPU seconds
  { time "$LOADGEN" "${load[@]}" --duration-s "$MEASURE_S" --warmup-s 0 --json-out "$json" > /dev/null 2>&1; } \
    2> "$OUT/host_cpu_loadgen.time"
  after=$(thread_cpu "$pid")
  kill "$pid"
  wait "$pid" || true
  SERVER_PID=
  python3 - "$server" "$before" "$after" "$json" "$(tail -1 "$OUT/host_cpu_loadgen.time")" \
    "$OUT/host_cpu_per_call.jsonl" <<'PY'
import json, sys
server, before, after, path, times, jsonl = sys.argv[1:]
before, after, load = json.loads(before), json.loads(after), json.load(open(path))
calls = load["requests_ok"]
if calls <= 0 or load["requests_error"] != 0:
    sys.exit(f"{server}: {calls} calls, {load['requests_error']} errors")
per = {k: (after["cpu"][k] - before["cpu"].get(k, 0.0)) / calls * 1e6 for k in after["cpu"]}
sw = {k: (after["switches"][k] - before["switches"].get(k, 0)) / calls for k in after["switches"]}
switches = sum(sw.values())
per = {k: round(v, 2) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.5}
user, system = (float(x) for x in times.split())
r = {"server": server, "calls": calls, "qps": load["qps"], "p50_ms": load["latency_ms"]["p50"],
     "server_us_per_call": round(sum(per.values()), 2), "server_us_per_call_by_thread": per,
     "server_context_switches_per_call": round(switches, 2),
     "server_context_switches_per_call_by_thread": {k: round(v, 2) for k, v in sorted(sw.items(), key=lambda kv: -kv[1])
                                                    if v >= 0.01},
     "loadgen_us_per_call": round((user + system) / calls * 1e6, 2)}
with open(jsonl, "a") as f:
    f.write(json.dumps(r) + "\n")
threads = " ".join(f"{k}={v:.1f}" for k, v in per.items())
print(f"{server}: calls={calls} qps={r['qps']:.0f} p50_ms={r['p50_ms']:.2f} server_us_per_call="
      f"{r['server_us_per_call']:.1f} switches_per_call={switches:.2f} loadgen_us_per_call={r['loadgen_us_per_call']:.1f} | {threads}")
PY
}

for _ in $(seq "$ROUNDS"); do
  for server in "$@"; do
    run_one "$server"
  done
done
