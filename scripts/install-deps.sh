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
# openssl makes the TLS tests' certificates; clang and its runtimes build the
# libFuzzer targets (fuzz/, make fuzz); the Python package's tests (python/tests:
# the PyTorch twin, its gRPC stubs, pip install ./python); podman (with runc,
# and mmdebstrap for the local Debian base) for deploy_image_test, which builds
# and runs the container image.
test_pkgs=(prometheus chromium curl python3 openssl
  python3-torch python3-numpy python3-yaml python3-grpcio python3-grpc-tools python3-protobuf python3-pip
  podman buildah runc mmdebstrap uidmap
  clang libclang-rt-14-dev)

pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}")
if [ "${1:-}" = "--build-only" ]; then pkgs=("${build_pkgs[@]}"); fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# `kubectl kustomize` renders deploy/k8s in metrics_deploy_test: Debian's
# kubernetes-client. Where /usr/bin/kubectl belongs to another package (a
# vendor's kubectl), that one stays, and Debian's package is unpacked beside
# it instead, into $debian_kubectl_dir (the test looks there first).
debian_kubectl_dir=/opt/jagrank/kubernetes-client
kubectl_unpack=0
if [ "${1:-}" != "--build-only" ] && ! installed kubernetes-client; then
  owner=$(dpkg -S /usr/bin/kubectl 2>/dev/null | cut -d: -f1 || true)
  if [ -z "$owner" ]; then
    pkgs+=(kubernetes-client)
  elif [ ! -x "$debian_kubectl_dir/usr/bin/kubectl" ]; then
    kubectl_unpack=1
  fi
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! installed "$p"; then missing+=("$p"); fi
done
[ ${#missing[@]} -eq 0 ] && [ $kubectl_unpack -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ $kubectl_unpack -eq 1 ]; then
  echo "install-deps: /usr/bin/kubectl belongs to package $owner; unpacking Debian's kubernetes-client into $debian_kubectl_dir"
  tmp=$(mktemp -d) && chmod 777 "$tmp"   # apt-get download writes as user _apt
  (cd "$tmp" && apt-get download -qq kubernetes-client)
  $SUDO mkdir -p "$debian_kubectl_dir"
  $SUDO dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$debian_kubectl_dir"
  rm -rf "$tmp"
fi
echo "install-deps: done"
