#!/usr/bin/env bash
# Everything a change must pass on the GPU machine, in one go:
#   bench/gpu_check.sh BUNDLE_DIR [BEFORE_SERVER]
# BUNDLE_DIR holds env.sh and bin/ with the GPU test binaries, jagrank-server
# and jagrank-loadgen (made by a bundling step that copies the binaries and the shared libraries they need), and
# python/ with the generated Python stubs (build/python). Runs, logging each
# under $OUT (default ./out/gpu_check):
#   1. the GPU tests: jagrank_kernels_gpu_test, flash_attention_gpu_test,
#      model_cuda_test (their summary lines last);
#   2. the PyTorch twin on CUDA against the server's CUDA backend
#      (python/tests/twin_vs_server_cuda.py; PRECISIONS, default
#      "fp32 bf16": one server per --precision; "default" = no flag);
#   3. with BEFORE_SERVER: bench/ab_builds.sh BEFORE_SERVER against this
#      bundle's server (same flags, same load, ABBA starts).
set -uo pipefail
BUNDLE=$(cd "${1:?usage: gpu_check.sh BUNDLE_DIR [BEFORE_SERVER]}" && pwd)
BEFORE=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/out/gpu_check}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source "$BUNDLE/env.sh"
nvidia-smi -L | tee "$OUT/gpu.txt"

status=0
for t in jagrank_kernels_gpu_test flash_attention_gpu_test model_cuda_test; do
  "$BUNDLE/bin/$t" >"$OUT/$t.log" 2>&1
  rc=$?
  echo "$t: rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$t.log" | tr '\n' ' ')"
  [ $rc -eq 0 ] || status=1
done

variants=()
for p in ${PRECISIONS:-fp32 bf16}; do
  if [ "$p" = default ]; then variants+=(--variant "default="); else variants+=(--variant "$p=--precision $p"); fi
done
PYTHONPATH="$HERE/../python:$BUNDLE/python" python3 "$HERE/../python/tests/twin_vs_server_cuda.py" \
  --server "$BUNDLE/bin/jagrank-server" "${variants[@]}" >"$OUT/twin_vs_server_cuda.log" 2>&1
echo "twin_vs_server_cuda: rc=$?"
tail -n 20 "$OUT/twin_vs_server_cuda.log"

if [ -n "$BEFORE" ]; then
  OUT="$OUT/ab" LOADGEN="$BUNDLE/bin/jagrank-loadgen" "$HERE/ab_builds.sh" "$BEFORE" "$BUNDLE/bin/jagrank-server" \
    >"$OUT/ab_builds.log" 2>&1
  grep -E "best_qps|B / A" "$OUT/ab_builds.log"
fi
exit $status
