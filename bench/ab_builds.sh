#!/usr/bin/env bash
# A/B of two jagrank-server builds on the gRPC port, same flags, same load:
#   bench/ab_builds.sh SERVER_A SERVER_B
# Each build is started ROUNDS times in ABBA order; each start gets a
# closed-loop concurrency ramp (CONCURRENCY) from one jagrank-loadgen (LOADGEN,
# default: the one beside SERVER_B) with the h1024 workload of the default
# model (histories log-normal median 100, sigma 1.0, capped at 1024; 50-500
# candidates). Prints, per start, the best QPS whose p99 <= P99_MS, and last
# one line per build: the mean of its starts' best QPS, and B / A.
# Environment: SERVER_FLAGS (default: the serving benchmark's GPU budgets on
# --device cuda), CONCURRENCY ("256 512 1024"), DURATION_S (5), WARMUP_S (1),
# ROUNDS (2), P99_MS (20), PORT (18600), OUT (./out/ab_builds).
set -uo pipefail

[ $# -eq 2 ] || { echo "usage: ab_builds.sh SERVER_A SERVER_B" >&2; exit 2; }
A=$1 B=$2
LOADGEN=${LOADGEN:-$(dirname "$B")/jagrank-loadgen}
OUT=${OUT:-$PWD/out/ab_builds}
mkdir -p "$OUT"
PORT=${PORT:-18600}
SERVER_FLAGS=${SERVER_FLAGS:-"--device cuda --max-queue-delay-us 1000 --max-batch-candidates 65536 --max-batch-requests 512 --max-batch-history-tokens 1048576 --max-batch-attention-cost 1073741824 --max-queue-requests 8192"}
CONCURRENCY=${CONCURRENCY:-"256 512 1024"}
P99_MS=${P99_MS:-20}
LOAD=(--history-median 100 --history-sigma 1.0 --candidates-min 50 --candidates-max 500
      --channels 32 --client-threads 8 --pool 1024 --timeout-ms 5000
      --duration-s "${DURATION_S:-5}" --warmup-s "${WARMUP_S:-1}")

PID=""
trap '[ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null; wait 2>/dev/null' EXIT

one_start() {  # one_start LABEL SERVER -> prints "LABEL best_qps"
  local label=$1 server=$2 log="$OUT/$1.server.log"
  # shellcheck disable=SC2086
  "$server" --grpc-address "127.0.0.1:$PORT" --metrics-address "" $SERVER_FLAGS >"$log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    grep -q "jagrank-server ready" "$log" && break
    kill -0 "$PID" 2>/dev/null || { echo "$label: server exited, see $log" >&2; PID=""; return 1; }
    sleep 0.1
  done
  local best=0
  for c in $CONCURRENCY; do
    local json="$OUT/${label}_c$c.json"
    "$LOADGEN" --address "127.0.0.1:$PORT" "${LOAD[@]}" --concurrency "$c" --label "$label" --json-out "$json" \
      >"$OUT/${label}_c$c.txt" 2>&1
    best=$(python3 - "$json" "$best" "$P99_MS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
best, bound = float(sys.argv[2]), float(sys.argv[3])
ok = r["latency_ms"]["p99"] <= bound and r["requests_error"] == 0
print(max(best, r["qps"]) if ok else best)
PY
)
    echo "$label c$c: qps $(python3 -c "import json;r=json.load(open('$json'));print(round(r['qps']), 'p99', round(r['latency_ms']['p99'],2), 'errors', r['requests_error'])")"
  done
  kill -TERM "$PID"; wait "$PID"; PID=""
  echo "$label best_qps_p99_le_${P99_MS}ms $best" | tee -a "$OUT/best.txt"
}

: >"$OUT/best.txt"
for r in $(seq "${ROUNDS:-2}"); do
  if (( r % 2 )); then order="A B"; else order="B A"; fi
  for x in $order; do
    if [ "$x" = A ]; then one_start "A_r$r" "$A"; else one_start "B_r$r" "$B"; fi
  done
done
python3 - "$OUT/best.txt" <<'PY'
import sys
best = {"A": [], "B": []}
for line in open(sys.argv[1]):
    label, _, qps = line.split()
    best[label[0]].append(float(qps))
mean = {k: sum(v) / len(v) for k, v in best.items() if v}
print(f"A mean best QPS {mean.get('A', 0):.0f} over {len(best['A'])} starts; "
      f"B {mean.get('B', 0):.0f} over {len(best['B'])}; B / A = {mean.get('B', 0) / max(mean.get('A', 1), 1):.3f}")
PY
