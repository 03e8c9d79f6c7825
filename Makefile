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

.PHONY: all deps configure build run test test-gpu image image-test clean

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

test: build
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
	rm -rf $(BUILD_DIR)
