#!/bin/sh
# Prints, one a line, the Debian packages that own the shared libraries the
# given binaries load, as `ldd` resolves them here. The runtime stage of the
# Dockerfile installs exactly these, so the list cannot go stale.
#
# Each library is resolved through its symlinks first: a soname is often a
# link no package owns (libopenblas.so.0 goes through /etc/alternatives to
# openblas-pthread/libopenblas.so.0, owned by libopenblas0-pthread). With
# merged /usr, dpkg may list the file under /lib instead of /usr/lib: both
# are tried.
#
# Fails, naming the library, when one does not resolve or no package owns it;
# libraries that the NVIDIA container runtime mounts from the host driver
# (libcuda, libnvidia-*) are left out.
# Usage: runtime-packages.sh BINARY...
set -eu

[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }

# The driver's libraries: never in an image, always from the host.
is_driver_lib() {
  case "$(basename "$1")" in
    libcuda.so*|libnvidia-*|libnvcuvid.so*) return 0 ;;
  esac
  return 1
}

libs=$(mktemp)
trap 'rm -f "$libs"' EXIT
for binary in "$@"; do
  ldd "$binary" > "$libs.ldd" || { echo "runtime-packages: ldd $binary failed" >&2; exit 1; }
  # "libfoo.so.1 => /path (addr)", "libfoo.so.1 => not found", "/lib64/ld-linux-x86-64.so.2 (addr)"
  while read -r name arrow path _; do
    if [ "$arrow" = "=>" ] && [ "$path" = "not" ]; then
      if is_driver_lib "$name"; then continue; fi
      echo "runtime-packages: $binary needs $name, which ldd does not find" >&2
      rm -f "$libs.ldd"
      exit 1
    fi
    if [ "$arrow" = "=>" ]; then echo "$path"; fi
    case "$name" in /*) echo "$name" ;; esac
  done < "$libs.ldd" >> "$libs"
  rm -f "$libs.ldd"
done

owners=$(mktemp)
trap 'rm -f "$libs" "$owners"' EXIT
for lib in $(sort -u "$libs"); do
  if is_driver_lib "$lib"; then continue; fi
  real=$(readlink -f "$lib")
  owner=""
  for candidate in "$real" "${real#/usr}" "/usr$real"; do
    owner=$(dpkg -S "$candidate" 2>/dev/null | grep -v '^diversion by' | head -n1 | cut -d: -f1 | cut -d, -f1) || true
    [ -n "$owner" ] && break
  done
  if [ -z "$owner" ]; then
    echo "runtime-packages: no package owns $lib (resolved: $real)" >&2
    exit 1
  fi
  echo "$owner" >> "$owners"
done
sort -u "$owners"
