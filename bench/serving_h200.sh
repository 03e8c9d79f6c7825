#!/usr/bin/env bash
# Issue 7's end-to-end serving benchmark, run on the GPU machine:
#   bench/serving_h200.sh BUNDLE_DIR
# BUNDLE_DIR holds bin/jagrank-server, bin/jagrank-loadgen, bin/jagrank-client
# and env.sh (sourced first). Results go to $OUT (default ./out/serving_h200):
#   <workload>_<attention>_<load>.json      one jagrank-loadgen result each
#   <workload>_<attention>_<load>.metrics   /metrics scraped right after that run
#   <workload>_<attention>_<load>.gpu.csv   nvidia-smi samples during that run
#   <workload>_<attention>.server.log       the server's log
#   summary.json, summary.md                per strategy: best QPS with p99 <= 20 ms, memory, time split
# Workloads: "h1024" = the default model (d = 64, max_history_len 1024),
# histories log-normal with median 100 capped at 1024, 50-500 candidates;
# "h4096" = the same model with max_history_len 4096 (median 300).
# Each strategy (jagged, padded_flash, padded_dense) gets a closed-loop
# concurrency ramp and an open-loop Poisson sweep at fractions of its
# closed-loop peak (the sweep at h1024 only). Total runtime about 8 minutes with the defaults. Overrides (environment):
# DURATION_S, WARMUP_S, STRATEGIES, DEVICE, MODEL_BENCH (0 skips the
# in-process runs), MODEL_BENCH_S, CHANNEL_SWEEP (0 skips the diagnostics),
# H1024_CONCURRENCY, H4096_CONCURRENCY (the ramps; H1024_DENSE_CONCURRENCY,
# H4096_DENSE_CONCURRENCY replace them for padded_dense, whose p99 passes
# 20 ms at far lower loads), the
# diagnostics' DIAG_* (below), and the batching
# policies: WORKLOADS (default "h1024 h4096"), OPEN_FRACTIONS (of the
# closed-loop peak, default "0.5 0.8 0.95"; "" runs none), TRANSPORT (tcp or
# uds, below), SERVER_EXTRA_FLAGS and LOADGEN_EXTRA_FLAGS (appended to
# every server's and loadgen's flags), LOADGEN_CHANNELS (below),
# H1024_POLICIES (default "delay"; "delay idle" runs both) and
# H4096_POLICIES. "delay" = close a batch on a budget or after
# --max-queue-delay-us; "idle" adds --dispatch-when-idle (also close at once
# whenever the executor has no batch waiting to run). Results of the idle
# policy are filed under the workload name with "-idle" appended.
# REPEAT_STARTS, REPEAT_STRATEGIES, REPEAT_CONCURRENCY: repeated server
# starts at h1024 (below, before the summary).
set -uo pipefail

BUNDLE=${1:?usage: serving_h200.sh BUNDLE_DIR}
BUNDLE=$(cd "$BUNDLE" && pwd)
# shellcheck disable=SC1091
source "$BUNDLE/env.sh"
OUT=${OUT:-$PWD/out/serving_h200}
mkdir -p "$OUT"
BIN=$BUNDLE/bin
DURATION_S=${DURATION_S:-5}
WARMUP_S=${WARMUP_S:-1}
GRPC_PORT=18500
# TRANSPORT=tcp (default): the loadgen talks to the server over loopback TCP.
# TRANSPORT=uds: over a Unix domain socket (gRPC's unix: address), as a
# client on the same host (a sidecar) would; no TCP/IP stack per message.
case ${TRANSPORT:-tcp} in
  tcp) GRPC_TARGET=127.0.0.1:$GRPC_PORT ;;
  uds) GRPC_TARGET=unix:/tmp/jagrank-serving-h200-$$.sock ;;
  *) echo "TRANSPORT must be tcp or uds, not '$TRANSPORT'" >&2; exit 2 ;;
