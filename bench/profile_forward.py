#!/usr/bin/env python3
"""Per-kernel GPU time of one forward pass, from an ncu CSV.

Input: the CSV that `ncu --metrics gpu__time_duration.sum --csv` prints over
jagrank-bench-model (bench/profile_forward.sh runs it). The launches between
two SigmoidInPlace kernels (the last kernel of a forward pass) are one pass.
Prints each kernel's time in us, its share, and the pass's sum.
"""
import csv
import io
import re
import sys


def kernel_times(path):
    lines = [line for line in open(path) if line.startswith('"')]  # ncu's own lines and the program's output are not CSV
    rows = [r for r in csv.DictReader(io.StringIO("".join(lines))) if r.get("Metric Name") == "gpu__time_duration.sum"]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    return [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale[r["Metric Unit"]]) for r in rows]


def one_pass(times):
    ends = [i for i, (name, _) in enumerate(times) if "SigmoidInPlace" in name]
    if len(ends) < 2:
        raise SystemExit("fewer than two SigmoidInPlace launches: profile more launches (--launch-count)")
    return times[ends[0] + 1 : ends[1] + 1]


def short(name):
    name = re.sub(r"^void ", "", name)
    return re.sub(r"\(.*", "", name)[:100]


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: profile_forward.py NCU_CSV [NCU_CSV ...]")
    for path in sys.argv[1:]:
        kernels = one_pass(kernel_times(path))
        total = sum(t for _, t in kernels)
        per = {}
        for name, t in kernels:
            per[short(name)] = per.get(short(name), 0.0) + t
        print(f"## {path}: {len(kernels)} kernels, {total:.1f} us per forward pass\n")
        print("| us | share | kernel |\n|---|---|---|")
        for name, t in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"| {t:.1f} | {100 * t / total:.1f}% | `{name}` |")
        print()


if __name__ == "__main__":
    main()
