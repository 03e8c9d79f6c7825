"""The summary of one bench/serving_h200.sh results directory:
  python3 bench/serving_summary.py OUT_DIR
writes OUT_DIR/summary.json and summary.md (per workload and strategy, the
best load with p99 <= 20 ms, its latencies, peak device memory and the
server's time split over that run) and, where matplotlib is installed, the
QPS-vs-p99 plots. serving_h200.sh runs it last; run it again by hand to
re-summarise a directory after changing this file."""
import glob, json, os, re, sys
out = sys.argv[1]
# The measured host's cores (its lscpu.txt, written by serving_h200.sh), not
# this machine's: the summary may be re-run elsewhere.
host_cores = os.cpu_count() or 1
try:
    for line in open(os.path.join(out, "lscpu.txt")):
        if line.startswith("CPU(s):"):
            host_cores = int(line.split()[1])
except (OSError, ValueError, IndexError):
    pass

def metrics(path):
    vals = {}
    if not os.path.exists(path):
        return vals
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            try:
                vals[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            except ValueError:
                pass
    return vals

def gpu_busy(path):
    xs = []
    if os.path.exists(path):
        for line in open(path):
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2:
                try:
                    xs.append(float(parts[1]))
                except ValueError:
                    pass
    return sum(xs) / len(xs) / 100.0 if xs else None

rows = {}
for path in sorted(glob.glob(os.path.join(out, "*_*_*.json"))):
    label = os.path.basename(path)[:-5]
    m = re.match(r"^(h\d+(?:-idle)?)_(jagged|padded_flash|padded_dense)_([cr]\d+)$", label)
    if not m:
        continue
    r = json.load(open(path))
    before, after = metrics(os.path.join(out, label + ".before.metrics")), metrics(os.path.join(out, label + ".metrics"))
    d = lambda k: after.get(k, 0.0) - before.get(k, 0.0)
    batches = d("jagrank_batch_requests_count")
    split = {k: d(f"jagrank_{k}_sum") / max(1.0, d(f"jagrank_{k}_count")) * 1e3 for k in
             ["queue_latency_seconds", "compute_latency_seconds", "h2d_seconds", "d2h_seconds",
              "batch_assemble_seconds", "request_latency_seconds", "response_send_seconds"]}
    r["server_ms_per_request_or_batch"] = split
    r["mean_batch_requests"] = d("jagrank_batch_requests_sum") / batches if batches else None
    r["compute_busy_fraction"] = d("jagrank_compute_latency_seconds_sum") / (r["duration_s"] + r["warmup_s"])
    r["gpu_busy_fraction_smi"] = gpu_busy(os.path.join(out, label + ".gpu.csv"))
    # Server CPU by thread name over the loadgen run (warm-up included), in cores.
    try:
        c0 = json.load(open(os.path.join(out, label + ".cpu-before")))
        c1 = json.load(open(os.path.join(out, label + ".cpu-after")))
        wall = float(open(os.path.join(out, label + ".wall_s")).read()) or (r["duration_s"] + r["warmup_s"])
        per_thread = {k: (c1[k] - c0.get(k, 0.0)) / wall for k in c1}
        per, counts = {}, {}
        for k, v in per_thread.items():
            name = k.rsplit("/", 1)[0]
            per[name] = per.get(name, 0.0) + v
            counts[name] = counts.get(name, 0) + 1
        r["server_cpu_cores_by_thread"] = {k: round(v, 3) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0.005}
        r["server_threads_by_name"] = counts
        r["server_cpu_cores_total"] = round(sum(per.values()), 3)
        busiest = max(per_thread.items(), key=lambda kv: kv[1])
        r["server_busiest_thread"] = {"thread": busiest[0], "cores": round(busiest[1], 3)}
    except (OSError, ValueError):
        r["server_cpu_cores_by_thread"], r["server_cpu_cores_total"] = {}, None
    try:  # whole host: busy cores over the run (server + loadgen + everything else)
        b0, t0 = map(float, open(os.path.join(out, label + ".host-before")).read().split())
        b1, t1 = map(float, open(os.path.join(out, label + ".host-after")).read().split())
        ncpu = host_cores
        r["host_cpu_busy_cores"] = round((b1 - b0) / max(1.0, t1 - t0) * ncpu, 3)
        r["host_cores"] = ncpu
    except (OSError, ValueError):
        r["host_cpu_busy_cores"] = None
    r["device_memory_peak_bytes"] = after.get("jagrank_device_memory_peak_bytes")
    r["device_memory_used_bytes"] = after.get("jagrank_device_memory_used_bytes")
    r["model_weights_bytes"] = after.get("jagrank_model_weights_bytes")
    rows.setdefault((m.group(1), m.group(2)), []).append(r)

def under_bound(r):  # answered, no errors, p99 <= 20 ms
    return r["requests_ok"] > 0 and r["latency_ms"]["p99"] <= 20.0 and r["requests_error"] == 0

summary = {}
for (workload, attention), rs in sorted(rows.items()):
    ok = [r for r in rs if under_bound(r)]
    best = max(ok, key=lambda r: r["qps"]) if ok else None
    summary.setdefault(workload, {})[attention] = {
        "best_under_p99_20ms": None if best is None else {
            "label": best["label"], "qps": best["qps"], "candidates_per_s": best["candidates_per_s"],
            "p50_ms": best["latency_ms"]["p50"], "p99_ms": best["latency_ms"]["p99"],
            "mean_batch_requests": best["mean_batch_requests"], "time_split_ms": best["server_ms_per_request_or_batch"],
            "compute_busy_fraction": best["compute_busy_fraction"], "gpu_busy_fraction_smi": best["gpu_busy_fraction_smi"],
            "server_cpu_cores_total": best.get("server_cpu_cores_total"),
            "server_cpu_cores_by_thread": best.get("server_cpu_cores_by_thread"),
            "server_threads_by_name": best.get("server_threads_by_name"),
            "server_busiest_thread": best.get("server_busiest_thread"),
            "loadgen_cpu_cores": best.get("client_cpu_cores"),
            "host_cpu_busy_cores": best.get("host_cpu_busy_cores")},
        "peak_device_memory_bytes": max((r["device_memory_peak_bytes"] or 0) for r in rs),
        "max_qps_any_latency": max(r["qps"] for r in rs),
        "points": [{"label": r["label"], "qps": r["qps"], "p50_ms": r["latency_ms"]["p50"],
                    "p99_ms": r["latency_ms"]["p99"], "errors": r["requests_error"],
                    "server_cpu_cores": r.get("server_cpu_cores_total"), "loadgen_cpu_cores": r.get("client_cpu_cores"),
                    "host_cpu_busy_cores": r.get("host_cpu_busy_cores"),
                    "busiest_thread": r.get("server_busiest_thread"),
                    "sent_per_s": r.get("sent_per_s"), "pacer_late_fraction": r.get("pacer_late_fraction"),
                    "mean_batch_requests": r.get("mean_batch_requests"),
                    "queue_ms": r["server_ms_per_request_or_batch"].get("queue_latency_seconds"),
                    "gpu_busy": r.get("gpu_busy_fraction_smi")} for r in rs],
    }
diag = []
for path in sorted(glob.glob(os.path.join(out, "diag_*.json"))):
    r = json.load(open(path))
    diag.append({"label": r["label"], "qps": r["qps"], "p50_ms": r["latency_ms"]["p50"], "p99_ms": r["latency_ms"]["p99"],
                 "loadgen_cpu_cores": r.get("client_cpu_cores")})
in_process = {}
for path in sorted(glob.glob(os.path.join(out, "model_h*_r*.json"))):
    in_process[os.path.basename(path)[:-5]] = json.load(open(path))
summary["_diagnostics"] = {"channels": diag, "in_process": in_process}
starts = {}  # attention -> start -> loadgen results (REPEAT_STARTS)
for path in sorted(glob.glob(os.path.join(out, "rep_h1024_*.json"))):
    m = re.match(r"^rep_h1024_(jagged|padded_flash|padded_dense)_s(\d+)_c\d+$", os.path.basename(path)[:-5])
    if m:
        starts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), []).append(json.load(open(path)))
