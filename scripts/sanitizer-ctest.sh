#!/usr/bin/env bash
# Runs ctest in a sanitizer build directory (make test-asan / test-tsan).
# Every process, the test binaries and the servers, clients and load
# generators they spawn, writes its sanitizer reports to files under
# BUILD_DIR/sanitizer-logs/ instead of stderr (tests that read a child's
# stderr see only its own output). The run fails when ctest fails or when any
# report was written, so a report from a spawned server fails it even when
# the test that spawned it passed.
#
#   scripts/sanitizer-ctest.sh address|thread BUILD_DIR [ctest arguments...]
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/sanitizer-ctest.sh address|thread BUILD_DIR [ctest arguments...]" >&2
  exit 2
fi
kind=$1
build_dir=$(cd "$2" && pwd)
shift 2
source_dir=$(cd "$(dirname "$0")/.." && pwd)
logs="$build_dir/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
case "$kind" in
  address)
    # halt_on_error: UBSan stops at the first report (with -fno-sanitize-recover it must).
    export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
    export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
    export LSAN_OPTIONS="suppressions=$source_dir/tests/lsan.supp:print_suppressions=0"
    ;;
  thread)
    export TSAN_OPTIONS="log_path=$logs/tsan:suppressions=$source_dir/tests/tsan.supp:print_suppressions=0:second_deadlock_stack=1"
    ;;
  *)
    echo "sanitizer-ctest: unknown sanitizer '$kind' (address or thread)" >&2
    exit 2
    ;;
esac
(cd "$build_dir" && ctest --output-on-failure "$@")
rc=$?
shopt -s nullglob
reports=("$logs"/*)
if [ ${#reports[@]} -gt 0 ]; then
  for f in "${reports[@]}"; do
    echo "=== sanitizer report: $f"
    head -n 80 "$f"
  done
  echo "sanitizer-ctest: ${#reports[@]} sanitizer report file(s) under $logs" >&2
  rc=1
fi
if [ $rc -eq 0 ]; then echo "sanitizer-ctest: $kind: no reports"; fi
exit $rc
