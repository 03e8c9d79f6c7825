#!/usr/bin/env bash
# Kernel times of one forward pass per attention strategy, on the GPU
# machine: ncu (gpu__time_duration.sum) over jagrank-bench-model, then
# bench/profile_forward.py. Usage:
#   bash bench/profile_forward.sh BIN_DIR [REQUESTS_PER_BATCH] [STRATEGIES] [HISTORY_MAX]
# BIN_DIR holds jagrank-bench-model (build/bin, or a bundle's bin/). Output
# under $OUT (default ./profile_out): ncu_<strategy>.csv and profile.md.
set -euo pipefail
BIN=${1:?usage: profile_forward.sh BIN_DIR [REQUESTS_PER_BATCH] [STRATEGIES] [HISTORY_MAX]}
REQUESTS=${2:-128}
STRATEGIES=${3:-"jagged padded_flash"}
HISTORY_MAX=${4:-0}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
OUT=${OUT:-profile_out}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
csvs=()
for a in $STRATEGIES; do
  # Skip the warm-up passes' launches (~30 per pass), then take ~4 passes.
  "$NCU" --metrics gpu__time_duration.sum --csv --launch-skip 300 --launch-count 120 \
    "$BIN/jagrank-bench-model" --attention "$a" --requests-per-batch "$REQUESTS" --history-max "$HISTORY_MAX" \
    --iterations 20 --warmup 10 >"$OUT/ncu_$a.csv" 2>"$OUT/ncu_$a.log"
  csvs+=("$OUT/ncu_$a.csv")
done
python3 "$HERE/profile_forward.py" "${csvs[@]}" | tee "$OUT/profile.md"
