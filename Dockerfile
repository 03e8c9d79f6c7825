# jagrank container: compiled in the build stage with the README's recipe
# (scripts/install-deps.sh and the Makefile), shipped on the smallest base that
# carries the CUDA libraries the server loads, with only the Debian/Ubuntu
# packages its binaries need.
#
#   make image                      # the CUDA image, jagrank:latest (podman, deploy/image/podman.sh)
#   make image-test                 # a CPU variant on a local Debian 12 base, built and checked
#   docker build -t jagrank .       # the same CUDA image with docker
#
# Base images are build arguments. The defaults are NVIDIA's CUDA images: the
# devel image compiles (nvcc, cuBLAS headers), the base image runs (CUDA
# runtime only; the runtime stage adds cuBLAS, the one CUDA library the
# server links besides cudart). With a base without nvcc (plain Debian 12, as
# `make image-test` uses) CMake builds the CPU backend only.
ARG BUILD_BASE=docker.io/nvidia/cuda:13.0.0-devel-ubuntu24.04
ARG RUNTIME_BASE=docker.io/nvidia/cuda:13.0.0-base-ubuntu24.04

# ---- build: the same steps as a developer's checkout ----------------------
FROM ${BUILD_BASE} AS build
# One fat binary for the GPUs people deploy on: SASS for sm_80 (A100), sm_86
# (A10, A40), sm_89 (L4, L40S) and sm_90 (H100, H200), plus compute_90 PTX for
# newer GPUs to JIT. Because the list names 90, kernels/attention adds the wgmma
# kernels, compiled for sm_90a only, and picks them at run time on compute
# capability 9.0; every other GPU runs the mma.sync kernels.
ARG CUDA_ARCHITECTURES="80-real;86-real;89-real;90"
ARG JOBS=
WORKDIR /src
# Dependencies first, so that a source change keeps this layer cached.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
# `make build` is the README's build; `-o deps` because the line above already
# ran its deps step (without the test-only peers).
RUN make -o deps build BUILD_DIR=/src/build ${JOBS:+JOBS=$JOBS} \
      CMAKE_ARGS="-DJAGRANK_BUILD_TESTS=OFF -DJAGRANK_BUILD_BENCH=OFF '-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}'"
# The runtime stage installs exactly the packages that own the shared
# libraries the binaries load (symlinks resolved first: see the script).
RUN mkdir -p /out/bin \
 && cp build/bin/jagrank-server build/bin/jagrank-client build/bin/jagrank-loadgen \
       build/bin/jagrank-export-model /out/bin/ \
 && deploy/image/runtime-packages.sh /out/bin/* > /out/runtime-packages.txt \
 && echo "runtime packages:" $(cat /out/runtime-packages.txt)

# ---- runtime: binaries, their shared libraries, the default configs --------
FROM ${RUNTIME_BASE} AS runtime
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive xargs -a /tmp/runtime-packages.txt \
      apt-get install -y -qq --no-install-recommends >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin jagrank
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /src/config/ /etc/jagrank/
COPY --from=build /src/deploy/image/healthcheck.sh /usr/local/bin/jagrank-healthcheck
# Every shared library of every binary resolves here (the driver's libcuda
# comes from the host at run time through the NVIDIA container runtime).
RUN cd /usr/local/bin \
 && if ldd jagrank-server jagrank-client jagrank-loadgen jagrank-export-model \
      | grep 'not found' | grep -v 'libcuda\.so'; then \
      echo "a shared library above is missing from the image" >&2; exit 1; fi
# Trained models: /models/<version>/{model.yaml,model.safetensors}, mounted
# read-only (deploy/README.md, "Models").
RUN mkdir -p /models
USER 10001:10001
WORKDIR /tmp
EXPOSE 8500 9100
# Asks the gRPC health service at the address the server was started with
# (its --grpc-address, else its --config file's grpc_address, else 8500).
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["jagrank-healthcheck"]
# The server is PID 1: it handles SIGTERM (drain, then exit 0), so `docker
# stop` / `podman stop` / Kubernetes drain it without an init process.
ENTRYPOINT ["jagrank-server", "--config", "/etc/jagrank/server.yaml"]
CMD []
