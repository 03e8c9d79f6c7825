# jagrank container: built with the README's recipe (scripts/install-deps.sh
# and the Makefile), shipped on CUDA's runtime image with only what runs.
#
#   docker build -t jagrank .
#   docker run --gpus all -p 8500:8500 -p 9100:9100 jagrank
#
# Without a GPU the server falls back to the CPU backend (--device auto).
ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

# ---- build: the same steps as a developer's checkout ----------------------
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
WORKDIR /src
# Dependencies first, so that a source change keeps this layer cached.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
# `make build` is the README's build; `-o deps` because the line above already
# ran its deps step (without the test-only peers: Prometheus, Chromium).
RUN make -o deps build BUILD_DIR=/src/build \
      CMAKE_ARGS="-DJAGRANK_BUILD_TESTS=OFF -DJAGRANK_BUILD_BENCH=OFF"
# The runtime stage installs exactly the Debian packages that own the shared
# libraries the binaries load (no hand-kept list to fall out of date).
RUN mkdir -p /out/bin \
 && cp build/bin/jagrank-server build/bin/jagrank-client build/bin/jagrank-loadgen /out/bin/ \
 && for b in /out/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u \
    | while read -r lib; do \
        dpkg -S "*/$(basename "$(dirname "$lib")")/$(basename "$lib")" 2>/dev/null \
          | cut -d: -f1 | grep -v -- '-dev$' | head -n1; \
      done | sort -u > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

# ---- runtime: binaries, their shared libraries, the default configs --------
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update -qq \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y -qq --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin jagrank
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /src/config/ /etc/jagrank/
USER 10001:10001
WORKDIR /tmp
EXPOSE 8500 9100
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["jagrank-client", "--health", "--address", "127.0.0.1:8500", "--timeout-ms", "2000"]
ENTRYPOINT ["jagrank-server", "--config", "/etc/jagrank/server.yaml"]
CMD []
