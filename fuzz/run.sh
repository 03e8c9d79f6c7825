#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, in their own build directory), or runs
# each: first every kept crash input of fuzz/regressions/<name>/ once (each
# must pass), then fuzzing for SECONDS, starting from the seed corpus
# fuzz/corpus/<name>/. New inputs go to BUILD_DIR/corpus/<name>/ (kept between
# runs), crashes to BUILD_DIR/artifacts/. Exits non-zero on any failure.
#
#   fuzz/run.sh build BUILD_DIR                  configure (first time) and build the targets
#   fuzz/run.sh run BUILD_DIR SECONDS [NAME...]  NAME: rank_request safetensors model_config server_config (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
  echo "usage: fuzz/run.sh build BUILD_DIR | fuzz/run.sh run BUILD_DIR SECONDS [NAME...]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
mode=$1
build_dir=$2

if [ "$mode" = build ]; then
  if [ ! -f "$build_dir/build.ninja" ]; then
    launcher=()
    if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DJAGRANK_ENABLE_CUDA=OFF -DJAGRANK_FUZZ=ON \
      -DJAGRANK_BUILD_TESTS=OFF -DJAGRANK_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
  fi
  exec cmake --build "$build_dir" --target fuzzers
fi
[ "$mode" = run ] && [ $# -ge 3 ] || usage
seconds=$3
shift 3
names=("$@")
if [ ${#names[@]} -eq 0 ]; then names=(rank_request safetensors model_config server_config); fi

# Reports are fatal (UBSan: -fno-sanitize-recover); leaks are checked.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
failed=0
for name in "${names[@]}"; do
  bin="$build_dir/bin/fuzz_$name"
  seeds="fuzz/corpus/$name"
  regressions="fuzz/regressions/$name"
  if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
    echo "fuzz: unknown target '$name' (no $bin or $seeds)" >&2
    exit 2
  fi
  mkdir -p "$build_dir/corpus/$name" "$build_dir/artifacts"
  mapfile -t kept < <(find "$regressions" -type f ! -name '*.md' 2>/dev/null | sort)
  if [ ${#kept[@]} -gt 0 ]; then
    echo "== fuzz_$name: ${#kept[@]} regression inputs"
    if ! "$bin" -timeout=20 "${kept[@]}" >"$build_dir/artifacts/$name-regressions.log" 2>&1; then
      tail -n 40 "$build_dir/artifacts/$name-regressions.log"
      echo "fuzz_$name: a regression input of $regressions fails" >&2
      failed=1
      continue
    fi
  fi
  echo "== fuzz_$name: ${seconds}s from $seeds"
  log="$build_dir/artifacts/$name.log"
  if "$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
      -artifact_prefix="$build_dir/artifacts/$name-" "$build_dir/corpus/$name" "$seeds" >"$log" 2>&1; then
    # The final status line (executions, coverage, corpus) and the run's totals.
    grep -E '^#[0-9]+\s+DONE' "$log" | tail -n 1 || true
    grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb' "$log" || true
  else
    tail -n 60 "$log"
    echo "fuzz_$name: FAILED (input kept under $build_dir/artifacts/$name-*)" >&2
    failed=1
  fi
done
exit $failed
