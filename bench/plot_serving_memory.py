"""Bar chart of peak device memory per attention strategy and workload from
a serving_h200.sh summary.json (needs matplotlib, e.g. on the GPU machine):
  python3 bench/plot_serving_memory.py SUMMARY_JSON OUT_PNG [WORKLOAD ...]
Default workloads: h1024 h4096."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    summary_path, out_path = sys.argv[1], sys.argv[2]
    workloads = sys.argv[3:] or ["h1024", "h4096"]
    summary = json.load(open(summary_path))
    strategies = ["jagged", "padded_flash", "padded_dense"]
    width = 0.27
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, strategy in enumerate(strategies):
        mib = [summary[w][strategy]["peak_device_memory_bytes"] / 2**20 for w in workloads]
        xs = [j + (i - 1) * width for j in range(len(workloads))]
        bars = ax.bar(xs, mib, width, label=strategy)
        for bar, value in zip(bars, mib):
            ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([f"max_history_len {w.lstrip('h').split('-')[0]}" for w in workloads])
    ax.set_ylabel("peak device memory (MiB, incl. weights)")
    ax.set_title("jagrank on H200: peak device memory per strategy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)


if __name__ == "__main__":
    main()
