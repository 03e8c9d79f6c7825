# The README's two commands:
#   make run    install missing Debian packages, build, start the server
#   make test   the same set-up, then the whole test suite (GPU tests skip without a GPU)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)
SERVER_ARGS ?=
IMAGE ?= jagrank:latest
# podman with the repository's settings, its storage in the build tree
PODMAN = JAGRANK_PODMAN_DIR=$(abspath $(BUILD_DIR))/podman deploy/image/podman.sh

.PHONY: all deps configure build run test test-gpu image image-test clean test-asan test-tsan fuzz fuzz-build

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(BUILD_DIR)/bin/jagrank-server --config config/server.yaml $(SERVER_ARGS)

test: build fuzz-build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Only the GPU-labelled tests (on a machine with a GPU).
test-gpu: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L gpu

# The CUDA image (Dockerfile defaults: NVIDIA's CUDA 13 devel and base images,
# which podman pulls from their registry). Push it with
#   deploy/image/podman.sh push $(IMAGE) docker://REGISTRY/jagrank:TAG
image: deps
	$(PODMAN) build --format docker -t $(IMAGE) .

# The CPU image on a local Debian 12 base, built and checked
# (tests/deploy_image_test.sh); `make test` runs it too.
image-test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -R '^deploy_image_test$$'

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR) $(ASAN_BUILD_DIR) $(TSAN_BUILD_DIR)

# Sanitizers and fuzzing: CPU-only builds, each in its own directory, so the
# normal build is never slowed by them.
#   make test-asan   ASan + UBSan build, the whole suite (labels gpu, fuzz and image
#                    (the container) excluded), servers spawned by tests included: any report fails
#   make test-tsan   TSan build, the batcher, executor (server_grpc_test), thread pool and server tests
#   make fuzz        each libFuzzer target of fuzz/ for FUZZ_SECONDS (clang)
ASAN_BUILD_DIR ?= build-asan
TSAN_BUILD_DIR ?= build-tsan
FUZZ_BUILD_DIR ?= $(BUILD_DIR)-fuzz
FUZZ_SECONDS ?= 60
SANITIZER_CMAKE_ARGS = -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJAGRANK_ENABLE_CUDA=OFF $(CMAKE_ARGS)
# server_process_test is left out: its cases assert throughput and drain
# timings of spawned binaries that TSan's 5-15x slowdown does not reach;
# server_grpc_test runs the same server threads in process.
TSAN_TESTS ?= server_batcher_test|server_grpc_test|server_stream_test|server_executors_test|server_hostile_test|server_reload_test|server_rank_request_test|server_config_test|kernels_thread_pool_test|model_forward_test|common_process_test

test-asan: deps
	cmake -S . -B $(ASAN_BUILD_DIR) $(SANITIZER_CMAKE_ARGS) -DJAGRANK_SANITIZER=address
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	scripts/sanitizer-ctest.sh address $(ASAN_BUILD_DIR) -j $(JOBS) -LE 'gpu|fuzz|image'

test-tsan: deps
	cmake -S . -B $(TSAN_BUILD_DIR) $(SANITIZER_CMAKE_ARGS) -DJAGRANK_SANITIZER=thread -DJAGRANK_BUILD_BENCH=OFF
	cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target $(subst |, ,$(TSAN_TESTS))
	scripts/sanitizer-ctest.sh thread $(TSAN_BUILD_DIR) -j $(JOBS) -R '$(TSAN_TESTS)'

fuzz-build: deps
	fuzz/run.sh build $(FUZZ_BUILD_DIR)

fuzz: fuzz-build
	fuzz/run.sh run $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)