repeats = {}
for attention, per_start in sorted(starts.items()):
    # None for a start where no load met the bound (e.g. one p99 spike at
    # each load): reported as such, and left out of the mean, min and max.
    best = []
    for _, rs in sorted(per_start.items()):
        best.append(max((r["qps"] for r in rs if under_bound(r)), default=None))
    passed = [q for q in best if q is not None]
    repeats[attention] = {"best_qps_per_start": best, "starts_without_a_load_under_bound": len(best) - len(passed),
                          "mean": sum(passed) / len(passed) if passed else None,
                          "min": min(passed, default=None), "max": max(passed, default=None)}
if repeats:
    summary["_repeats_h1024"] = repeats
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)

lines = ["# jagrank serving on one H200", ""]
for workload, per in summary.items():
    if workload.startswith("_"):
        continue
    lines += [f"## {workload}", "", "| attention | best QPS (p99<=20ms) | cand/s | p50 ms | p99 ms | batch req | queue ms | compute ms/batch | h2d ms | GPU busy | server cores | busiest thread | loadgen cores | host busy cores | peak dev MiB |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for attention, s in per.items():
        b = s["best_under_p99_20ms"] or {}
        split = b.get("time_split_ms", {})
        fmt = lambda v, f="{:.1f}": "-" if v is None else f.format(v)
        lines.append(f"| {attention} | {fmt(b.get('qps'))} | {fmt(b.get('candidates_per_s'), '{:.0f}')} | "
                     f"{fmt(b.get('p50_ms'), '{:.2f}')} | {fmt(b.get('p99_ms'), '{:.2f}')} | {fmt(b.get('mean_batch_requests'))} | "
                     f"{fmt(split.get('queue_latency_seconds'), '{:.2f}')} | {fmt(split.get('compute_latency_seconds'), '{:.2f}')} | "
                     f"{fmt(split.get('h2d_seconds'), '{:.3f}')} | "
                     f"{fmt(b.get('gpu_busy_fraction_smi'), '{:.2f}')} | {fmt(b.get('server_cpu_cores_total'), '{:.2f}')} | "
                     f"{(b.get('server_busiest_thread') or {}).get('thread', '-')} {fmt((b.get('server_busiest_thread') or {}).get('cores'), '{:.2f}')} | "
                     f"{fmt(b.get('loadgen_cpu_cores'), '{:.2f}')} | {fmt(b.get('host_cpu_busy_cores'), '{:.2f}')} | "
                     f"{s['peak_device_memory_bytes'] / 2**20:.0f} |")
    j = per.get("jagged", {})
    for other in ["padded_dense", "padded_flash"]:
        o = per.get(other, {})
        jq = (j.get("best_under_p99_20ms") or {}).get("qps")
        oq = (o.get("best_under_p99_20ms") or {}).get("qps")
        if jq and oq:
            lines.append(f"\njagged vs {other} QPS at p99<=20ms: {jq / oq:.2f}x")
    if j.get("peak_device_memory_bytes") and per.get("padded_dense", {}).get("peak_device_memory_bytes"):
        lines.append(f"jagged vs padded_dense peak memory: {j['peak_device_memory_bytes'] / per['padded_dense']['peak_device_memory_bytes']:.2f}x")
    # Where a call's time goes at the best point: the client's p50, the
    # server's own time (receipt to reply; queue is part of it) and gRPC's
    # response path after it (jagrank_response_send_seconds).
    lines += ["", "| attention | client p50 ms | server receipt-to-reply mean | of it queue | gRPC reply-to-sent mean |",
              "|---|---|---|---|---|"]
    for attention, s in per.items():
        b = s["best_under_p99_20ms"] or {}
        split = b.get("time_split_ms", {})
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        lines.append(f"| {attention} | {fmt(b.get('p50_ms'))} | {fmt(split.get('request_latency_seconds'))} | "
                     f"{fmt(split.get('queue_latency_seconds'))} | {fmt(split.get('response_send_seconds'))} |")
    lines.append("")
if in_process:
    lines += ["## In process (jagrank-bench-model: forward passes only, no gRPC)", "",
              "| run | attention | requests/batch | forwards/s | requests/s | candidates/s | forward p50 ms | p99 ms | workspace MiB |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, res in in_process.items():
        for x in res["results"]:
            lines.append(f"| {name} | {x['attention']} | {res['requests_per_batch']} | {x['forwards_per_s']:.0f} | {x['requests_per_s']:.0f} | "
                         f"{x['candidates_per_s']:.0f} | {x['forward_ms']['p50']:.3f} | {x['forward_ms']['p99']:.3f} | {x['workspace_peak_bytes'] / 2**20:.0f} |")
    lines.append("")
if repeats:
    lines += ["## Repeated server starts (h1024): best QPS at p99 <= 20 ms per start", "",
              "| attention | per start (none: no load met the bound) | mean | min | max |", "|---|---|---|---|---|"]
    q0 = lambda v: "none" if v is None else f"{v:.0f}"
    for attention, x in repeats.items():
        lines.append(f"| {attention} | {', '.join(q0(q) for q in x['best_qps_per_start'])} | {q0(x['mean'])} | "
                     f"{q0(x['min'])} | {q0(x['max'])} |")
    for other in ["padded_flash", "padded_dense"]:
        j, o = repeats.get("jagged", {}), repeats.get(other, {})
        if j.get("mean") and o.get("mean"):
            lines.append(f"\njagged vs {other} QPS at p99<=20ms, mean over the starts that met the bound "
                         f"({len(j['best_qps_per_start']) - j['starts_without_a_load_under_bound']} and "
                         f"{len(o['best_qps_per_start']) - o['starts_without_a_load_under_bound']}): "
                         f"{j['mean'] / o['mean']:.2f}x")
    lines.append("")
if diag:
    lines += ["## Diagnostics (jagged, h1024): client connections and threads, server completion queues", "", "| run | QPS | p50 ms | p99 ms | loadgen cores |", "|---|---|---|---|---|"]
    for x in diag:
        lc = x["loadgen_cpu_cores"]
        lines.append(f"| {x['label']} | {x['qps']:.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {'-' if lc is None else f'{lc:.2f}'} |")
    lines.append("")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))

try:  # plots when matplotlib is there
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for workload in [w for w in summary if not w.startswith("_")]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for (w, attention), rs in sorted(rows.items()):
            if w != workload:
                continue
            # In the order of the closed loop's ramp (past the peak, more
            # calls in flight can lower QPS), each point labelled with it.
            pts = sorted((int(r["label"].split("_")[-1][1:]), r["qps"], r["latency_ms"]["p99"]) for r in rs
                         if r["label"].split("_")[-1].startswith("c"))
            line, = ax.plot([p[1] for p in pts], [p[2] for p in pts], marker="o", label=attention)
            for c, q, p99 in pts:
                ax.annotate(f"c{c}", (q, p99), textcoords="offset points", xytext=(3, 3), fontsize=6,
                            color=line.get_color())
        ax.axhline(20, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("QPS (closed loop; cN = calls in flight)"); ax.set_ylabel("p99 latency (ms)"); ax.set_yscale("log"); ax.legend()
        ax.set_title(f"jagrank on H200, {workload}")
        fig.tight_layout(); fig.savefig(os.path.join(out, f"qps_p99_{workload}.png"), dpi=120)
except ImportError:
    pass