esac
LOAD_TARGET=$GRPC_TARGET
METRICS_PORT=19100
STRATEGIES=${STRATEGIES:-"jagged padded_flash padded_dense"}
# Server batching for the GPU: bigger batches than the CPU defaults, and the
# same budgets for every strategy. The attention budget (2^30) does not bind
# at max_history_len 1024 (padded: 512 requests x 1024^2 = 2^29); at 4096 it
# keeps a padded batch to 64 requests (padded_dense's score matrix: 64 x 2
# heads x 4096^2 floats = 8.6 GB).
DEVICE=${DEVICE:-cuda}   # DEVICE=cpu for a dry run of the script anywhere
SERVER_FLAGS=(--device "$DEVICE" --max-queue-delay-us 1000 --max-batch-candidates 65536 --max-batch-requests 512
              --max-batch-history-tokens 1048576 --max-batch-attention-cost 1073741824 --max-queue-requests 8192)
# LOADGEN_CHANNELS gRPC connections (default 32), LOADGEN_CLIENT_THREADS
# completion-queue threads (default 8).
LOADGEN_FLAGS=(--channels "${LOADGEN_CHANNELS:-32}"
               --client-threads "${LOADGEN_CLIENT_THREADS:-8}" --pool 1024
               --timeout-ms 5000 --duration-s "$DURATION_S" --warmup-s "$WARMUP_S" ${LOADGEN_EXTRA_FLAGS:-})
# SERVER_CPUS, LOADGEN_CPUS: CPU lists for taskset (e.g. 0-15 and 16-31 on a
# 32-core host: the loadgen on cores of its own, as on a second machine).
# Unset: no pinning, server and loadgen share every core. LOADGEN_NICE
# (e.g. 19): the loadgen's nice value, so that on a shared host the server's
# threads win the cores when both are runnable. GPU_INDEX (default 0): the
# GPU nvidia-smi samples; set CUDA_VISIBLE_DEVICES to match.
SERVER_RUN=()
LOADGEN_RUN=()
[[ -n ${SERVER_CPUS:-} ]] && SERVER_RUN=(taskset -c "$SERVER_CPUS")
[[ -n ${LOADGEN_CPUS:-} ]] && LOADGEN_RUN=(taskset -c "$LOADGEN_CPUS")
[[ -n ${LOADGEN_NICE:-} ]] && LOADGEN_RUN=(nice -n "$LOADGEN_NICE" "${LOADGEN_RUN[@]}")

