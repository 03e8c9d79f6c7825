#!/usr/bin/env bash
# Installs the Debian packages jagrank needs to build, test and run.
# Idempotent: quiet and fast when everything is present; runs `apt-get update`
# once, and only when something is missing (a fresh machine's lists are stale).
# Usage: scripts/install-deps.sh [--build-only]   (--build-only: skip the test peers, Prometheus and Chromium)
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev libspdlog-dev libyaml-cpp-dev nlohmann-json3-dev
  libgtest-dev libopenblas-dev libgoogle-perftools-dev
)
# Real peers the integration tests drive: the Prometheus server and a headless browser;
# clang and its runtimes for the libFuzzer targets (fuzz/, make fuzz).
test_pkgs=(prometheus chromium curl python3 clang libclang-rt-14-dev)

pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}")
if [ "${1:-}" = "--build-only" ]; then pkgs=("${build_pkgs[@]}"); fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
