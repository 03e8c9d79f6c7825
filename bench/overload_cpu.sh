#!/usr/bin/env bash
# Overload on the CPU backend: the closed-loop capacity (32 calls outstanding
# on 32 connections, the loadgen's default workload and 5 s deadline), then an
# open loop at 3x that rate for 20 s on 32 connections, then the closed loop
# again. Prints the goodput (OK calls/s) against the capacity (the mean of
# the two closed loops: on a shared host the capacity drifts by several
# percent within a minute, so one closed loop before would bias the ratio;
# both are printed), the errors by code, the slowest OK call
# and the server's rejections by reason (deadline-aware admission refuses
# what would not finish in time), and the server's cores by thread in each
# phase: compute against the rest (refusing calls costs gRPC work).
# With PIN=1 (and at least two cores) the server runs on core 0 and the load
# generator on core 1 (taskset), so that neither takes the other's CPU: the
# capacity and the goodput then measure the same server.
#   bench/overload_cpu.sh [build_dir]      (OVERLOAD_FACTOR=3 OPEN_S=20 PIN=0)
set -euo pipefail
build=${1:-build}
factor=${OVERLOAD_FACTOR:-3}
open_s=${OPEN_S:-20}
out=$(mktemp -d /tmp/jagrank_overload_XXXXXX)
server_pin=() load_pin=()
if [ "${PIN:-0}" = 1 ]; then server_pin=(taskset -c 0) load_pin=(taskset -c 1); fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${server_pin[@]}" "$build/bin/jagrank-server" --device cpu --grpc-address "127.0.0.1:$port" --metrics-address "127.0.0.1:$mport" \
  >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do grep -q "jagrank-server ready" "$out/server.log" && break; sleep 0.1; done
thread_cpu() {  # thread_cpu PID: {thread name: CPU seconds so far}
  python3 - "$1" <<'PY'
import glob, json, os, sys
tick, cpu = os.sysconf("SC_CLK_TCK"), {}
for stat in glob.glob(f"/proc/{sys.argv[1]}/task/*/stat"):
    try:
        text = open(stat).read()
    except OSError:
        continue
    name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    cpu[name] = cpu.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
print(json.dumps(cpu))
PY
}
load="${load_pin[*]} $build/bin/jagrank-loadgen --address 127.0.0.1:$port --channels 32"
# Each phase's server CPU by thread is read around the whole loadgen run
# (its warm-up and connection set-up included).
thread_cpu $server >"$out/cpu0.json"; t0=$(date +%s.%N)
$load --concurrency 32 --duration-s 10 --warmup-s 2 --json-out "$out/closed.json" 2>/dev/null >/dev/null
thread_cpu $server >"$out/cpu1.json"; t1=$(date +%s.%N)
capacity=$(python3 -c "import json; print(json.load(open('$out/closed.json'))['qps'])")
rate=$(python3 -c "print(round($capacity * $factor))")
$load --rate "$rate" --duration-s "$open_s" --warmup-s 2 --json-out "$out/open.json" 2>/dev/null >/dev/null
thread_cpu $server >"$out/cpu2.json"; t2=$(date +%s.%N)
$load --concurrency 32 --duration-s 10 --warmup-s 2 --json-out "$out/closed_after.json" 2>/dev/null >/dev/null
echo "$t0 $t1 $t2" >"$out/times.txt"
curl -s "127.0.0.1:$mport/metrics" | grep '^jagrank_rejections_total' | grep -v ' 0$' >"$out/rejections.txt" || true
python3 - "$out" "$capacity" "$rate" <<'PY'
import json, sys
out, before, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
o = json.load(open(f"{out}/open.json"))
after = json.load(open(f"{out}/closed_after.json"))["qps"]
capacity = (before + after) / 2
timeout_ms = 5000
print(f"closed loop (32 outstanding, 32 connections): capacity {capacity:.1f} calls/s "
      f"(before the open loop {before:.1f}, after {after:.1f})")
print(f"open loop {rate:.0f} calls/s ({rate / capacity:.1f}x) for {o['duration_s']:.0f} s: sent {o['sent_per_s']:.1f}/s, "
      f"goodput {o['qps']:.1f} OK/s = {100 * o['qps'] / capacity:.1f}% of capacity")
print(f"OK latency from the scheduled send: p50 {o['latency_ms']['p50']:.0f} ms, p99 {o['latency_ms']['p99']:.0f} ms, "
      f"max {o['latency_ms']['max']:.0f} ms (deadline {timeout_ms} ms; pacer lag up to {o['pacer_max_lag_ms']:.0f} ms)")
print("errors:", json.dumps(o["errors"]))
print("first error:", o.get("first_error", "-"))
print("server rejections:")
print(open(f"{out}/rejections.txt").read().rstrip() or "  none")
# Where the server's CPU went in each phase: the model's compute (jr-compute
# and the CPU kernels' pool workers, which keep the process's name) against
# the rest (gRPC's polling threads, ours and its own, batching, answering).
t = [float(x) for x in open(f"{out}/times.txt").read().split()]
cpu = [json.load(open(f"{out}/cpu{i}.json")) for i in range(3)]
compute = ("jr-compute", "jagrank-server")
for phase, (a, b) in (("closed", (0, 1)), ("open", (1, 2))):
    seconds = t[b] - t[a]
    used = {k: (cpu[b].get(k, 0.0) - cpu[a].get(k, 0.0)) / seconds for k in cpu[b]}
    c = sum(v for k, v in used.items() if k in compute)
    rest = sorted(((v, k) for k, v in used.items() if k not in compute and v >= 0.005), reverse=True)
    print(f"server cores, {phase} loop: compute {c:.3f}, the rest {sum(used.values()) - c:.3f} ("
          + ", ".join(f"{k} {v:.3f}" for v, k in rest) + ")")
PY
