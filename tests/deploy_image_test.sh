#!/usr/bin/env bash
# deploy_image_test: builds the Dockerfile's CPU variant on a local Debian 12
# base with podman and checks the container as users run it:
#   - every shared library of every binary resolves inside the image;
#   - the container starts with trained weights mounted read-only and its
#     gRPC health reports SERVING; the image's HEALTHCHECK passes, also for
#     servers moved to another port by a flag or by a config file;
#   - one Rank call returns the scores the host's jagrank-server computes
#     on the same weights;
#   - `podman stop` drains the server, which exits 0.
# It fails, saying why, wherever podman cannot build or run containers: it
# never skips.
# Usage: tests/deploy_image_test.sh --bin-dir DIR [--podman-dir DIR]
#   --bin-dir     the host build's bin folder (jagrank-server, -client, -export-model)
#   --podman-dir  podman's storage and the cached base (default: DIR/../podman)
# Runs from the source root (the image's build context).
set -euo pipefail

bin_dir=""
podman_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --podman-dir) podman_dir=$2; shift 2 ;;
    *) echo "usage: $0 --bin-dir DIR [--podman-dir DIR]" >&2; exit 2 ;;
  esac
done
[ -n "$bin_dir" ] || { echo "usage: $0 --bin-dir DIR [--podman-dir DIR]" >&2; exit 2; }
bin_dir=$(cd "$bin_dir" && pwd)
export JAGRANK_PODMAN_DIR=${podman_dir:-$bin_dir/../podman}
src=$(pwd)
[ -f "$src/Dockerfile" ] || { echo "FAIL: run from the source root (no Dockerfile in $src)"; exit 1; }

image=localhost/jagrank:cpu-test
name=jagrank-image-test-$$
podman() { "$src/deploy/image/podman.sh" "$@"; }
fail() {
  echo "FAIL: $*"
  exit 1
}
step() { echo "--- $* ($(( SECONDS ))s)"; }

for tool in podman runc mmdebstrap; do
  command -v "$tool" >/dev/null || fail "$tool is not installed: run scripts/install-deps.sh"
done
for b in jagrank-server jagrank-client jagrank-export-model; do
  [ -x "$bin_dir/$b" ] || fail "$bin_dir/$b is missing: build first (make build)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/jagrank-image-test.XXXXXX")
host_pid=""
cleanup() {
  podman rm --force --ignore "$name" "$name-flag" "$name-config" >/dev/null 2>&1 || true
  if [ -n "$host_pid" ]; then kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step "podman works here"
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}}' \
  || fail "podman info failed: podman cannot run on this machine (see the message above)"

step "base image localhost/debian:bookworm"
"$src/deploy/image/debian-base.sh" || fail "could not make the Debian 12 base image"

step "podman build (CPU variant: Debian 12 build and runtime bases)"
podman build --format docker --quiet \
  --build-arg BUILD_BASE=localhost/debian:bookworm \
  --build-arg RUNTIME_BASE=localhost/debian:bookworm \
  -t "$image" "$src" > "$work/build.log" 2>&1 \
  || { tail -n 60 "$work/build.log"; fail "podman build failed (log above)"; }
podman image inspect --format '{{.Size}}' "$image" | awk '{printf "image size: %d MB\n", $1 / 1e6}'

step "every shared library resolves inside the image"
podman run --rm --entrypoint /bin/sh "$image" -c \
  'cd /usr/local/bin && ldd jagrank-server jagrank-client jagrank-loadgen jagrank-export-model' \
  > "$work/ldd.txt" 2>&1 || { cat "$work/ldd.txt"; fail "ldd failed inside the image"; }
if grep -q 'not found' "$work/ldd.txt"; then
  grep -B100 'not found' "$work/ldd.txt" | grep -E ':$|not found'
  fail "shared libraries missing from the image (above)"
fi
grep -q 'libopenblas.so.0 => /' "$work/ldd.txt" || fail "jagrank-server does not load OpenBLAS in the image"

step "weights: jagrank-export-model --seed 4242 into a model repository"
# Not the config's seed: a server that ignored the mounted weights would
# serve the built-in random model and answer different scores.
mkdir -p "$work/models/1"
"$bin_dir/jagrank-export-model" --output "$work/models/1/model.safetensors" --seed 4242 >/dev/null
[ -s "$work/models/1/model.yaml" ] || fail "jagrank-export-model wrote no model.yaml"
chmod -R a+rX "$work/models"   # the container runs as uid 10001
model_args=(--model-config /models/1/model.yaml --model-weights /models/1/model.safetensors)

wait_serving() {  # ADDRESS CONTAINER
  local deadline=$(( SECONDS + 120 ))
  while ! "$bin_dir/jagrank-client" --health --service jagrank.v1.Ranker --address "$1" --timeout-ms 1000 >/dev/null 2>&1; do
    if [ -n "$2" ] && [ "$(podman inspect --format '{{.State.Running}}' "$2")" != "true" ]; then
      podman logs "$2" 2>&1 | tail -n 30
      fail "container $2 exited before SERVING (log above)"
    fi
    [ $SECONDS -lt $deadline ] || { [ -z "$2" ] || podman logs "$2" 2>&1 | tail -n 30; fail "$1 not SERVING after 120 s"; }
    sleep 0.5
  done
}