SERVER_PID=""
SMI_PID=""
cleanup() {
  [[ -n "$SMI_PID" ]] && kill "$SMI_PID" 2>/dev/null
  if [[ -n "$SERVER_PID" ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
}
trap cleanup EXIT

log() { echo "[serving_h200 $(date -u +%H:%M:%S)] $*" >&2; }

scrape() {  # scrape FILE: /metrics -> FILE (python3: curl may be missing)
  python3 - "$METRICS_PORT" "$1" <<'PY'
import sys, urllib.request
port, path = sys.argv[1], sys.argv[2]
try:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
except Exception as e:  # keep going: the loadgen result still counts
    text = f"# scrape failed: {e}\n"
open(path, "w").write(text)
PY
}

start_server() {  # start_server NAME ATTENTION [extra flags...]
  local name=$1 attention=$2
  shift 2
  "${SERVER_RUN[@]}" "$BIN/jagrank-server" --grpc-address $GRPC_TARGET --metrics-address 127.0.0.1:$METRICS_PORT \
    --attention "$attention" "${SERVER_FLAGS[@]}" ${SERVER_EXTRA_FLAGS:-} "$@" \
    >"$OUT/$name.server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    if "$BIN/jagrank-client" --address $GRPC_TARGET --health --timeout-ms 500 >/dev/null 2>&1; then
      log "$name: SERVING ($(grep -o 'device=[^ ]*' "$OUT/$name.server.log" | head -1))"
      return 0
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
    sleep 0.2
  done
  log "$name: server did not become SERVING; log:"
  tail -20 "$OUT/$name.server.log" >&2
  kill -9 "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
  return 1
}

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID"
  log "server exit code $?"
  SERVER_PID=""
}

host_cpu() {  # host_cpu FILE: busy and total jiffies of the whole host so far (from /proc/stat) -> FILE
  awk '/^cpu /{busy=$2+$3+$4+$7+$8+$9; total=busy+$5+$6; print busy, total}' /proc/stat >"$1"
}

thread_cpu() {  # thread_cpu PID FILE: CPU seconds so far per thread ("name/tid") of PID -> FILE (JSON)
  python3 - "$1" "$2" <<'PY'
import glob, json, os, sys
pid, path = sys.argv[1], sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
cpu = {}
for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
    try:
        text = open(stat).read()
    except OSError:
        continue
    name = text[text.index("(") + 1:text.rindex(")")]
    tid = stat.split("/")[-2]
    fields = text[text.rindex(")") + 2:].split()
    cpu[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime, per thread
json.dump(cpu, open(path, "w"))
PY
}

run_point() {  # run_point LABEL workload-flags... -- load-flags...
  local label=$1
  shift
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --id="${GPU_INDEX:-0}" --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 200 \
      >"$OUT/$label.gpu.csv" 2>/dev/null &
    SMI_PID=$!
  fi
  scrape "$OUT/$label.before.metrics"
  thread_cpu "$SERVER_PID" "$OUT/$label.cpu-before"
  host_cpu "$OUT/$label.host-before"
  local t0
  t0=$(date +%s.%N)
  "${LOADGEN_RUN[@]}" "$BIN/jagrank-loadgen" --address $LOAD_TARGET --label "$label" "${LOADGEN_FLAGS[@]}" "$@" \
    --json-out "$OUT/$label.json" 2>/dev/null | tail -n +2
  thread_cpu "$SERVER_PID" "$OUT/$label.cpu-after"
  host_cpu "$OUT/$label.host-after"
  python3 -c "import sys, time; print(time.time() - float(sys.argv[1]))" "$t0" >"$OUT/$label.wall_s"
  scrape "$OUT/$label.metrics"
  if [[ -n "$SMI_PID" ]]; then kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null; SMI_PID=""; fi
}

best_qps() {  # best_qps GLOB: highest qps among results with p99 <= 20 ms (else the highest overall)
  python3 - "$@" <<'PY'
import json, sys
rs = [json.load(open(p)) for p in sys.argv[1:]]
ok = [r for r in rs if r["requests_ok"] > 0 and r["latency_ms"]["p99"] <= 20.0] or rs
print(max((r["qps"] for r in ok), default=0))
PY
}

bench_workload() {  # bench_workload NAME CONCURRENCIES RATE_FRACTIONS model-flags... -- workload-flags...
  local name=$1 concurrencies=$2 fractions=$3
  shift 3
  local model_flags=() workload_flags=()
  while [[ $# -gt 0 && $1 != -- ]]; do model_flags+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  workload_flags=("$@")
  local policy_flags=()
  [[ $name == *-idle ]] && policy_flags=(--dispatch-when-idle)
  for attention in $STRATEGIES; do
    local tag=${name}_${attention}
    start_server "$tag" "$attention" "${model_flags[@]}" "${policy_flags[@]}" || continue
    local ramp=$concurrencies dense_ramp=${name%-idle}
    dense_ramp=${dense_ramp^^}_DENSE_CONCURRENCY  # e.g. H4096_DENSE_CONCURRENCY
    [[ $attention == padded_dense && -n ${!dense_ramp:-} ]] && ramp=${!dense_ramp}
    for c in $ramp; do
      run_point "${tag}_c$c" "${workload_flags[@]}" --concurrency "$c"
    done
    local peak
    peak=$(best_qps "$OUT/${tag}"_c*.json)
    for f in $fractions; do
      local rate
      rate=$(python3 -c "print(max(1, int($peak * $f)))")
      run_point "${tag}_r$rate" "${workload_flags[@]}" --rate "$rate"
    done
    stop_server
  done
}

log "bundle $BUNDLE, results in $OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1 || true
lscpu >"$OUT/lscpu.txt" 2>&1 || true
policy_suffix() { [[ $1 == idle ]] && echo "-idle"; }

# The max_history_len 4096 model (written here from the default's keys).
cat >"$OUT/model_h4096.yaml" <<'YAML'
name: jagrank-dlrm
embedding_dim: 64
num_dense_features: 13
sparse_features:
  - {name: user_country, num_rows: 1000}
  - {name: user_age_bucket, num_rows: 16}
  - {name: user_segments, num_rows: 100000}
  - {name: device_type, num_rows: 32}
  - {name: hour_of_week, num_rows: 168}
  - {name: query_terms, num_rows: 500000}
item_rows: 1000000
max_history_len: 4096
attention_heads: 2
bottom_mlp: [256, 128, 64]
top_mlp: [512, 256, 1]
seed: 42
YAML

# In process first: the forward pass alone per strategy (no gRPC, no batcher),
# at the serving runs' mean batch size and a bigger one: the executor's ceiling.
if [[ -x "$BIN/jagrank-bench-model" && "${MODEL_BENCH:-1}" == 1 ]]; then
  for r in 38 128; do
    "$BIN/jagrank-bench-model" --device "$DEVICE" --requests-per-batch "$r" --duration-s "${MODEL_BENCH_S:-3}" \
      --history-median 100 --history-sigma 1.0 --json-out "$OUT/model_h1024_r$r.json" >"$OUT/model_h1024_r$r.txt" 2>&1
    "$BIN/jagrank-bench-model" --device "$DEVICE" --requests-per-batch "$r" --duration-s "${MODEL_BENCH_S:-3}" \
      --model-config "$OUT/model_h4096.yaml" --history-median 300 --history-sigma 1.1 \
      --json-out "$OUT/model_h4096_r$r.json" >"$OUT/model_h4096_r$r.txt" 2>&1
    log "in-process r=$r: $(tail -n +2 "$OUT/model_h1024_r$r.txt" | awk '{printf "%s %s/s  ", $1, $4}')"
  done
fi

# Workload 1: the default model, histories median 100 up to 1024, 50-500 candidates.
H1024_LOAD=(--history-median 100 --history-sigma 1.0 --candidates-min 50 --candidates-max 500)
WORKLOADS=${WORKLOADS:-h1024 h4096}
for policy in ${H1024_POLICIES:-delay}; do
  [[ " $WORKLOADS " == *" h1024 "* ]] || break
  bench_workload "h1024$(policy_suffix "$policy")" "${H1024_CONCURRENCY:-8 32 64 128 256 384 512}" \
    "${OPEN_FRACTIONS-0.5 0.8 0.95}" -- "${H1024_LOAD[@]}"
done

# Diagnostics (not in the best-QPS summary): does the client bound QPS?
# jagged at DIAG_CONCURRENCY (default c256) with DIAG_CHANNELS connections
# (default 4 16 32) and DIAG_CLIENT_THREADS completion-queue threads (default
# none beyond the standard 4), under DIAG_POLICY (delay | idle); then two
# loadgen processes side by side at half the concurrency each (DIAG_TWO_PROC).
if [[ " $STRATEGIES " == *" jagged "* && "${CHANNEL_SWEEP:-1}" == 1 ]]; then
  diag_c=${DIAG_CONCURRENCY:-256}
  diag_flags=()
  [[ ${DIAG_POLICY:-delay} == idle ]] && diag_flags=(--dispatch-when-idle)
  if start_server h1024_jagged_diag jagged "${diag_flags[@]}"; then
    for ch in ${DIAG_CHANNELS-4 16 32}; do
      run_point "diag_h1024_jagged_c${diag_c}_ch$ch" "${H1024_LOAD[@]}" --concurrency "$diag_c" --channels "$ch"
    done
    for t in ${DIAG_CLIENT_THREADS-}; do
      run_point "diag_h1024_jagged_c${diag_c}_t$t" "${H1024_LOAD[@]}" --concurrency "$diag_c" --client-threads "$t"
    done
    # Is one loadgen process the bound? Two at half the concurrency each, side by side.
    local_pids=()
    for p in $([[ ${DIAG_TWO_PROC:-1} == 1 ]] && echo a b); do
      "${LOADGEN_RUN[@]}" "$BIN/jagrank-loadgen" --address $LOAD_TARGET --label "diag_h1024_jagged_2proc_c$((diag_c / 2))_$p" \
        "${LOADGEN_FLAGS[@]}" --seed "$([[ $p == a ]] && echo 1 || echo 2)" "${H1024_LOAD[@]}" --concurrency $((diag_c / 2)) \
        --json-out "$OUT/diag_h1024_jagged_2proc_c$((diag_c / 2))_$p.json" >/dev/null 2>&1 &
      local_pids+=($!)
    done
    [[ ${#local_pids[@]} -gt 0 ]] && wait "${local_pids[@]}"
    stop_server
  fi
  # Abseil's lock-order checker left on (DIAG_ABSL_CHECK=1) in the server
  # and the loadgen, as before ConfigureGrpcProcess turned it off: the A/B of
  # that change in one call, at each of DIAG_ABSL_CONCURRENCY.
  if [[ ${DIAG_ABSL_CHECK:-0} == 1 ]]; then
    export JAGRANK_ABSL_DEADLOCK_CHECK=1
    if start_server h1024_jagged_diag_abslcheck jagged "${diag_flags[@]}"; then
      for c in ${DIAG_ABSL_CONCURRENCY:-$diag_c}; do
        run_point "diag_h1024_jagged_c${c}_abslcheck" "${H1024_LOAD[@]}" --concurrency "$c"
      done
      stop_server
    fi
    unset JAGRANK_ABSL_DEADLOCK_CHECK
  fi
fi

for policy in ${H4096_POLICIES:-delay}; do
  [[ " $WORKLOADS " == *" h4096 "* ]] || break
  bench_workload "h4096$(policy_suffix "$policy")" "${H4096_CONCURRENCY:-16 64 128 256 384 512}" "" \
    --model-config "$OUT/model_h4096.yaml" -- \
    --history-median 300 --history-sigma 1.1 --candidates-min 50 --candidates-max 500
done

# Repeated server starts (REPEAT_STARTS=N, default 0 = none): the h1024
# workload at REPEAT_CONCURRENCY (default "1024 1280 1536") for each of
# REPEAT_STRATEGIES (default "jagged padded_flash"), N rounds, a fresh server
# start each, the order reversed every other round (ABBA). On the H200 host
# one start's best QPS varies by +-15% (and by -30% between machine starts):
# as much as the gap between jagged and padded_flash at h1024. The summary
# gives each start's best QPS at p99 <= 20 ms and the ratio of the means.
for ((round = 1; round <= ${REPEAT_STARTS:-0}; round++)); do
  order=(${REPEAT_STRATEGIES:-jagged padded_flash})
  ((round % 2 == 0)) && order=($(printf '%s\n' "${order[@]}" | tac))
  for attention in "${order[@]}"; do
    start_server "rep_h1024_${attention}_s$round" "$attention" || continue
    for c in ${REPEAT_CONCURRENCY:-1024 1280 1536}; do
      run_point "rep_h1024_${attention}_s${round}_c$c" "${H1024_LOAD[@]}" --concurrency "$c"
    done
    stop_server
  done
done

# Summary: per workload and strategy, the best load with p99 <= 20 ms, its
# latencies, peak device memory and the server's time split over that run.
python3 "$(dirname "${BASH_SOURCE[0]}")/serving_summary.py" "$OUT"
log "done"
