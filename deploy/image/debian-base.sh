#!/usr/bin/env bash
# Makes the local Debian 12 base image (localhost/debian:bookworm) that the
# CPU image builds on, without a registry: a minbase root file system from
# Debian's mirrors (mmdebstrap), imported into podman. Both steps are cached
# in the podman folder of the build tree: the tarball is made once, and the
# import happens only when the image is missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${JAGRANK_PODMAN_DIR:-$here/../../build/podman}
image=localhost/debian:bookworm
mkdir -p "$dir"
tarball=$dir/debian-bookworm-minbase.tar

if "$here/podman.sh" image exists "$image"; then exit 0; fi
if [ ! -s "$tarball" ]; then
  echo "debian-base: mmdebstrap bookworm (minbase) -> $tarball"
  # Written aside and renamed, so that an interrupted run leaves no tarball.
  rm -rf "$dir/partial.tar"
  mmdebstrap --quiet --format=tar --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    bookworm "$dir/partial.tar" > "$dir/mmdebstrap.log" 2>&1 \
    || { tail -n 40 "$dir/mmdebstrap.log"; echo "debian-base: mmdebstrap failed (log above)" >&2; exit 1; }
  mv "$dir/partial.tar" "$tarball"
fi
echo "debian-base: podman import $tarball $image"
"$here/podman.sh" import --quiet "$tarball" "$image" >/dev/null