step "container: weights mounted read-only, gRPC health SERVING"
podman run -d --name "$name" --health-interval disable -p 127.0.0.1::8500 -p 127.0.0.1::9100 \
  -v "$work/models:/models:ro" "$image" --device cpu --cpu-threads 2 "${model_args[@]}" >/dev/null \
  || fail "podman run failed"
grpc=$(podman port "$name" 8500/tcp) || fail "no published port for 8500"
grpc=${grpc/0.0.0.0/127.0.0.1}
echo "container gRPC at $grpc"
wait_serving "$grpc" "$name"
"$bin_dir/jagrank-client" --health --address "$grpc" >/dev/null || fail "health for '' is not SERVING"
podman healthcheck run "$name" || fail "the image's HEALTHCHECK does not pass on a SERVING server"

step "host jagrank-server on the same weights"
"$bin_dir/jagrank-server" --device cpu --cpu-threads 2 --grpc-address "unix:$work/host.sock" --metrics-address '' \
  --model-config "$work/models/1/model.yaml" --model-weights "$work/models/1/model.safetensors" \
  > "$work/host.log" 2>&1 &
host_pid=$!
wait_serving "unix:$work/host.sock" ""

step "one Rank call: container and host scores"
"$bin_dir/jagrank-client" --request-json "$src/tools/example_request.json" --address "$grpc" > "$work/container.txt" \
  || fail "Rank on the container failed"
"$bin_dir/jagrank-client" --request-json "$src/tools/example_request.json" --address "unix:$work/host.sock" \
  > "$work/host.txt" || fail "Rank on the host server failed"
paste "$work/container.txt" "$work/host.txt"
# The header names the model version (a digest of the weights): the same.
version() { sed -n 's/^#.* model_version=\([^ ]*\).*/\1/p' "$1"; }
[ -n "$(version "$work/host.txt")" ] || fail "no model_version in the host's answer"
[ "$(version "$work/container.txt")" = "$(version "$work/host.txt")" ] \
  || fail "the container serves another model version than the host on the same weights"
grep -v '^#' "$work/container.txt" > "$work/container.scores"
grep -v '^#' "$work/host.txt" > "$work/host.scores"
[ "$(wc -l < "$work/host.scores")" -eq 4 ] || fail "expected 4 scores (tools/example_request.json has 4 candidates)"
# Same items in the same order, the same float32 scores within 1e-6.
awk 'NF != 4 || $1 != $3 || ($2 - $4 > 1e-6) || ($4 - $2 > 1e-6) { bad = 1 } END { exit bad }' \
  <(paste -d' ' "$work/container.scores" "$work/host.scores") || fail "container and host scores differ (above)"

step "HEALTHCHECK follows the configured address (--grpc-address, --config)"
printf 'grpc_address: "0.0.0.0:8700"   # moved\nmetrics_address: ""\n' > "$work/moved.yaml"
chmod a+r "$work/moved.yaml"
podman run -d --name "$name-flag" --health-interval disable "$image" --device cpu --cpu-threads 1 \
  --grpc-address=0.0.0.0:8600 --metrics-address '' >/dev/null || fail "podman run (--grpc-address) failed"
podman run -d --name "$name-config" --health-interval disable -v "$work/moved.yaml:/etc/moved.yaml:ro" "$image" \
  --device cpu --cpu-threads 1 --config /etc/moved.yaml >/dev/null || fail "podman run (--config) failed"
for c in "$name-flag" "$name-config"; do
  deadline=$(( SECONDS + 120 ))
  until podman healthcheck run "$c" >/dev/null 2>&1; do
    [ "$(podman inspect --format '{{.State.Running}}' "$c")" = "true" ] \
      || { podman logs "$c" 2>&1 | tail -n 30; fail "container $c exited"; }
    [ $SECONDS -lt $deadline ] || fail "HEALTHCHECK never passed for $c ($(podman inspect --format '{{.Args}}' "$c"))"
    sleep 0.5
  done
  echo "$c: healthy"
done
podman rm --force "$name-flag" "$name-config" >/dev/null

step "podman stop: SIGTERM drains, exit code 0"
stop_start=$SECONDS
podman stop --time 60 "$name" >/dev/null || fail "podman stop failed"
code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
podman logs "$name" 2>&1 | tail -n 5
[ "$code" = "0" ] || fail "the container exited with $code after podman stop (0 expected: SIGTERM drains)"
echo "stopped in $(( SECONDS - stop_start )) s, exit code 0"

# Layers of builds from older sources: kept a day as cache, then dropped, so
# the build tree does not grow with every source change.
podman image prune --force --filter until=24h >/dev/null || true

echo "PASS: deploy_image_test ($(( SECONDS ))s)"
