#!/usr/bin/env bash
# podman as this repository builds and tests its image: the settings of
# deploy/image/containers.conf (runc, cgroupfs, file events, ulimits), images
# and containers stored in the build tree (JAGRANK_PODMAN_DIR, default
# build/podman), so nothing outside the checkout is touched.
#   deploy/image/podman.sh images
#   deploy/image/podman.sh push jagrank:latest docker://registry.example.com/jagrank:1
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${JAGRANK_PODMAN_DIR:-$here/../../build/podman}
if ! command -v podman >/dev/null; then
  echo "podman.sh: podman is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
export CONTAINERS_CONF=$here/containers.conf
exec podman --root "$dir/storage" --runroot "$dir/run" --tmpdir "$dir/tmp" \
  --storage-driver overlay "$@"
